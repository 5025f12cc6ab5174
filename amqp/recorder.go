package amqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/captchaq/captchaq"
)

// taskRecorder publishes a gateway's tasks to the fleet and writes them
// and their results to its Store, one id at a time (its key locks): a
// submit, a renew, a republish at Start, a replay, a cancel and each
// result the reply receiver hands it. What it writes it counts in the
// ledger.
type taskRecorder struct {
	store     captchaq.Store
	shared    FrontStore // nil: the store is the gateway's own
	pub       *Publisher
	reply     string // the reply queue
	ids       wireIDs
	providers []captchaq.ProviderConfig // GatewayConfig.Providers
	ledger    *ledger
	log       *slog.Logger
	// open says whether tasks may be taken now (the gateway started and
	// not shut down).
	open  func() error
	locks keyLocks
}

// errNotRecordedYet: a result for a task the shared store does not hold
// yet, as another gateway of the front records it after its publish.
var errNotRecordedYet = errors.New("amqp: gateway: the task is not recorded yet")

// errChanged: a shared store's record changed between the read and the
// write (another gateway of the front wrote it).
var errChanged = errors.New("amqp: gateway: the task's record changed meanwhile")

// publish sends t to the fleet with this gateway's reply-to, confirmed,
// under its wire id of generation gen.
func (tr *taskRecorder) publish(ctx context.Context, t captchaq.Task, now time.Time, gen string) error {
	wire := t
	wire.ID = tr.ids.wireID(t.ID, gen)
	wire.Pingback = "" // the client's callback is the front's business
	return tr.pub.PublishTask(ctx, TaskMessage{Task: wire, Accepted: now, ReplyTo: tr.reply, Demoted: tr.ledger.demotion(t.Tenant)})
}

// markPublished records a published task as in flight at the fleet, in
// generation gen.
func (tr *taskRecorder) markPublished(ctx context.Context, id, gen string, attempts int, now time.Time) error {
	return tr.store.Checkpoint(ctx, id, tr.ids.markFor(gen), attempts, now)
}

// submit publishes v and records it; look reads the id's record first.
func (tr *taskRecorder) submit(ctx context.Context, v captchaq.ValidTask, look bool) error {
	if !v.CheckedFor(tr.providers) {
		var err error
		if v, err = v.Task().CheckFor(tr.providers); err != nil {
			return err
		}
	}
	t := v.Task()
	if n := len(tr.ids.wireID(t.ID, renewGen(time.Now()))); n > maxWireID {
		return &captchaq.TaskError{ID: t.ID, Code: captchaq.CodeInvalidTask,
			Msg: fmt.Sprintf("id: %d characters with the gateway's name and the client's; a message id holds at most %d: use a shorter id", n, maxWireID)}
	}
	if err := tr.open(); err != nil {
		return err
	}
	now := time.Now()
	if t.TTL > 0 {
		t.Deadline, t.TTL = now.Add(t.TTL), 0
	}
	unlock := tr.locks.lock(t.ID)
	defer unlock()
	rec, err := captchaq.Record{}, captchaq.ErrNotFound
	if look {
		rec, err = tr.store.Get(ctx, t.ID)
	}
	switch {
	case err == nil:
		// The same task is the one recorded; another one under its id is
		// refused before it is published.
		known, err := rec.Known(t, now)
		if err != nil {
			return err
		}
		if known == captchaq.KnownExpired {
			// The same task, its token dead: solved again, as the local
			// queue does.
			return tr.renew(ctx, t, now)
		}
		return nil
	case !errors.Is(err, captchaq.ErrNotFound):
		return err
	}
	if u, ok := tr.ledger.unrecordedTask(t.ID); ok {
		// Published before, and its record's write failed: the client
		// sends it again. It is at the fleet: write its record, do not
		// publish it a second time.
		if err := (captchaq.Record{Task: u.task, Fingerprint: u.task.Fingerprint()}).Conflict(t); err != nil {
			return err
		}
		t, now = u.task, u.accepted
	} else if err := tr.publish(ctx, t, now, ""); err != nil {
		return fmt.Errorf("amqp: gateway: publish %q: %w", t.ID, err)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	if err := tr.writePublished(sctx, t, now); err != nil {
		tr.keepUnrecorded(t, now, err)
		return fmt.Errorf("amqp: gateway: record %q: %w", t.ID, err)
	}
	return nil
}

// writePublished writes the record of t, published at now in generation
// "", with its mark, and counts it accepted. The task is at the fleet:
// it keeps trying while the store is out of reach (a database
// restarting), until ctx ends. Called with the id's lock held.
func (tr *taskRecorder) writePublished(ctx context.Context, t captchaq.Task, now time.Time) error {
	var recs []captchaq.Record
	answered := false
	marked, _ := tr.store.(MarkedEnqueuer)
	err := retryStore(ctx, func() error {
		if marked != nil {
			// The record and its mark in one write; an id stored already
			// (a try before whose answer was lost) goes the long way.
			rec, ok, err := marked.EnqueueMarked(ctx, t, now, tr.ids.markFor(""))
			if err != nil {
				return err
			}
			if ok {
				recs = []captchaq.Record{rec}
				return nil
			}
		}
		var err error
		if recs, _, err = tr.store.Enqueue(ctx, []captchaq.Task{t}, now); err != nil {
			return err
		}
		err = tr.markPublished(ctx, t.ID, "", 0, now)
		if err != nil && tr.shared != nil {
			// Another gateway of the front may have taken its answer
			// and stored it already (an instant solve).
			if cur, gerr := tr.store.Get(ctx, t.ID); gerr == nil && cur.Status.Final() {
				answered = true
				return nil
			}
		}
		return err
	})
	if err != nil {
		return err
	}
	if answered {
		tr.ledger.accepted(t.ID, nil)
	} else {
		tr.ledger.accepted(t.ID, &recs[0])
	}
	return nil
}

// retryStore calls write until it succeeds, fails for a reason a retry
// does not change (a refused task, the store closed), or ctx ends; the
// pause between tries doubles from 50 ms to a second.
func retryStore(ctx context.Context, write func() error) error {
	pause := 50 * time.Millisecond
	for {
		err := write()
		var te *captchaq.TaskError
		if err == nil || errors.As(err, &te) || errors.Is(err, captchaq.ErrStoreClosed) ||
			errors.Is(err, captchaq.ErrNotFound) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Second)
	}
}

