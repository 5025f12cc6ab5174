package captchaq

import (
	"context"
	"math/rand/v2"
	"time"
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
type dispatcher struct {
	q      *Queue
	wakeCh chan struct{}
}

func newDispatcher(q *Queue) *dispatcher {
	return &dispatcher{q: q, wakeCh: make(chan struct{}, 1)}
}

// wake asks for a pass soon; it never blocks.
func (d *dispatcher) wake() {
	select {
	case d.wakeCh <- struct{}{}:
	default:
	}
}

func (d *dispatcher) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var poolReady <-chan struct{}
	if p := d.q.cfg.ThreadPool; p != nil {
		poolReady = p.Ready()
	}
	for {
		next := d.pass()
		wait := time.Hour
		if !next.IsZero() {
			wait = max(next.Sub(d.q.now()), time.Millisecond)
		}
		timer.Reset(wait)
		select {
		case <-d.wakeCh:
		case <-poolReady:
		case <-timer.C:
		case <-ctx.Done():
			return
		}
	}
}

// pass does one round of work and returns when the next round is due
// without a wake (zero: only on wake).
func (d *dispatcher) pass() time.Time {
	q := d.q
	now := q.now()
	concurrency := submitConcurrency(q.cfg.Threads)
	pool := q.cfg.ThreadPool
	var launch []*taskState
	q.mu.Lock()
	expired := q.queue.Expired(now)
	var next time.Time
	waiting := 0 // tasks that could use a thread now, for the pool
	switch p := q.pausedLocked(now); {
	case p != nil:
		next = p.Until
	case now.Before(q.submitsHeldUntil):
		next = q.submitsHeldUntil
	default:
		waiting = q.queue.Len()
		for q.submits < concurrency {
			if pool != nil && q.limiter.InUse() >= pool.Held() {
				break
			}
			if !q.limiter.TryAcquire(now) {
				if h := q.limiter.HoldUntil(); h.After(now) {
					next = h
				}
				break
			}
			it, ok := q.queue.Pop(now)
			if !ok {
				q.limiter.Release()
				break
			}
			st := it.Value
			st.slot = true
			q.submits++
			launch = append(launch, st)
		}
	}
	if w := q.queue.NextWake(); !w.IsZero() && (next.IsZero() || w.Before(next)) {
		next = w
	}
	busy := q.limiter.InUse()
	waiting = max(waiting-len(launch), 0)
	q.mu.Unlock()
	if pool != nil {
		pool.Want(busy, waiting)
	}
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

// backoff is the wait before retry number n (1-based): exponential from
// RetryBackoff up to RetryBackoffMax, with jitter in [d/2, d] so many
// tasks failing together do not return together.
func (q *Queue) backoff(n int) time.Duration {
	d := q.cfg.RetryBackoff
	for i := 1; i < n && d < q.cfg.RetryBackoffMax; i++ {
		d *= 2
	}
	d = min(d, q.cfg.RetryBackoffMax)
	return d/2 + rand.N(d/2+1)
}
