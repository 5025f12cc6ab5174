package amqp

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
)

// frontMemStore is a FrontStore on a MemoryStore whose Get fails while
// down is set, as a shared store does while it is unreachable.
type frontMemStore struct {
	*captchaq.MemoryStore
	down atomic.Bool
}

func (s *frontMemStore) Get(ctx context.Context, id string) (captchaq.Record, error) {
	if s.down.Load() {
		return captchaq.Record{}, errors.New("connection refused")
	}
	return s.MemoryStore.Get(ctx, id)
}

func (s *frontMemStore) FinishIf(ctx context.Context, r captchaq.Result, seen captchaq.Record) (bool, error) {
	return true, s.Finish(ctx, r)
}

func (s *frontMemStore) IDBlock(context.Context) (uint64, int, error) { return 0, 0, nil }
func (s *frontMemStore) IDKey(context.Context) ([]byte, error)        { return nil, nil }

// TestOtherAcceptedUnreadIsToldAtResync: the news of two tasks another
// replica accepted comes while the store cannot be read. One is still
// unfinished at the next resync, the other was answered meanwhile (the
// resync's read of the unfinished tasks does not see it): the resync tells
// both as accepted, once each, and a second resync tells nothing more.
func TestOtherAcceptedUnreadIsToldAtResync(t *testing.T) {
	t.Parallel()
	r := newGatewayRig(t, testConfig(t))
	ctx := testCtx(t)
	st := &frontMemStore{MemoryStore: captchaq.NewMemoryStore(captchaq.MemoryStoreConfig{})}
	var mu sync.Mutex
	told := map[string]captchaq.Status{}
	accepted := func(rec captchaq.Record) {
		mu.Lock()
		defer mu.Unlock()
		if _, again := told[rec.Task.ID]; again {
			t.Errorf("%s told as accepted twice", rec.Task.ID)
		}
		told[rec.Task.ID] = rec.Status
	}
	g, _ := r.start(GatewayConfig{Store: st, Name: "gw-unread", ResyncEvery: time.Hour, Logger: testLogger(t)}, nil, accepted, func(captchaq.Result) {})

	// Accepted by another replica: written to the shared store.
	open, answered := task("qa/open", 0), task("qa/answered", 0)
	open.Tenant, answered.Tenant = "qa", "qa"
	if _, _, err := st.Enqueue(ctx, []captchaq.Task{open, answered}, time.Now()); err != nil {
		t.Fatal(err)
	}
	st.down.Store(true)
	g.OtherAccepted(ctx, open.ID)
	g.OtherAccepted(ctx, answered.ID)
	if err := st.Finish(ctx, captchaq.Result{ID: answered.ID, Status: captchaq.StatusSolved, Token: "tok", FinishedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := g.Resync(ctx); err == nil {
		t.Error("Resync with the store unreadable: nil error, want the read's")
	}
	st.down.Store(false)
	for range 2 {
		if err := g.Resync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	want := map[string]captchaq.Status{open.ID: captchaq.StatusQueued, answered.ID: captchaq.StatusSolved}
	if len(told) != len(want) || told[open.ID] != want[open.ID] || told[answered.ID] != want[answered.ID] {
		t.Errorf("told as accepted: %v, want %v", told, want)
	}
	if c := g.Counts(); c.OthersAccepted != 2 {
		t.Errorf("OthersAccepted %d, want 2", c.OthersAccepted)
	}
	pending, held := g.ledger.unfinished("qa")
	if pending != 1 || held != 1 {
		t.Errorf("unfinished here: %d tasks, %d of qa; want 1 and 1 (the open task)", pending, held)
	}
}
