package captchaq

import (
	"time"

	"github.com/captchaq/captchaq/internal/dispatch"
	"github.com/captchaq/captchaq/internal/sched"
)

// The dispatcher hands queued tasks to the submitter while threads are
// free. Its loop (internal/dispatch: the wake, the timer, the pools'
// wakes) runs pass; the other parts ask for one by Queue.wakeDispatcher.

// pass does one round of work and returns when the next round is due
// without a wake (zero: only on wake): it expires tasks past their
// deadline, fails those of a type every provider refuses, starts the probes of a provider that is down, takes the
// lanes' free slots for the waiting tasks (dispatch.Fill, lanes in order
// of preference: see lane.Set.Route), tells each lane's pool its demand and
// starts one submit per slot taken.
func (q *Queue) pass() time.Time {
	now := q.now()
	var (
		launch   []dispatch.Launch[*taskState]
		expired  []sched.Item[*taskState]
		unserved []*taskState
		next     time.Time
	)
	q.table.Do(func(tx table) {
		expired = tx.Waiting().Expired(now)
		if q.unserved.Swap(false) {
			unserved = q.unservedWaiting(tx, now)
		}
		next = q.lanes.Probes(now, q.probe)
		soonest := func(t time.Time) {
			if !t.IsZero() && (next.IsZero() || t.Before(next)) {
				next = t
			}
		}
		launch = dispatch.Fill(q.lanes.Lanes(), tx.Waiting(), now, q.waiting, soonest)
		for _, job := range launch {
			st := job.Value
			st.slot, st.lane, st.price = true, job.Lane, job.Price
		}
		soonest(tx.Waiting().NextWake(now))
		// Told under the table's lock, a pool's demand is never older
		// than a task the table took since. Told after it, an adoption
		// in between (Adopt registers under the lock, then amqp's pool
		// counts the task busy) was overwritten by a count read before
		// it, and the pool could give back the adopted task's thread
		// for another worker to submit on (TestFleetSharesOnePlan).
		for _, dm := range dispatch.Demands(q.lanes.Lanes(), tx.Waiting(), now, q.waiting, soonest) {
			dm.Pool.Want(dm.Busy, dm.Waiting)
		}
	})
	for _, it := range expired {
		st := it.Value
		q.finish(st, q.failure(st, st.rec.Attempts, CodeExpired, ErrExpired.Error()))
	}
	for _, st := range unserved {
		q.finish(st, q.failure(st, st.rec.Attempts, CodeUnsupportedType, q.unservedText(st.route, now)))
	}
	for _, job := range launch {
		q.wg.Add(1)
		go q.submit(job.Value)
	}
	return next
}
