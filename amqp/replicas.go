package amqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/startstop"
)

// replicaSync keeps a gateway's ledger true to what the other gateways of
// a shared store (FrontStore) recorded: their announcements
// (Gateway.OtherAccepted, Gateway.OtherFinished) and, every ResyncEvery,
// a read of the store's unfinished tasks (Gateway.Resync) for the news
// that never came. It tells the server through the functions
// AttachReplicas set. Its lock is taken after the ledger's, never before.
type replicaSync struct {
	store  captchaq.Store
	shared FrontStore // nil: the store is the gateway's own
	ledger *ledger
	log    *slog.Logger
	every  time.Duration // GatewayConfig.ResyncEvery

	mu sync.Mutex
	// accepted and finished are told of the others' tasks and results
	// (Gateway.AttachReplicas).
	accepted func(captchaq.Record)
	finished func(captchaq.Result)
	// unread are tasks another gateway accepted whose records
	// OtherAccepted could not read; the next resync tells them.
	unread map[string]struct{}
	// resynced are the news Resync told, by id, until their
	// announcements come (or resyncedKeep passes): told late, they are
	// not counted again.
	resynced map[string]resyncedNews
}

func newReplicaSync(store captchaq.Store, shared FrontStore, l *ledger, log *slog.Logger, every time.Duration) *replicaSync {
	return &replicaSync{
		store: store, shared: shared, ledger: l, log: log, every: every,
		unread: map[string]struct{}{}, resynced: map[string]resyncedNews{},
	}
}

// attach sets the functions told of the others' tasks and results.
func (s *replicaSync) attach(accepted func(captchaq.Record), finished func(captchaq.Result)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.accepted, s.finished = accepted, finished
}

// acceptedID is Gateway.OtherAccepted: the news that another gateway
// accepted task id.
func (s *replicaSync) acceptedID(ctx context.Context, id string) {
	rec, err := s.head(ctx, id)
	switch {
	case errors.Is(err, captchaq.ErrNotFound):
		// Pruned already: nothing left to count.
	case err != nil:
		s.mu.Lock()
		s.unread[id] = struct{}{}
		s.mu.Unlock()
		s.log.Warn("reading a task another replica accepted failed; the next resync reads it again", "id", id, "err", err)
	default:
		s.otherAccepted(rec, false)
	}
}

// finishedID is Gateway.OtherFinished: the news that another gateway
// stored task id's result.
func (s *replicaSync) finishedID(ctx context.Context, id string) {
	rec, err := s.head(ctx, id)
	if err != nil || !rec.Status.Final() || rec.Result == nil {
		return
	}
	s.otherFinished(*rec.Result, false)
}

