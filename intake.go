package captchaq

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/captchaq/captchaq/provider"
)

// Check validates t as Submit does: Task.CheckFor the queue's providers
// (Task.Validate's rules for a queue of one Provider). A door in front of
// the queue (the server's) checks with it and hands the ValidTask on
// (SubmitValid), so the queue does not validate the task again.
func (q *Queue) Check(t Task) (ValidTask, error) {
	return t.CheckFor(q.checkedFor())
}

// Validate is Check for a door that only refuses: the error alone.
func (q *Queue) Validate(t Task) error {
	_, err := q.Check(t)
	return err
}

// check is Check returning the provider task as checked: the doors
// that register a task themselves (Adopt, a record the Store holds).
func (q *Queue) check(t Task) (provider.Checked, error) {
	v, err := q.Check(t)
	return v.Checked(), err
}

// checkStored checks a task the Store holds, resumed at Start: that is
// its door. A task that fails is sent unchecked, and the provider's
// client refuses it.
func (q *Queue) checkStored(t Task) provider.Checked {
	pt, err := q.check(t)
	if err != nil {
		return provider.Unchecked(t.ProviderTask())
	}
	return pt
}

// checkedFor is the providers the queue validates tasks for: none (the
// one Provider's rules) or Config.Providers.
func (q *Queue) checkedFor() []ProviderConfig {
	if q.lanes.Single() {
		return nil
	}
	return q.cfg.Providers
}

// SubmitValid is SubmitBatchFunc for tasks a door in front of the queue
// validated (Queue.Check): they are not validated again. A task not
// checked for this queue's providers (CheckedFor) is, and refused as
// SubmitBatchFunc refuses it.
func (q *Queue) SubmitValid(ctx context.Context, tasks []ValidTask, fn func(i int, r Result)) (errs []error) {
	vs := make([]ValidTask, len(tasks))
	errs = make([]error, len(tasks))
	for i, v := range tasks {
		vs[i] = v
		if !v.CheckedFor(q.checkedFor()) {
			vs[i], errs[i] = q.Check(v.Task())
		}
	}
	return q.acceptValid(ctx, vs, errs, func(i int) func(Result, error) {
		return func(r Result, err error) {
			if err == nil {
				fn(i, r)
			}
		}
	})
}

// acceptBatch validates tasks (the door of SubmitBatchFunc, Submit and
// the streams) and accepts the valid ones (acceptValid); waiter(i) is
// task i's waiter. It returns each task's error, as SubmitBatchFunc
// documents.
func (q *Queue) acceptBatch(ctx context.Context, tasks []Task, waiter func(i int) func(Result, error)) []error {
	vs := make([]ValidTask, len(tasks))
	errs := make([]error, len(tasks))
	for i, t := range tasks {
		vs[i], errs[i] = q.Check(t)
	}
	return q.acceptValid(ctx, vs, errs, waiter)
}

// acceptValid stores the new tasks of vs and registers them, in order,
// skipping those refused already (errs[i] set); waiter(i) is task i's
// waiter. It returns each task's error.
//
// Each round stores, in one Store call, as many tasks as there is room
// for. When the queue is full, a round waits for room for an eighth of
// MaxQueued (or the rest of the batch, if less) rather than storing a task
// for each one that finishes: the queue still holds the other seven
// eighths. An id is claimed while it is stored, so that one id is stored
// and registered once however many callers submit it; a task whose id is
// claimed (by another caller, or by an earlier task of the batch) waits
// for a later round, and rounds release their claims, so two batches never
// wait for each other.
func (q *Queue) acceptValid(ctx context.Context, vs []ValidTask, errs []error, waiter func(i int) func(Result, error)) []error {
	in := &intakeBatch{
		tasks: make([]Task, len(vs)),
		pts:   make([]provider.Checked, len(vs)),
		ws:    make([]func(Result, error), len(vs)),
		errs:  errs,
	}
	for i, v := range vs {
		in.tasks[i], in.pts[i] = v.Task(), v.Checked()
		if errs[i] == nil {
			in.ws[i] = waiter(i)
		}
	}
	return q.intake(ctx, in)
}

// intake accepts the tasks of in not refused already (errs[i] set), as
// acceptValid says, and returns each task's error: the one intake of
// every door (Adopt's records too).
func (q *Queue) intake(ctx context.Context, in *intakeBatch) []error {
	todo := make([]int, 0, len(in.tasks))
	for i := range in.tasks {
		if in.errs[i] == nil {
			todo = append(todo, i)
		}
	}
	// Known and unfinished: attach without waiting for room.
	todo = q.attachKnown(in, todo)
	now := q.now()
	for len(todo) > 0 {
		capacity, err := q.waitCapacity(ctx, min(len(todo), max(1, q.cfg.MaxQueued/8)))
		if err == nil {
			todo, err = q.intakeRound(ctx, in, todo, capacity, now)
		}
		if err != nil {
			for _, i := range todo {
				in.errs[i] = err
			}
			break
		}
	}
	return in.errs
}

