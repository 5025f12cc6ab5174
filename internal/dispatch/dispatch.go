// Package dispatch is a queue's dispatcher: the loop that hands waiting
// tasks to the free slots of the queue's lanes (internal/lane).
//
// A Loop owns when a pass runs: its wake (a channel of one, so a wake
// never blocks and wakes that come together are one pass), its timer (the
// next pass due without a wake, as the last pass said) and the goroutines
// that turn a lane's thread pool getting threads into a wake. What a pass
// does is its owner's, which knows the tasks: the queue's pass runs inside
// its task table's lock, expires tasks past their deadline, starts the
// probes of a provider that is down and starts the submits Fill took
// slots for. Fill and Demands are the lanes' side of a pass: a slot per
// submit under each lane's hold, its bound on submits at once, its
// limiter and its pool, and what each pool is told of the lane's demand.
package dispatch

import (
	"context"
	"sync"
	"time"

	"github.com/captchaq/captchaq/internal/lane"
	"github.com/captchaq/captchaq/internal/sched"
)

// Loop runs its pass when woken (Wake), when the last pass said the next
// was due, or when a lane's pool has threads.
type Loop struct {
	pass  func() (next time.Time)
	now   func() time.Time
	lanes []*lane.Lane
	wake  chan struct{}
}

// New returns a Loop over lanes. pass does one round of work and returns
// when the next round is due without a wake (zero: only on a wake); now
// is the owner's clock.
func New(lanes []*lane.Lane, now func() time.Time, pass func() (next time.Time)) *Loop {
	return &Loop{pass: pass, now: now, lanes: lanes, wake: make(chan struct{}, 1)}
}

// Wake asks for a pass soon; it never blocks, and wakes that come before
// the pass starts are one pass.
func (d *Loop) Wake() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Run runs passes until ctx ends: one at once, then one per wake or when
// due. Each lane's pool (several providers each have their own) wakes it
// when it gets threads.
func (d *Loop) Run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var forwarders sync.WaitGroup
	defer forwarders.Wait()
	for _, l := range d.lanes {
		pool := l.Pool()
		if pool == nil {
			continue
		}
		forwarders.Go(func() {
			for {
				select {
				case <-pool.Ready():
					d.Wake()
				case <-ctx.Done():
					return
				}
			}
		})
	}
	for {
		next := d.pass()
		wait := time.Hour
		if !next.IsZero() {
			wait = max(next.Sub(d.now()), time.Millisecond)
		}
		timer.Reset(wait)
		select {
		case <-d.wake:
		case <-timer.C:
		case <-ctx.Done():
			return
		}
	}
}

// Submits in progress at once at a lane (the in.php request and the
// checkpoint after it) are bounded: enough to fill free threads quickly,
// few enough not to flood the provider, and a bound on the tasks accepted
// but not yet durable. The bound is concurrencyMin, or one per
// concurrencyPerThreads threads on large plans (a 5,000-thread plan
// refills its threads with 78 submits at once).
const (
	concurrencyMin        = 8
	concurrencyPerThreads = 64
)

// Concurrency is the bound on submits in progress at a lane of threads
// threads.
func Concurrency(threads int) int {
	return min(threads, max(concurrencyMin, threads/concurrencyPerThreads))
}

// Tasks is what a pass asks its owner of a waiting task v.
type Tasks[T any] struct {
	// Route tells whether lane l may take v at now, and if not, when it
	// may (zero: not by waiting).
	Route func(l *lane.Lane, v T, now time.Time) (take bool, retry time.Time)
	// Price is what v's attempt at l costs.
	Price func(l *lane.Lane, v T) float64
	// Taken, when set, is told that Fill took v for a submit at l, before
	// it asks Route of the next task.
	Taken func(l *lane.Lane, v T)
}

// Launch is a waiting task Fill took a slot for: at Lane, for Price. Its
// owner submits it there and ends the submit (lane.Ledger.EndSubmit) with
// that price.
type Launch[T any] struct {
	Value T
	Lane  *lane.Lane
	Price float64
}

// Fill takes a slot at each lane for the waiting tasks it may take now,
// lanes in order of preference, so the first lane's threads are taken
// before a task spills over to a later one; each task taken leaves
// waiting and counts as a submit in progress at its lane
// (lane.Ledger.StartSubmit). A lane takes none while its submits are held
// (paused, down, rate limited), and stops at its bound on submits at once
// (Concurrency), at the threads its pool holds, at its limiter, or when no
// waiting task may go to it (tasks.Route). soonest hears each time at
// which more could go: a hold's end, the limiter's, a task's retry. Fill
// runs where waiting may be changed (the task table's lock), and only one
// Fill runs at a time: the submit count it reads only falls before the
// next.
func Fill[T any](lanes []*lane.Lane, waiting *sched.Scheduler[T], now time.Time, tasks Tasks[T], soonest func(time.Time)) []Launch[T] {
	var launch []Launch[T]
	for _, l := range lanes {
		if until, blocked := l.Health.SendHold(now); blocked {
			soonest(until)
			continue
		}
		concurrency := Concurrency(l.Threads())
		pool := l.Pool()
		for l.Ledger.Submits() < concurrency {
			if pool != nil && l.Limiter.InUse() >= pool.Held() {
				break
			}
			if !l.Limiter.TryAcquire(now) {
				if h := l.Limiter.HoldUntil(); h.After(now) {
					soonest(h)
				}
				break
			}
			it, ok := waiting.PopFunc(now, func(it sched.Item[T]) bool {
				take, retry := tasks.Route(l, it.Value, now)
				soonest(retry)
				return take
			})
			if !ok {
				l.Limiter.Release()
				break
			}
			if tasks.Taken != nil {
				tasks.Taken(l, it.Value)
			}
			price := tasks.Price(l, it.Value)
			l.Ledger.StartSubmit(price)
			launch = append(launch, Launch[T]{Value: it.Value, Lane: l, Price: price})
		}
	}
	return launch
}

// Demand is what a lane with a pool tells it after a pass
// (lane.Pool.Want): its threads in use and the waiting tasks that could
// use one of its threads now.
type Demand struct {
	Pool          lane.Pool
	Busy, Waiting int
}

// Demands is the demand of each lane that has a pool. A lane whose
// submits are held wants no thread for waiting tasks. With one lane,
// every waiting task is its; with several, the tasks tasks.Route gives it
// now, so a later lane's pool is asked for threads only for tasks that
// spill over to it, and soonest hears when more would (a lane that holds
// no thread takes nothing in Fill, so the pass does not learn it there).
// It runs where Fill does, after it.
func Demands[T any](lanes []*lane.Lane, waiting *sched.Scheduler[T], now time.Time, tasks Tasks[T], soonest func(time.Time)) []Demand {
	var out []Demand
	for _, l := range lanes {
		pool := l.Pool()
		if pool == nil {
			continue
		}
		dm := Demand{Pool: pool, Busy: l.Limiter.InUse()}
		_, blocked := l.Health.SendHold(now)
		switch {
		case blocked:
		case len(lanes) == 1:
			dm.Waiting = waiting.Len()
		default:
			waiting.Each(func(it sched.Item[T]) {
				ok, retry := tasks.Route(l, it.Value, now)
				if ok {
					dm.Waiting++
				}
				soonest(retry)
			})
		}
		out = append(out, dm)
	}
	return out
}
