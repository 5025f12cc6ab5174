package amqp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/startstop"
)

// errNotRecordedYet: a result for a task the shared store does not hold
// yet, as another gateway of the front records it after its publish.
var errNotRecordedYet = errors.New("amqp: gateway: the task is not recorded yet")

// errChanged: a shared store's record changed between the read and the
// write (another gateway of the front wrote it).
var errChanged = errors.New("amqp: gateway: the task's record changed meanwhile")

// finish stores r for a task whose record was read as seen: on a shared
// store only while it still is (errChanged otherwise).
func (g *Gateway) finish(ctx context.Context, r captchaq.Result, seen captchaq.Record) error {
	if g.shared == nil {
		return g.store.Finish(ctx, r)
	}
	ok, err := g.shared.FinishIf(ctx, r, seen)
	if err == nil && !ok {
		err = errChanged
	}
	return err
}

// AttachReplicas sets the functions told of what the other gateways of a
// shared store recorded (server.Replicated): accepted with each task
// another accepted (its record, without Task.Params on a HeadReader),
// finished with each result another stored (that gateway told its own
// server; its pingback is its own). Call it before Start.
func (g *Gateway) AttachReplicas(accepted func(captchaq.Record), finished func(captchaq.Result)) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.started {
		return errors.New("amqp: gateway: AttachReplicas after Start")
	}
	g.othersAccepted, g.othersFinished = accepted, finished
	return nil
}

// Shared says whether the gateway's Store is shared with other gateways
// (a FrontStore).
func (g *Gateway) Shared() bool { return g.shared != nil }

// IDBlock hands out numeric ids from the shared store (server.IDSource),
// so the replicas of a front never hand out one id twice; none (n = 0)
// when the store is the gateway's own.
func (g *Gateway) IDBlock(ctx context.Context) (uint64, int, error) {
	if g.shared == nil {
		return 0, 0, nil
	}
	return g.shared.IDBlock(ctx)
}

// IDKey is the shared store's key of the ids (server.IDSource): every
// gateway of the front permutes the blocks' numbers with it.
func (g *Gateway) IDKey(ctx context.Context) ([]byte, error) {
	if g.shared == nil {
		return nil, errors.New("amqp: no shared store, no id key")
	}
	return g.shared.IDKey(ctx)
}

// OtherAccepted tells the gateway that another gateway of the front
// accepted task id: it counts toward the client's fair share here, and
// the server is told (AttachReplicas). A task already final when the news
// is read (it came late) is told too, as accepted and not unfinished.
// When the record cannot be read (the store is unreachable), the id is
// kept and the next Resync reads it again and tells it, so the front's
// counts heal even when the task is final by then.
func (g *Gateway) OtherAccepted(ctx context.Context, id string) {
	rec, err := g.head(ctx, id)
	switch {
	case errors.Is(err, captchaq.ErrNotFound):
		// Pruned already: nothing left to count.
	case err != nil:
		g.mu.Lock()
		g.unread[id] = struct{}{}
		g.mu.Unlock()
		g.log.Warn("reading a task another replica accepted failed; the next resync reads it again", "id", id, "err", err)
	default:
		g.otherAccepted(rec, false)
	}
}

// HeadReader is a FrontStore that reads records without their tasks'
// Params, an image task's body (store/postgres does). What the gateway
// reads of the others' news, and what Resync reads every ResyncEvery,
// are states and times: on a store that cannot, it reads whole records.
type HeadReader interface {
	// PendingHeads is Pending with each record's Task.Params nil.
	PendingHeads(ctx context.Context, fn func(captchaq.Record) error) error
	// Heads calls fn with the record of each of ids that is stored, its
	// Task.Params nil, in one read; an id not stored is left out.
	Heads(ctx context.Context, ids []string, fn func(captchaq.Record) error) error
}

// heads reads the records of ids that are stored, by id, without their
// Params where the store can (HeadReader).
func (g *Gateway) heads(ctx context.Context, ids []string) (map[string]captchaq.Record, error) {
	got := make(map[string]captchaq.Record, len(ids))
	if hr, ok := g.shared.(HeadReader); ok {
		err := hr.Heads(ctx, ids, func(r captchaq.Record) error {
			got[r.Task.ID] = r
			return nil
		})
		return got, err
	}
	for _, id := range ids {
		rec, err := g.store.Get(ctx, id)
		switch {
		case errors.Is(err, captchaq.ErrNotFound):
		case err != nil:
			return nil, err
		default:
			got[id] = rec
		}
	}
	return got, nil
}

