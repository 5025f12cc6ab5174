package amqp

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/startstop"
)

// receive hands each delivery of the reply queue to a handler of its own,
// at most Prefetch at once, until ctx ends (Shutdown); it returns once the
// handlers have.
func (g *Gateway) receive(ctx context.Context, k *Consumer) {
	handlers := startstop.NewPool(g.cfg.Prefetch)
	defer handlers.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case d, ok := <-k.Deliveries():
			if !ok {
				return
			}
			handlers.Go(func() { g.handle(ctx, d) })
		}
	}
}

// handle records one reply and acks it, then tells onResult. A reply that
// is not for this gateway, or that answers nothing new, is only acked. A
// store failure sends the reply back to the queue after a pause, cut
// short when ctx ends.
func (g *Gateway) handle(ctx context.Context, d *Delivery) {
	r, gen, ok := g.outcome(d)
	if !ok {
		ackAll(g.log, d)
		return
	}
	fresh, err := g.record(r, gen)
	pause := storeRetryAfter
	if errors.Is(err, errNotRecordedYet) {
		// The record is a round trip away: look again soon.
		pause = notRecordedRetryAfter
		g.log.Debug("a result came before its task's record; it goes back to the reply queue", "id", r.ID)
	} else if err != nil {
		g.log.Error("recording a result failed; it goes back to the reply queue", "id", r.ID, "err", err)
	}
	if err != nil {
		select {
		case <-time.After(pause):
		case <-ctx.Done():
		}
		if err := d.Nack(true); err != nil && !errors.Is(err, ErrStaleDelivery) {
			g.log.Warn("nack failed", "id", r.ID, "err", err)
		}
		return
	}
	ackAll(g.log, d)
	if fresh {
		g.deliver(r)
	}
}

// outcome reads a reply as a result of one of this gateway's tasks, with
// the Store's id: a worker's result, or a task the broker dead-lettered
// (its TTL ran out in a task queue) turned into a failure. Dead letters of
// other gateways and those a worker made (a worker sends their result
// itself) are not outcomes. gen is the generation of the solve it answers
// (see wireIDs.wireID).
func (g *Gateway) outcome(d *Delivery) (r captchaq.Result, gen string, ok bool) {
	if d.Type == messageTypeResul {
		r, err := DecodeResult(d.Body)
		if err != nil {
			g.log.Warn("dropping a reply that is not a result", "message_id", d.MessageID, "err", err)
			return r, "", false
		}
		id, gen, ours := g.ids.storeID(r.ID)
		if !ours {
			g.log.Warn("dropping a result for another gateway's task", "id", r.ID)
			return r, "", false
		}
		r.ID = id
		return r, gen, true
	}
	if d.ReplyTo != g.reply || headerString(d.Headers, HeaderReason) != "" {
		return captchaq.Result{}, "", false
	}
	m, err := d.Task()
	if err != nil {
		return captchaq.Result{}, "", false
	}
	id, gen, ours := g.ids.storeID(m.ownID())
	death, dead := LastDeath(d.Headers)
	if !ours || !dead {
		return captchaq.Result{}, "", false
	}
	r = captchaq.Result{
		ID: id, Status: captchaq.StatusFailed, Method: m.Task.Method, Attempts: m.Attempts,
		AcceptedAt: m.Accepted, FinishedAt: time.Now(),
	}
	if death.Reason == "expired" {
		r.ErrorCode = captchaq.CodeExpired
		r.Error = "no worker took it before the task queue's TTL ran out; the broker dead-lettered it"
	} else {
		r.ErrorCode = "DEAD_LETTERED"
		r.Error = fmt.Sprintf("the broker dead-lettered it from %s (%s)", death.Queue, death.Reason)
	}
	if m.LastError != "" {
		r.Error += "; last error: " + m.LastError
	}
	return r, gen, true
}