// heads reads the records of ids that are stored, by id, without their
// Params where the store can (HeadReader).
func (s *replicaSync) heads(ctx context.Context, ids []string) (map[string]captchaq.Record, error) {
	got := make(map[string]captchaq.Record, len(ids))
	if hr, ok := s.shared.(HeadReader); ok {
		err := hr.Heads(ctx, ids, func(r captchaq.Record) error {
			got[r.Task.ID] = r
			return nil
		})
		return got, err
	}
	for _, id := range ids {
		rec, err := s.store.Get(ctx, id)
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
func (s *replicaSync) head(ctx context.Context, id string) (captchaq.Record, error) {
	got, err := s.heads(ctx, []string{id})
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
func (s *replicaSync) otherAccepted(rec captchaq.Record, resynced bool) {
	id := rec.Task.ID
	s.mu.Lock()
	delete(s.unread, id)
	told := s.accepted
	s.mu.Unlock()
	counted := s.ledger.otherAccepted(rec, resynced, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.newsLocked(id, rec.AcceptedAt, resynced, func(n *resyncedNews) *time.Time { return &n.accepted })
	})
	if counted && told != nil {
		told(rec)
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
func (s *replicaSync) newsLocked(id string, at time.Time, resynced bool, which func(*resyncedNews) *time.Time) bool {
	n, ok := s.resynced[id]
	if resynced {
		*which(&n) = at
		n.at = time.Now()
		s.resynced[id] = n
		return true
	}
	if !ok || !which(&n).Equal(at) || at.IsZero() {
		return true
	}
	*which(&n) = time.Time{}
	if n.accepted.IsZero() && n.finished.IsZero() {
		delete(s.resynced, id)
	} else {
		s.resynced[id] = n
	}
	return false
}

// otherFinished counts r, stored by another gateway, and tells the
// server. Told by Resync (resynced), it counts only while the task is
// unfinished here (a result told or stored here meanwhile is not counted
// again), and is kept in mind so that its announcement, coming late, does
// not count it again.
func (s *replicaSync) otherFinished(r captchaq.Result, resynced bool) {
	s.mu.Lock()
	told := s.finished
	s.mu.Unlock()
	counted := s.ledger.otherFinished(r, resynced, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.newsLocked(r.ID, r.FinishedAt, resynced, func(n *resyncedNews) *time.Time { return &n.finished })
	})
	if counted && told != nil {
		told(r)
	}
}

// resyncSettle is how old a change must be for the periodic Resync to
// tell it: a younger one's announcement may still be on its way, and told
// twice it would count twice.
const resyncSettle = 10 * time.Second

// resync runs every GatewayConfig.ResyncEvery on a shared store, for the
// news nothing else would tell: a gateway that died between a commit and
// its announcement. It tells only changes older than resyncSettle (the
// others' announcements may be on their way), the rest at its next run.
func (s *replicaSync) resync(ctx context.Context) {
	startstop.Tick(ctx, s.every, func(ctx context.Context) {
		if err := s.resyncBefore(ctx, time.Now().Add(-resyncSettle)); err != nil && ctx.Err() == nil {
			s.log.Warn("reading the front's unfinished tasks again failed", "err", err)
		}
	})
}

// resyncBefore is Resync for the changes made before settled (zero:
// all of them).
func (s *replicaSync) resyncBefore(ctx context.Context, settled time.Time) error {
	before := func(t time.Time) bool { return settled.IsZero() || !t.After(settled) }
	s.mu.Lock()
	for id, n := range s.resynced {
		if time.Since(n.at) > resyncedKeep {
			delete(s.resynced, id)
		}
	}
	s.mu.Unlock()
	open := map[string]captchaq.Record{}
	pending := s.store.Pending
	if hr, ok := s.shared.(HeadReader); ok {
		pending = hr.PendingHeads
	}
	err := pending(ctx, func(r captchaq.Record) error {
		open[r.Task.ID] = r
		return nil
	})
	if err != nil {
		return err
	}
	gone, fresh := s.ledger.compare(open, before)
	var stored map[string]captchaq.Record
	if len(gone) > 0 {
		if stored, err = s.heads(ctx, gone); err != nil {
			return err
		}
	}
	for _, id := range gone {
		rec, ok := stored[id]
		switch {
		case !ok:
			s.ledger.untrack(id)
		case rec.Status.Final() && rec.Result != nil && before(rec.Result.FinishedAt):
			s.otherFinished(*rec.Result, true)
		}
	}
	for _, r := range fresh {
		s.otherAccepted(r, true)
	}
	return s.readUnread(ctx)
}

// readUnread tells the tasks OtherAccepted could not read, each once
// (otherAccepted takes a task it tells out of unread), and keeps them for
// the next resync when they cannot be read yet.
func (s *replicaSync) readUnread(ctx context.Context) error {
	s.mu.Lock()
	ids := slices.Collect(maps.Keys(s.unread))
	clear(s.unread)
	s.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	stored, err := s.heads(ctx, ids)
	if err != nil {
		s.mu.Lock()
		for _, id := range ids {
			s.unread[id] = struct{}{}
		}
		s.mu.Unlock()
		return err
	}
	for _, id := range ids {
		told := s.ledger.holds(id) // by another resync meanwhile
		if rec, ok := stored[id]; ok && !told {
			// The announcement's news, told late: not counted again
			// when a resync told it already.
			s.otherAccepted(rec, false)
		}
	}
	return nil
}