// head is heads of one id: ErrNotFound when it is not stored.
func (g *Gateway) head(ctx context.Context, id string) (captchaq.Record, error) {
	got, err := g.heads(ctx, []string{id})
	if err != nil {
		return captchaq.Record{}, err
	}
	rec, ok := got[id]
	if !ok {
		return captchaq.Record{}, fmt.Errorf("%w: %q", captchaq.ErrNotFound, id)
	}
	return rec, nil
}

// otherAccepted counts rec, accepted by another gateway, and tells the
// server. Told by Resync (resynced), it counts only a task not pending
// here, and is kept in mind so that its announcement, coming late, does
// not count it again.
func (g *Gateway) otherAccepted(rec captchaq.Record, resynced bool) {
	id := rec.Task.ID
	g.mu.Lock()
	delete(g.unread, id)
	g.mu.Unlock()
	counted := g.ledger.otherAccepted(rec, resynced, func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.newsLocked(id, rec.AcceptedAt, resynced, func(n *resyncedNews) *time.Time { return &n.accepted })
	})
	if counted && g.othersAccepted != nil {
		g.othersAccepted(rec)
	}
}

// resyncedNews is what Resync told of a task before its announcement
// came: the acceptance and the result it told (their AcceptedAt and
// FinishedAt; zero for none), and when.
type resyncedNews struct {
	accepted, finished time.Time
	at                 time.Time
}

// resyncedKeep is how long Resync's news wait for their announcements:
// one that comes later than that (the others' announcements are sent a
// round trip after their commits) counts again.
const resyncedKeep = 10 * time.Minute

// newsLocked says whether news of task id dated at (its AcceptedAt or
// its result's FinishedAt, the field of resyncedNews that which picks)
// is to be counted. News Resync tells (resynced) are, and are kept in
// mind; an announcement of news Resync told already is not, and is
// forgotten.
func (g *Gateway) newsLocked(id string, at time.Time, resynced bool, which func(*resyncedNews) *time.Time) bool {
	n, ok := g.resynced[id]
	if resynced {
		*which(&n) = at
		n.at = time.Now()
		g.resynced[id] = n
		return true
	}
	if !ok || !which(&n).Equal(at) || at.IsZero() {
		return true
	}
	*which(&n) = time.Time{}
	if n.accepted.IsZero() && n.finished.IsZero() {
		delete(g.resynced, id)
	} else {
		g.resynced[id] = n
	}
	return false
}

// OtherFinished tells the gateway that another gateway of the front
// stored task id's result: it is no longer unfinished here, it counts in
// the front's numbers, and the server is told (AttachReplicas), which
// wakes its long polls and event streams.
func (g *Gateway) OtherFinished(ctx context.Context, id string) {
	rec, err := g.head(ctx, id)
	if err != nil || !rec.Status.Final() || rec.Result == nil {
		return
	}
	g.otherFinished(*rec.Result, false)
}

// otherFinished counts r, stored by another gateway, and tells the
// server. Told by Resync (resynced), it counts only while the task is
// unfinished here (a result told or stored here meanwhile is not counted
// again), and is kept in mind so that its announcement, coming late, does
// not count it again.
func (g *Gateway) otherFinished(r captchaq.Result, resynced bool) {
	counted := g.ledger.otherFinished(r, resynced, func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.newsLocked(r.ID, r.FinishedAt, resynced, func(n *resyncedNews) *time.Time { return &n.finished })
	})
	if counted && g.othersFinished != nil {
		g.othersFinished(r)
	}
}

// resyncSettle is how old a change must be for the periodic Resync to
// tell it: a younger one's announcement may still be on its way, and told
// twice it would count twice.
const resyncSettle = 10 * time.Second

// Resync reads the store's unfinished tasks again, after the news of the
// other gateways may have been missed (the shared store's listening
// connection was lost): a task it holds unfinished whose result is stored
// is told as finished, a task it did not know as accepted, and one no
// longer stored (pruned) is let go. On a HeadReader it reads no task's
// Params: one read of the unfinished tasks' ids, states and times, and
// one of the records of those it holds that are no longer unfinished.
func (g *Gateway) Resync(ctx context.Context) error { return g.resyncBefore(ctx, time.Time{}) }