// record stores r unless its task is already answered; fresh is true when
// it did. A record already final stays, except a failure (other than a
// cancel) that a solved result replaces: the task was replayed from the
// fleet's dead letters. A result of another generation than the task's
// solve in progress (an expired solve's copy coming late) is a duplicate.
// An answer whose task may have a dead letter in the fleet's queue is
// noted first (noteAnswered).
func (g *Gateway) record(r captchaq.Result, gen string) (fresh bool, err error) {
	unlock := g.locks.lock(r.ID)
	defer unlock()
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	// The common case in one write on a store that can: the task in
	// flight under this generation's mark takes the result. A replay's or
	// renew's answer is read first: it may need its notice (noteAnswered).
	if mf, ok := g.shared.(MarkedFinisher); ok && (gen == "" || r.Status != captchaq.StatusSolved) {
		if done, err := mf.FinishMarked(ctx, r, g.ids.markFor(gen)); err == nil && done {
			g.ledger.finished(r, time.Now())
			return true, nil
		}
		// Not in flight under it, or the write failed: read and decide.
	}
	// On a shared store another gateway of the front may write the
	// record between the read and the write: then read it again and
	// decide again (errChanged). Each turn means the record moved on.
	for {
		rec, err := g.store.Get(ctx, r.ID)
		switch {
		case errors.Is(err, captchaq.ErrNotFound) && gen == "" && g.recordUnrecorded(ctx, r.ID):
			// Published here, its record's write failed then and
			// succeeded now: the result answers it.
			continue
		case errors.Is(err, captchaq.ErrNotFound) && g.shared != nil && time.Since(r.FinishedAt) < 2*storeTimeout:
			// Another gateway of the front published it and is
			// recording it right now: this answer waits for the record.
			return false, errNotRecordedYet
		case errors.Is(err, captchaq.ErrNotFound):
			g.log.Warn("dropping a result for a task this gateway has no record of (published just before a crash, or pruned)", "id", r.ID)
			g.ledger.count(func(c *GatewayCounts) { c.Unknown++ })
			return false, nil
		case err != nil:
			return false, err
		case !answers(rec, r) || !sameGeneration(rec, gen):
			if r.Status == captchaq.StatusFailed && answered(rec) {
				// This copy's dead letter is in the fleet's queue.
				if err := g.noteAnswered(ctx, r.ID); err != nil {
					return false, err
				}
			}
			g.ledger.count(func(c *GatewayCounts) { c.Duplicates++ })
			return false, nil
		}
		if r.Status == captchaq.StatusSolved && (gen != "" || rec.Status == captchaq.StatusFailed) {
			// A replay's answer, or one that replaces a failure: earlier
			// copies may be dead letters in the fleet's queue.
			if err := g.noteAnswered(ctx, r.ID); err != nil {
				return false, err
			}
		}
		err = g.finish(ctx, r, rec)
		if errors.Is(err, errChanged) {
			continue
		}
		if err != nil {
			return false, err
		}
		break
	}
	g.ledger.finished(r, time.Now())
	return true, nil
}

// recordUnrecorded writes the record of a task kept published but not
// recorded under id (keepUnrecorded), whose result came: true when it is
// written now. Called with the id's lock held.
func (g *Gateway) recordUnrecorded(ctx context.Context, id string) bool {
	u, ok := g.ledger.unrecordedTask(id)
	if !ok {
		return false
	}
	if err := g.writePublished(ctx, u.task, u.accepted); err != nil {
		g.log.Error("result of a task published but not recorded: its record still cannot be written", "id", id, "err", err)
		return false
	}
	return true
}

// noteAnswered notes in Names.Replayed that the gateway has an answer for
// task id: `captchaq dlq replay` (Conn.Replay) then takes the task's
// copies dead-lettered before out of the fleet's queue without
// publishing them again. It is published before the answer is stored, so
// that a crash between the two leaves the result to come again and be
// noted again.
func (g *Gateway) noteAnswered(ctx context.Context, id string) error {
	if err := g.pub.noteReplayed(ctx, g.cfg.Name, id, time.Now()); err != nil {
		return fmt.Errorf("amqp: gateway: note %q answered for captchaq dlq: %w", id, err)
	}
	return nil
}

// answered reports whether rec holds its task's final answer: solved, or
// canceled by its client.
func answered(rec captchaq.Record) bool {
	switch rec.Status {
	case captchaq.StatusSolved:
		return true
	case captchaq.StatusFailed:
		return rec.Result != nil && rec.Result.ErrorCode == captchaq.CodeCanceled
	}
	return false
}

// answers reports whether r is the answer to record now.
func answers(rec captchaq.Record, r captchaq.Result) bool {
	switch rec.Status {
	case captchaq.StatusSolved:
		return false
	case captchaq.StatusFailed:
		return r.Status == captchaq.StatusSolved && (rec.Result == nil || rec.Result.ErrorCode != captchaq.CodeCanceled)
	}
	return true
}