// keepUnrecorded keeps t, published at now, whose record's write failed
// with err, so that it is not solved twice nor its result dropped.
func (tr *taskRecorder) keepUnrecorded(t captchaq.Task, now time.Time, err error) {
	if tr.ledger.keepUnrecorded(t, now) {
		tr.log.Error("task published but not recorded: recorded when its result comes or it is submitted again", "id", t.ID, "err", err)
		return
	}
	tr.log.Error("task published but not recorded, and too many are: its result will be dropped", "id", t.ID, "err", err, "kept", maxUnrecorded)
}

// renew solves again a task whose token expired: the task is published
// under a wire id of a new generation, which no worker has answered, then
// the record goes back to queued (Store.Renew) and is marked with that
// generation, the two writes together with no network call between. Until
// they are done a result of the new generation finds the task solved and
// is dropped (the client's next submit renews again); a result of an
// earlier generation that comes late is not this solve's (see record).
// Called with the id's lock held, which record takes too.
func (tr *taskRecorder) renew(ctx context.Context, t captchaq.Task, now time.Time) error {
	gen := renewGen(now)
	if err := tr.publish(ctx, t, now, gen); err != nil {
		return fmt.Errorf("amqp: gateway: publish %q again: %w", t.ID, err)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	rec, err := tr.store.Renew(sctx, t, now)
	if err == nil {
		err = tr.markPublished(sctx, t.ID, gen, 0, now)
	} else if cur, gerr := tr.store.Get(sctx, t.ID); tr.shared != nil && gerr == nil && !cur.Status.Final() {
		// Another gateway of the front renewed it first: its solve
		// answers the client; this publish's result is dropped.
		return nil
	}
	if err != nil {
		return fmt.Errorf("amqp: gateway: record %q solved again: %w", t.ID, err)
	}
	tr.ledger.track(rec)
	tr.ledger.count(func(c *GatewayCounts) { c.Accepted++; c.Renewed++ })
	tr.log.Info("token expired: solving the task again", "id", t.ID, "generation", gen)
	return nil
}

// republish publishes a task recorded but not marked published.
func (tr *taskRecorder) republish(ctx context.Context, r captchaq.Record) error {
	unlock := tr.locks.lock(r.Task.ID)
	defer unlock()
	now := time.Now()
	if err := tr.publish(ctx, r.Task, now, ""); err != nil {
		return err
	}
	if err := tr.markPublished(context.WithoutCancel(ctx), r.Task.ID, "", r.Attempts, now); err != nil {
		return err
	}
	tr.ledger.track(r)
	tr.ledger.count(func(c *GatewayCounts) { c.Republished++ })
	return nil
}

// cancel records task id failed with CANCELED (Gateway.Cancel).
func (tr *taskRecorder) cancel(ctx context.Context, id string) (captchaq.Result, error) {
	unlock := tr.locks.lock(id)
	defer unlock()
	rec, err := tr.store.Get(ctx, id)
	if err != nil {
		return captchaq.Result{}, err
	}
	if rec.Status.Final() {
		return captchaq.Result{}, fmt.Errorf("amqp: cancel %q: %w", id, captchaq.ErrFinal)
	}
	r := captchaq.Result{
		ID: id, Status: captchaq.StatusFailed, Method: rec.Task.Method, ErrorCode: captchaq.CodeCanceled,
		Error:    "canceled at the gateway; a worker may still solve it, and that answer is dropped",
		Attempts: rec.Attempts, AcceptedAt: rec.AcceptedAt, FinishedAt: time.Now(),
	}
	if err := tr.finish(context.WithoutCancel(ctx), r, rec); errors.Is(err, errChanged) {
		// Another gateway of the front answered or canceled it meanwhile.
		return captchaq.Result{}, fmt.Errorf("amqp: cancel %q: %w", id, captchaq.ErrFinal)
	} else if err != nil {
		return r, err
	}
	tr.ledger.finished(r, time.Time{})
	return r, nil
}

// replay puts the dead letters among ids back at the fleet (Gateway.Replay).
func (tr *taskRecorder) replay(ctx context.Context, ids []string) ([]string, error) {
	var order []string
	err := tr.store.DeadLetters(ctx, captchaq.DeadLetterFilter{IDs: ids}, func(r captchaq.Record) error {
		order = append(order, r.Task.ID)
		return nil
	})
	if err != nil {
		return nil, err
	}
	var replayed []string
	for _, id := range order {
		ok, err := tr.replayOne(ctx, id)
		if ok {
			replayed = append(replayed, id)
		}
		if err != nil {
			return replayed, err
		}
	}
	return replayed, nil
}

// replayOne puts one dead letter back at the fleet; false when it is no
// longer a dead letter.
func (tr *taskRecorder) replayOne(ctx context.Context, id string) (bool, error) {
	unlock := tr.locks.lock(id)
	defer unlock()
	cur, err := tr.store.Get(ctx, id)
	if err != nil || cur.Status != captchaq.StatusFailed {
		return false, err
	}
	now := time.Now()
	if n, err := tr.store.Replay(ctx, captchaq.DeadLetterFilter{IDs: []string{id}}, now); err != nil {
		return false, fmt.Errorf("amqp: gateway: replay %q: %w", id, err)
	} else if n == 0 {
		return false, nil // another gateway of the front replayed it
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	// A new generation: a worker that failed the task answers its wire id
	// once, and would drop a copy under the same one.
	gen := renewGen(now)
	if err := tr.publish(ctx, cur.Task, now, gen); err != nil {
		// Not at the fleet: it stays the dead letter it was.
		if cur.Result != nil {
			if ferr := tr.store.Finish(sctx, *cur.Result); ferr != nil {
				tr.log.Error("restoring a dead letter after a failed replay", "id", id, "err", ferr)
			}
		}
		return false, fmt.Errorf("amqp: gateway: replay %q: %w", id, err)
	}
	if err := tr.markPublished(sctx, id, gen, 0, now); err != nil {
		return true, fmt.Errorf("amqp: gateway: replay %q: published, not marked (the next Start publishes it again): %w", id, err)
	}
	cur.AcceptedAt = now
	tr.ledger.track(cur)
	if err := tr.pub.noteReplayed(sctx, tr.ids.name, id, now); err != nil {
		tr.log.Warn("noting a replay for captchaq dlq failed: a dlq replay may publish the task's earlier dead letter again", "id", id, "err", err)
	}
	return true, nil
}

// finish stores r for a task whose record was read as seen: on a shared
// store only while it still is (errChanged otherwise).
func (tr *taskRecorder) finish(ctx context.Context, r captchaq.Result, seen captchaq.Record) error {
	if tr.shared == nil {
		return tr.store.Finish(ctx, r)
	}
	ok, err := tr.shared.FinishIf(ctx, r, seen)
	if err == nil && !ok {
		err = errChanged
	}
	return err
}

// record stores r unless its task is already answered; fresh is true when
// it did. A record already final stays, except a failure (other than a
// cancel) that a solved result replaces: the task was replayed from the
// fleet's dead letters. A result of another generation than the task's
// solve in progress (an expired solve's copy coming late) is a duplicate.
// An answer whose task may have a dead letter in the fleet's queue is
// noted first (noteAnswered).
func (tr *taskRecorder) record(r captchaq.Result, gen string) (fresh bool, err error) {
	unlock := tr.locks.lock(r.ID)
	defer unlock()
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	// The common case in one write on a store that can: the task in
	// flight under this generation's mark takes the result. A replay's or
	// renew's answer is read first: it may need its notice (noteAnswered).
	if mf, ok := tr.shared.(MarkedFinisher); ok && (gen == "" || r.Status != captchaq.StatusSolved) {
		if done, err := mf.FinishMarked(ctx, r, tr.ids.markFor(gen)); err == nil && done {
			tr.ledger.finished(r, time.Now())
			return true, nil
		}
		// Not in flight under it, or the write failed: read and decide.
	}
	// On a shared store another gateway of the front may write the
	// record between the read and the write: then read it again and
	// decide again (errChanged). Each turn means the record moved on.
	for {
		rec, err := tr.store.Get(ctx, r.ID)
		switch {
		case errors.Is(err, captchaq.ErrNotFound) && gen == "" && tr.recordUnrecorded(ctx, r.ID):
			// Published here, its record's write failed then and
			// succeeded now: the result answers it.
			continue
		case errors.Is(err, captchaq.ErrNotFound) && tr.shared != nil && time.Since(r.FinishedAt) < 2*storeTimeout:
			// Another gateway of the front published it and is
			// recording it right now: this answer waits for the record.
			return false, errNotRecordedYet
		case errors.Is(err, captchaq.ErrNotFound):
			tr.log.Warn("dropping a result for a task this gateway has no record of (published just before a crash, or pruned)", "id", r.ID)
			tr.ledger.count(func(c *GatewayCounts) { c.Unknown++ })
			return false, nil
		case err != nil:
			return false, err
		case !answers(rec, r) || !sameGeneration(rec, gen):
			if r.Status == captchaq.StatusFailed && answered(rec) {
				// This copy's dead letter is in the fleet's queue.
				if err := tr.noteAnswered(ctx, r.ID); err != nil {
					return false, err
				}
			}
			tr.ledger.count(func(c *GatewayCounts) { c.Duplicates++ })
			return false, nil
		}
		if r.Status == captchaq.StatusSolved && (gen != "" || rec.Status == captchaq.StatusFailed) {
			// A replay's answer, or one that replaces a failure: earlier
			// copies may be dead letters in the fleet's queue.
			if err := tr.noteAnswered(ctx, r.ID); err != nil {
				return false, err
			}
		}
		err = tr.finish(ctx, r, rec)
		if errors.Is(err, errChanged) {
			continue
		}
		if err != nil {
			return false, err
		}
		break
	}
	tr.ledger.finished(r, time.Now())
	return true, nil
}

// recordUnrecorded writes the record of a task kept published but not
// recorded under id (keepUnrecorded), whose result came: true when it is
// written now. Called with the id's lock held.
func (tr *taskRecorder) recordUnrecorded(ctx context.Context, id string) bool {
	u, ok := tr.ledger.unrecordedTask(id)
	if !ok {
		return false
	}
	if err := tr.writePublished(ctx, u.task, u.accepted); err != nil {
		tr.log.Error("result of a task published but not recorded: its record still cannot be written", "id", id, "err", err)
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
func (tr *taskRecorder) noteAnswered(ctx context.Context, id string) error {
	if err := tr.pub.noteReplayed(ctx, tr.ids.name, id, time.Now()); err != nil {
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
