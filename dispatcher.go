package captchaq

import (
	"context"
	"sync"
	"time"

	"github.com/captchaq/captchaq/internal/lane"
	"github.com/captchaq/captchaq/internal/sched"
)

// Submits in progress at once (the in.php request and the checkpoint after
// it) are bounded: enough to fill free threads quickly, few enough not to
// flood the provider, and a bound on the tasks accepted but not yet
// durable. The bound is submitConcurrencyMin, or one per
// submitConcurrencyPerThreads threads on large plans (a 5,000-thread plan
// refills its threads with 78 submits at once).
const (
	submitConcurrencyMin        = 8
	submitConcurrencyPerThreads = 64
)

// submitConcurrency is the bound on submits in progress for a plan.
func submitConcurrency(threads int) int {
	return min(threads, max(submitConcurrencyMin, threads/submitConcurrencyPerThreads))
}

// dispatcher hands queued tasks to the submitter while threads are free:
// it expires tasks past their deadline, honours pauses and holds, and
// starts one submit per free slot, several at a time.
// The other parts ask it for a pass by Queue.wakeDispatcher.
type dispatcher struct {
	q *Queue
}

func newDispatcher(q *Queue) *dispatcher {
	return &dispatcher{q: q}
}

func (d *dispatcher) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	// Each lane's pool (several providers each have their own) wakes the
	// loop when it gets threads.
	var forwarders sync.WaitGroup
	defer forwarders.Wait()
	for _, l := range d.q.lanes {
		pool := l.Pool()
		if pool == nil {
			continue
		}
		forwarders.Go(func() {
			for {
				select {
				case <-pool.Ready():
					d.q.wakeDispatcher()
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
			wait = max(next.Sub(d.q.now()), time.Millisecond)
		}
		timer.Reset(wait)
		select {
		case <-d.q.dispatch:
		case <-timer.C:
		case <-ctx.Done():
			return
		}
	}
}

// pass does one round of work and returns when the next round is due
// without a wake (zero: only on wake). Lanes are filled in order of
// preference, so the first provider's threads are taken before any task
// spills over to a later one (see routeDecision).
func (d *dispatcher) pass() time.Time {
	q := d.q
	now := q.now()
	var (
		launch  []*taskState
		expired []sched.Item[*taskState]
		next    time.Time
	)
	q.table.Do(func(tx table) {
		expired = tx.Waiting().Expired(now)
		next = q.probes(now)
		soonest := func(t time.Time) {
			if !t.IsZero() && (next.IsZero() || t.Before(next)) {
				next = t
			}
		}
		launch = q.fill(tx, now, soonest)
		soonest(tx.Waiting().NextWake(now))
		// Told under the table's lock, a pool's demand is never older
		// than a task the table took since. Told after it, an adoption
		// in between (Adopt registers under the lock, then amqp's pool
		// counts the task busy) was overwritten by a count read before
		// it, and the pool could give back the adopted task's thread
		// for another worker to submit on (TestFleetSharesOnePlan).
		for _, dm := range q.poolDemandsLocked(tx, now, soonest) {
			dm.pool.Want(dm.busy, dm.waiting)
		}
	})
	for _, it := range expired {
		st := it.Value
		q.finish(st, q.failure(st, st.rec.Attempts, CodeExpired, ErrExpired.Error()))
	}
	for _, st := range launch {
		q.wg.Add(1)
		go q.submit(st)
	}
	return next
}

// fill takes a slot at each lane for the waiting tasks it may take now,
// lanes in order of preference, and returns the tasks to submit. It runs
// inside q.table.Do.
func (q *Queue) fill(tx table, now time.Time, soonest func(time.Time)) []*taskState {
	var launch []*taskState
	for _, l := range q.lanes {
		if until, blocked := l.SendHold(now); blocked {
			soonest(until)
			continue
		}
		concurrency := submitConcurrency(l.Threads())
		pool := l.Pool()
		// Only this loop starts submits, so the count read here only
		// falls before the next StartSubmit.
		for l.Submits() < concurrency {
			if pool != nil && l.Limiter.InUse() >= pool.Held() {
				break
			}
			if !l.Limiter.TryAcquire(now) {
				if h := l.Limiter.HoldUntil(); h.After(now) {
					soonest(h)
				}
				break
			}
			it, ok := tx.Waiting().PopFunc(now, func(it sched.Item[*taskState]) bool {
				take, retry := q.routeDecision(l, it.Value, now)
				soonest(retry)
				return take
			})
			if !ok {
				l.Limiter.Release()
				break
			}
			st := it.Value
			st.slot, st.lane, st.price = true, l, priceAt(l, st)
			l.StartSubmit(st.price)
			launch = append(launch, st)
		}
	}
	return launch
}

// poolDemand is what a lane with a ThreadPool tells it after a pass.
type poolDemand struct {
	pool          lane.Pool
	busy, waiting int
}

// poolDemandsLocked is the demand of each lane that has a pool: its
// threads in use, and the queued tasks that could use one of its threads
// now. With one provider, every queued task; with several, the tasks
// routing would give it now (see routeDecision), so a later provider's
// pool is asked for threads only for tasks that spill over to it; soonest
// hears when more would (a lane that holds no thread pops nothing, so
// the pass does not learn it otherwise). It runs inside q.table.Do.
func (q *Queue) poolDemandsLocked(tx table, now time.Time, soonest func(time.Time)) []poolDemand {
	var out []poolDemand
	for _, l := range q.lanes {
		pool := l.Pool()
		if pool == nil {
			continue
		}
		dm := poolDemand{pool: pool, busy: l.Limiter.InUse()}
		_, blocked := l.SendHold(now)
		switch {
		case blocked:
		case !q.multi():
			dm.waiting = tx.Waiting().Len()
		default:
			tx.Waiting().Each(func(it sched.Item[*taskState]) {
				ok, retry := q.routeDecision(l, it.Value, now)
				if ok {
					dm.waiting++
				}
				soonest(retry)
			})
		}
		out = append(out, dm)
	}
	return out
}