// intakeBatch is a batch on its way in: task i, as checked (carried to the
// provider), its waiter and its error; for Adopt, the record handed over.
type intakeBatch struct {
	tasks []Task
	pts   []provider.Checked
	ws    []func(Result, error)
	errs  []error
	// adopted[i] is the record Adopt hands over for task i (nil: none):
	// taken as it is (its deadline, attempts and captcha id), and, stored
	// already and finished, answered with the stored result, not renewed.
	adopted []*Record
}

// adoptedAt is the record handed over for task i, or nil.
func (in *intakeBatch) adoptedAt(i int) *Record {
	if in.adopted == nil {
		return nil
	}
	return in.adopted[i]
}

// attachKnown adds the waiters of tasks already registered to them (or
// refuses a task whose id names another one), and returns the others.
func (q *Queue) attachKnown(in *intakeBatch, todo []int) []int {
	left := todo[:0]
	q.table.Do(func(tx table) {
		for _, i := range todo {
			if !attachLocked(tx, in, i) {
				left = append(left, i)
			}
		}
	})
	return left
}

// attachLocked adds task i's waiter to the registered task of its id, or
// refuses it when that task is another one. It returns false when no
// task of the id is registered. It runs inside q.table.Do.
func attachLocked(tx table, in *intakeBatch, i int) bool {
	st, ok := tx.Get(in.tasks[i].ID)
	if !ok {
		return false
	}
	if in.errs[i] = st.rec.Conflict(in.tasks[i]); in.errs[i] == nil {
		st.waiters = append(st.waiters, in.ws[i])
	}
	return true
}

// intakeRound claims the ids of up to capacity tasks from the start of todo,
// stores those tasks in one Store call and registers them. It returns the
// tasks left for another round, or with an error the tasks it did not
// accept.
func (q *Queue) intakeRound(ctx context.Context, in *intakeBatch, todo []int, capacity int, now time.Time) ([]int, error) {
	claimed, left, busy := q.claimIDs(in, todo, capacity)
	if len(claimed) == 0 {
		if busy == nil {
			return left, nil
		}
		// Every id left is being stored by someone else: wait for one.
		select {
		case <-busy:
			return left, nil
		case <-ctx.Done():
			return left, ctx.Err()
		}
	}
	defer q.releaseIntake(in.tasks, claimed)

	batch := make([]Task, len(claimed))
	for j, i := range claimed {
		t := in.tasks[i]
		if t.TTL > 0 && in.adoptedAt(i) == nil {
			t.Deadline, t.TTL = now.Add(t.TTL), 0
		}
		batch[j] = t
	}
	recs, existed, err := q.store.Enqueue(ctx, batch, now)
	if err != nil {
		return slices.Concat(left, claimed), fmt.Errorf("captchaq: storing %d new tasks (%q first): %w", len(batch), batch[0].ID, err)
	}
	renewed, err := q.renewExpired(ctx, in, claimed, batch, recs, existed, now)
	if err == nil {
		err = q.takeAdopted(ctx, in, claimed, recs, existed, now)
	}
	if err != nil {
		return slices.Concat(left, claimed), err
	}
	// A new task that matches a reservoir takes a token: it is finished
	// now, and registerStored answers it as a stored, finished task.
	q.res.Draw(ctx, batch, recs, existed, func(j int) bool { return in.adoptedAt(claimed[j]) != nil }, now)
	for _, j := range q.registerStored(in, claimed, batch, recs, existed, renewed, now) {
		in.ws[claimed[j]](*recs[j].Result, nil)
	}
	return left, nil
}

// claimIDs claims the ids of up to capacity tasks from the start of todo
// (those already registered are attached instead). It returns the tasks
// claimed, the tasks left for another round (those whose id another
// caller is storing first) and a channel closed when the first of those
// ids is stored.
func (q *Queue) claimIDs(in *intakeBatch, todo []int, capacity int) (claimed, left []int, busy <-chan struct{}) {
	var held []int
	rest := todo[:0]
	q.table.Do(func(tx table) {
		for k, i := range todo {
			if len(claimed) == capacity {
				rest = todo[k:]
				break
			}
			if attachLocked(tx, in, i) {
				continue
			}
			ch, ok := tx.Claim(in.tasks[i].ID)
			if !ok {
				if busy == nil {
					busy = ch
				}
				held = append(held, i)
				continue
			}
			claimed = append(claimed, i)
		}
	})
	if len(held) > 0 {
		return claimed, append(held, rest...), busy
	}
	return claimed, rest, busy
}

