package captchaq

import (
	"context"

	"fmt"
	"github.com/captchaq/captchaq/provider"
	"slices"
	"time"
)

// acceptBatch validates tasks, stores the new ones and registers them, in
// order; waiter(i) is task i's waiter. It returns each task's error, as
// SubmitBatchFunc documents.
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
func (q *Queue) acceptBatch(ctx context.Context, tasks []Task, waiter func(i int) func(Result, error)) []error {
	errs := make([]error, len(tasks))
	ws := make([]func(Result, error), len(tasks))
	pts := make([]provider.Checked, len(tasks)) // as checked: carried to the provider
	todo := make([]int, 0, len(tasks))
	for i, t := range tasks {
		if pts[i], errs[i] = q.check(t); errs[i] == nil {
			ws[i] = waiter(i)
			todo = append(todo, i)
		}
	}
	// Known and unfinished: attach without waiting for room.
	todo = q.attachKnown(tasks, todo, ws, errs)
	now := q.now()
	for len(todo) > 0 {
		capacity, err := q.waitCapacity(ctx, min(len(todo), max(1, q.cfg.MaxQueued/8)))
		if err == nil {
			todo, err = q.intakeRound(ctx, tasks, pts, todo, ws, errs, capacity, now)
		}
		if err != nil {
			for _, i := range todo {
				errs[i] = err
			}
			break
		}
	}
	return errs
}

// attachKnown adds the waiters of tasks already registered to them (or
// refuses a task whose id names another one), and returns the others.
func (q *Queue) attachKnown(tasks []Task, todo []int, ws []func(Result, error), errs []error) []int {
	q.mu.Lock()
	defer q.mu.Unlock()
	left := todo[:0]
	for _, i := range todo {
		if st, ok := q.tasks[tasks[i].ID]; ok {
			if errs[i] = st.rec.Conflict(tasks[i]); errs[i] == nil {
				st.waiters = append(st.waiters, ws[i])
			}
			continue
		}
		left = append(left, i)
	}
	return left
}

// intakeRound claims the ids of up to capacity tasks from the start of todo,
// stores those tasks in one Store call and registers them. It returns the
// tasks left for another round, or with an error the tasks it did not
// accept.
func (q *Queue) intakeRound(ctx context.Context, tasks []Task, pts []provider.Checked, todo []int, ws []func(Result, error), errs []error, capacity int, now time.Time) ([]int, error) {
	var claimed, held []int
	var busy chan struct{}
	rest := todo[:0]
	q.mu.Lock()
	for k, i := range todo {
		if len(claimed) == capacity {
			rest = todo[k:]
			break
		}
		id := tasks[i].ID
		if st, ok := q.tasks[id]; ok {
			if errs[i] = st.rec.Conflict(tasks[i]); errs[i] == nil {
				st.waiters = append(st.waiters, ws[i])
			}
			continue
		}
		if ch, ok := q.accepting[id]; ok {
			if busy == nil {
				busy = ch
			}
			held = append(held, i)
			continue
		}
		q.accepting[id] = make(chan struct{})
		claimed = append(claimed, i)
	}
	q.mu.Unlock()
	left := rest
	if len(held) > 0 {
		left = append(held, rest...)
	}
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
	defer q.releaseIntake(tasks, claimed)

	batch := make([]Task, len(claimed))
	for j, i := range claimed {
		t := tasks[i]
		if t.TTL > 0 {
			t.Deadline, t.TTL = now.Add(t.TTL), 0
		}
		batch[j] = t
	}
	recs, existed, err := q.store.Enqueue(ctx, batch, now)
	if err != nil {
		return slices.Concat(left, claimed), fmt.Errorf("captchaq: storing %d new tasks (%q first): %w", len(batch), batch[0].ID, err)
	}
	renewed, err := q.renewExpired(ctx, batch, recs, existed, now)
	if err != nil {
		return slices.Concat(left, claimed), err
	}
	var finished []int
	q.mu.Lock()
	q.metrics.renewed += int64(renewed)
	for j, i := range claimed {
		r := recs[j]
		switch {
		case existed[j] && r.Conflict(batch[j]) != nil:
			errs[i] = r.Conflict(batch[j])
		case existed[j] && r.Result != nil && final(r.Status):
			finished = append(finished, j)
		case q.closed:
			// Durable already: the next Start picks it up.
			errs[i] = ErrClosed
		default:
			st := q.register(r, ws[i], pts[i])
			if !existed[j] {
				q.metrics.submitted++
			} else {
				q.metrics.countResumed(st)
			}
		}
	}
	q.mu.Unlock()
	for _, j := range finished {
		ws[claimed[j]](*recs[j].Result, nil)
	}
	return left, nil
}

// renewExpired puts back in the queue the known tasks of batch (same
// task, not only the same id) whose stored token has expired at now, and
// updates their records in recs; it returns how many.
func (q *Queue) renewExpired(ctx context.Context, batch []Task, recs []Record, existed []bool, now time.Time) (int, error) {
	n := 0
	for j, r := range recs {
		if !existed[j] || r.Result == nil || !r.Result.Expired(now) || r.Conflict(batch[j]) != nil {
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

// releaseIntake ends the claims of an intake round.
func (q *Queue) releaseIntake(tasks []Task, claimed []int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, i := range claimed {
		id := tasks[i].ID
		close(q.accepting[id])
		delete(q.accepting, id)
	}
}