// resync runs every GatewayConfig.ResyncEvery on a shared store, for the
// news nothing else would tell: a gateway that died between a commit and
// its announcement. It tells only changes older than resyncSettle (the
// others' announcements may be on their way), the rest at its next run.
func (g *Gateway) resync(ctx context.Context) {
	startstop.Tick(ctx, g.cfg.ResyncEvery, func(ctx context.Context) {
		if err := g.resyncBefore(ctx, time.Now().Add(-resyncSettle)); err != nil && ctx.Err() == nil {
			g.log.Warn("reading the front's unfinished tasks again failed", "err", err)
		}
	})
}

// resyncBefore is Resync for the changes made before settled (zero:
// all of them).
func (g *Gateway) resyncBefore(ctx context.Context, settled time.Time) error {
	before := func(t time.Time) bool { return settled.IsZero() || !t.After(settled) }
	g.mu.Lock()
	for id, n := range g.resynced {
		if time.Since(n.at) > resyncedKeep {
			delete(g.resynced, id)
		}
	}
	g.mu.Unlock()
	open := map[string]captchaq.Record{}
	pending := g.store.Pending
	if hr, ok := g.shared.(HeadReader); ok {
		pending = hr.PendingHeads
	}
	err := pending(ctx, func(r captchaq.Record) error {
		open[r.Task.ID] = r
		return nil
	})
	if err != nil {
		return err
	}
	gone, fresh := g.ledger.compare(open, before)
	var stored map[string]captchaq.Record
	if len(gone) > 0 {
		if stored, err = g.heads(ctx, gone); err != nil {
			return err
		}
	}
	for _, id := range gone {
		rec, ok := stored[id]
		switch {
		case !ok:
			g.ledger.untrack(id)
		case rec.Status.Final() && rec.Result != nil && before(rec.Result.FinishedAt):
			g.otherFinished(*rec.Result, true)
		}
	}
	for _, r := range fresh {
		g.otherAccepted(r, true)
	}
	return g.readUnread(ctx)
}

// readUnread tells the tasks OtherAccepted could not read, each once
// (otherAccepted takes a task it tells out of unread), and keeps them for
// the next resync when they cannot be read yet.
func (g *Gateway) readUnread(ctx context.Context) error {
	g.mu.Lock()
	ids := slices.Collect(maps.Keys(g.unread))
	clear(g.unread)
	g.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	stored, err := g.heads(ctx, ids)
	if err != nil {
		g.mu.Lock()
		for _, id := range ids {
			g.unread[id] = struct{}{}
		}
		g.mu.Unlock()
		return err
	}
	for _, id := range ids {
		told := g.ledger.holds(id) // by another resync meanwhile
		if rec, ok := stored[id]; ok && !told {
			// The announcement's news, told late: not counted again
			// when a resync told it already.
			g.otherAccepted(rec, false)
		}
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

// AdmitStore is a FrontStore that keeps clients' max_inflight and rate
// across the gateways of a front (store/postgres does).
type AdmitStore interface {
	// Admit lets ids of tenant in within max unfinished tasks of the
	// whole front (0: no bound) and rate tasks a second in bursts of
	// burst (0: no bound), taking both or neither: false, with how many
	// it has and, refused by the rate, how long until it has room.
	Admit(ctx context.Context, tenant string, ids []string, max int, rate float64, burst int) (ok bool, held int, wait time.Duration, err error)
	// FreeSlots gives back the room of ids that were not accepted.
	FreeSlots(ctx context.Context, ids []string) error
}

// Admit lets ids of tenant in within its max_inflight and rate across the
// front (server.FrontLimiter): ok with nothing taken when the store is
// the gateway's own (Shared is false), whose server's counts are exact
// already.
func (g *Gateway) Admit(ctx context.Context, tenant string, ids []string, max int, rate float64, burst int) (ok bool, held int, wait time.Duration, err error) {
	as, shared := g.shared.(AdmitStore)
	if !shared {
		return true, 0, 0, nil
	}
	return as.Admit(ctx, tenant, ids, max, rate, burst)
}

// FreeSlots gives back what Admit took for ids that were not accepted.
func (g *Gateway) FreeSlots(ctx context.Context, ids []string) error {
	if as, shared := g.shared.(AdmitStore); shared {
		return as.FreeSlots(ctx, ids)
	}
	return nil
}