// registerStored registers the claimed tasks as the Store answered for
// them at now (recs, existed: batch as Enqueue and renewExpired left it),
// refuses a stored task of the id that is another one (Record.Known), and
// returns the indexes in claimed of those already finished, whose waiters
// the caller answers with the stored result.
func (q *Queue) registerStored(in *intakeBatch, claimed []int, batch []Task, recs []Record, existed []bool, renewed int, now time.Time) (finished []int) {
	q.table.Do(func(tx table) {
		q.metrics.Renewed(renewed)
		for j, i := range claimed {
			r := recs[j]
			known, err := KnownPending, error(nil)
			if existed[j] {
				known, err = r.Known(batch[j], now)
			}
			switch {
			case err != nil:
				in.errs[i] = err
			case known != KnownPending:
				finished = append(finished, j)
			case q.closed.Load():
				// Durable already: the next Start picks it up.
				in.errs[i] = ErrClosed
			default:
				st := q.register(tx, r, in.ws[i], in.pts[i])
				switch {
				case !existed[j]:
					q.metrics.Submitted()
				case in.adoptedAt(i) == nil:
					q.metrics.Resumed(st.resumed)
				}
			}
		}
	})
	return finished
}

// renewExpired puts back in the queue the known tasks of batch (same
// task, not only the same id) whose stored token has expired at now
// (KnownExpired), and updates their records in recs; it returns how many.
func (q *Queue) renewExpired(ctx context.Context, in *intakeBatch, claimed []int, batch []Task, recs []Record, existed []bool, now time.Time) (int, error) {
	n := 0
	for j, r := range recs {
		if !existed[j] || in.adoptedAt(claimed[j]) != nil {
			continue
		}
		if known, err := r.Known(batch[j], now); err != nil || known != KnownExpired {
			continue
		}
		rec, err := q.store.Renew(ctx, batch[j], now)
		if err != nil {
			return n, fmt.Errorf("captchaq: solving %q again (its token expired at %s): %w", r.Task.ID, r.Result.ExpiresAt.UTC().Format(time.RFC3339), err)
		}
		recs[j] = rec
		n++
	}
	return n, nil
}

// takeAdopted writes to the journal what the records Adopt hands over
// say of the claimed tasks the Store did not know (a task known already
// is as its stored record says): in flight with a captcha id, that
// checkpoint, to be polled rather than submitted again; queued after
// attempts, those attempts. It updates their records in recs.
func (q *Queue) takeAdopted(ctx context.Context, in *intakeBatch, claimed []int, recs []Record, existed []bool, now time.Time) error {
	for j, i := range claimed {
		r := in.adoptedAt(i)
		if r == nil || existed[j] {
			continue
		}
		id, stored := r.Task.ID, &recs[j]
		switch {
		case r.Status == StatusInFlight && r.CaptchaID != "":
			at := r.SubmittedAt
			if at.IsZero() {
				at = now
			}
			if err := q.journal.Checkpoint(ctx, id, r.CaptchaID, max(r.Attempts, 1), at); err != nil {
				return fmt.Errorf("captchaq: adopt %q: %w", id, err)
			}
			stored.Status, stored.CaptchaID, stored.Attempts, stored.SubmittedAt = StatusInFlight, r.CaptchaID, max(r.Attempts, 1), at
		case r.Attempts > 0 || !r.NotBefore.IsZero():
			if err := q.journal.Retry(ctx, id, r.Attempts, r.NotBefore, r.LastError, r.LastErrorCode); err != nil {
				return fmt.Errorf("captchaq: adopt %q: %w", id, err)
			}
			stored.Attempts, stored.NotBefore, stored.LastError, stored.LastErrorCode = r.Attempts, r.NotBefore, r.LastError, r.LastErrorCode
		}
	}
	return nil
}

// releaseIntake ends the claims of an intake round.
func (q *Queue) releaseIntake(tasks []Task, claimed []int) {
	q.table.Do(func(tx table) {
		for _, i := range claimed {
			tx.Release(tasks[i].ID)
		}
	})
}

func (q *Queue) accept(ctx context.Context, t Task, w func(Result, error)) error {
	return q.acceptBatch(ctx, []Task{t}, func(int) func(Result, error) { return w })[0]
}

// waitCapacity blocks until there is room for want more unfinished tasks
// under MaxQueued, and returns how many there is room for.
func (q *Queue) waitCapacity(ctx context.Context, want int) (int, error) {
	for {
		// Closed is read after the room: Shutdown closes, then wakes the
		// channel read here.
		room, freed := q.table.Room(q.cfg.MaxQueued)
		if q.closed.Load() {
			return 0, ErrClosed
		}
		if room >= want {
			return room, nil
		}
		select {
		case <-freed:
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-q.runCtx.Done():
			return 0, ErrClosed
		}
	}
}

// wakeCapacityWaiters wakes the callers waiting for room (waitCapacity).
func (q *Queue) wakeCapacityWaiters() { q.table.WakeRoom() }
