package server

import (
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/pgtest"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/store/postgres"
	"github.com/captchaq/captchaq/store/sqlite"
)

// pingbackReceiver counts the pingbacks it is sent, by id.
type pingbackReceiver struct {
	*httptest.Server
	mu  sync.Mutex
	got map[string]int
}

func newPingbackReceiver(t *testing.T) *pingbackReceiver {
	rx := &pingbackReceiver{got: map[string]int{}}
	rx.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		rx.mu.Lock()
		rx.got[r.Form.Get("id")+"="+r.Form.Get("code")]++
		rx.mu.Unlock()
	}))
	t.Cleanup(rx.Close)
	return rx
}

func (rx *pingbackReceiver) counts() map[string]int {
	rx.mu.Lock()
	defer rx.mu.Unlock()
	return maps.Clone(rx.got)
}

// testPingbacksSweptOnce: stores are the replicas' views of one ledger.
// Five results are recorded and their recorder dies before it sends
// their pingbacks; a sixth is recorded and sent by replica 0. Each
// replica runs a sweeper: every pingback arrives exactly once, and none
// is owed after.
func testPingbacksSweptOnce(t *testing.T, stores []captchaq.Store) {
	ctx := testbound.Context(t)
	rx := newPingbackReceiver(t)
	want := map[string]int{}
	for i := 1; i <= 6; i++ {
		id := fmt.Sprintf("qa/%d", i)
		tk := captchaq.Task{ID: id, Method: "turnstile", Params: map[string]string{"sitekey": "k", "pageurl": "https://x.example/"},
			Pingback: formPingback + rx.URL + "/hook"}
		if _, _, err := stores[0].Enqueue(ctx, []captchaq.Task{tk}, time.Now()); err != nil {
			t.Fatal(err)
		}
		res := captchaq.Result{ID: id, Status: captchaq.StatusSolved, Token: fmt.Sprintf("T%d", i), FinishedAt: time.Now()}
		if err := stores[0].Finish(ctx, res); err != nil {
			t.Fatal(err)
		}
		want[fmt.Sprintf("%d=T%d", i, i)] = 1
	}
	var senders []*pingbackSender
	for _, st := range stores {
		ps := newPingbackSender(pingbackParams{timeout: 10 * time.Second, attempts: 1, parallel: 2, allow: testLoopback,
			log: slog.New(slog.DiscardHandler), ledger: st.(captchaq.PingbackLedger), grace: 300 * time.Millisecond, store: st})
		senders = append(senders, ps)
	}
	rec, err := stores[0].Get(ctx, "qa/6")
	if err != nil {
		t.Fatal(err)
	}
	senders[0].enqueue(stores[0], *rec.Result, "6")
	for _, ps := range senders {
		ps.start()
	}
	testbound.Until(t, "every pingback sent", func() bool { return len(rx.counts()) == len(want) })
	for _, ps := range senders {
		ps.close(ctx) // waits for the sends under way and their marks
	}
	if got := rx.counts(); !maps.Equal(got, want) {
		t.Errorf("pingbacks received %v, want each once: %v", got, want)
	}
	owed, err := stores[1].(captchaq.PingbackLedger).ClaimPingbacks(ctx, 0, time.Hour, 10)
	if err != nil || len(owed) != 0 {
		t.Errorf("pingbacks still owed after: %v, %v; want none", ids(owed), err)
	}
}

func ids(recs []captchaq.Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.Task.ID)
	}
	return slices.Clip(out)
}

// Two sweepers on one SQLite file (one process holds it).
func TestPingbacksSweptOnceSQLite(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "captchaq.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	testPingbacksSweptOnce(t, []captchaq.Store{st, st})
}

// Two replicas, each with its own Store on one PostgreSQL database.
func TestPingbacksSweptOncePostgres(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	var stores []captchaq.Store
	for range 2 {
		st, err := postgres.Open(t.Context(), db, postgres.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		stores = append(stores, st)
	}
	testPingbacksSweptOnce(t, stores)
}
