package captchaq_test

import (
	"path/filepath"
	"testing"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/sim"
	"github.com/captchaq/captchaq/store/sqlite"
)

// TestReservoirRestartOnSQLite: a reservoir's tokens stocked in an
// SQLite store are there for the queue started again on its file, which
// answers a task with one and no new solve; the task's record says which
// reservoir answered it after the next restart too.
func TestReservoirRestartOnSQLite(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "captchaq.db")
	open := func() *sqlite.Store {
		s, err := sqlite.Open(t.Context(), path, sqlite.Config{Retention: sqlite.RetentionOff})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	rc := captchaq.ReservoirConfig{Name: "shop", Size: 3, Task: demoTemplate()}
	store := open()
	b := setupInProcess(t, sim.Config{}, captchaq.Config{Store: store, Reservoirs: []captchaq.ReservoirConfig{rc}})
	b.start(t)
	testbound.Until(t, "3 tokens in stock", func() bool { return counts(b).Stock == 3 })
	b.q.Close()
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}

	store = open()
	b2 := newBundle(t, b.srv, sim.InProcessBaseURL, b.srv.InProcessClient(),
		captchaq.Config{Store: store, Reservoirs: []captchaq.ReservoirConfig{rc}})
	before := b.srv.Stats().Calls.Submit
	b2.start(t)
	r := waitAll(t, submitAll(t, b2.q, demoTask("a", "")))[0]
	if r.Status != captchaq.StatusSolved || r.Reservoir != "shop" || r.Token == "" {
		t.Fatalf("a task after the restart: %+v, want a token of shop", r)
	}
	if got := b.srv.Stats().Calls.Submit - before; got > 1 {
		t.Errorf("%d submits after the restart, want at most the one refill of the token drawn", got)
	}
	b2.q.Close()
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}

	store = open()
	rec, err := store.Get(t.Context(), "a")
	if err != nil || rec.Result == nil {
		t.Fatalf("task a after the next restart: %s, %v; want it solved", rec.Status, err)
	}
	if rec.Result.Reservoir != "shop" || rec.Result.Token != r.Token {
		t.Errorf("task a after the next restart: reservoir %q, the token it was given %v; want shop, true",
			rec.Result.Reservoir, rec.Result.Token == r.Token)
	}
	counts, err := store.TokenCounts(t.Context())
	if err != nil || counts["shop"] < 2 || len(counts) != 1 {
		t.Errorf("tokens after the next restart: %v, %v; want the 2 left of shop, or 3 refilled", counts, err)
	}
}
