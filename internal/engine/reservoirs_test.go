package engine

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq/captchaqtype"
	"github.com/captchaq/captchaq/internal/tally"
)

// tokenStore is a ReservoirStore of one reservoir's tokens; the Store's
// other methods are not called.
type tokenStore struct {
	captchaqtype.Store
	tokens   []captchaqtype.Result
	finished []captchaqtype.Result
}

func (s *tokenStore) StockToken(_ context.Context, _ string, r captchaqtype.Result) error {
	s.tokens = append(s.tokens, r)
	return nil
}

func (s *tokenStore) TakeToken(context.Context, string, time.Time) (captchaqtype.Result, bool, error) {
	if len(s.tokens) == 0 {
		return captchaqtype.Result{}, false, nil
	}
	r := s.tokens[0]
	s.tokens = s.tokens[1:]
	return r, true, nil
}

func (s *tokenStore) DropTokens(context.Context, string, time.Time) (int, error) { return 0, nil }

func (s *tokenStore) TokenCounts(context.Context) (map[string]int, error) {
	return map[string]int{"ts": len(s.tokens)}, nil
}

func (s *tokenStore) Finish(_ context.Context, r captchaqtype.Result) error {
	s.finished = append(s.finished, r)
	return nil
}

// A task matching a reservoir takes its token and is answered at once,
// durable first; the next one, with the stock empty, is a miss and goes
// on as an ordinary task; a refill's solved result goes to the stock.
func TestReservoirsDrawAndRefill(t *testing.T) {
	template := captchaqtype.Task{Method: "turnstile", Params: map[string]string{"sitekey": "0x4AAA", "pageurl": "https://a.example/"}}
	rcs := []captchaqtype.ReservoirConfig{{Name: "ts", Task: template, Size: 1, Max: 1}}
	store := &tokenStore{}
	if errs := CheckReservoirs(rcs, nil, store, 0.5, 4); len(errs) != 0 {
		t.Fatalf("CheckReservoirs = %v, want none", errs)
	}
	if errs := CheckReservoirs(rcs, nil, store, 0.1, 4); len(errs) != 1 || !strings.Contains(errs[0].Error(), "ReservoirShare: 0.1 of 4 threads leaves no thread") {
		t.Fatalf("CheckReservoirs(share 0.1) = %v, want the ReservoirShare error", errs)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var delivered []captchaqtype.Result
	rs := NewReservoirs(rcs, nil, store, 0.5, 4, ReservoirHost{
		Now: func() time.Time { return now }, StoreCtx: context.Background, Log: slog.New(slog.DiscardHandler),
		Journal: store, Metrics: tally.NewCounters(),
		Delivered: func(r captchaqtype.Result) { delivered = append(delivered, r) },
	})
	token := captchaqtype.Result{ID: "refill-1", Status: captchaqtype.StatusSolved, Token: "tok", ExpiresAt: now.Add(5 * time.Minute)}
	store.tokens = []captchaqtype.Result{token}

	task := template
	task.ID = "a"
	batch := []captchaqtype.Task{task, {ID: "b", Method: task.Method, Params: task.Params}}
	recs := []captchaqtype.Record{{Task: batch[0]}, {Task: batch[1]}}
	existed := []bool{false, false}
	rs.Draw(context.Background(), batch, recs, existed, func(int) bool { return false }, now)

	if !existed[0] || recs[0].Result == nil || recs[0].Result.Token != "tok" || recs[0].Result.ID != "a" || recs[0].Result.Reservoir != "ts" {
		t.Fatalf("task a: existed %v, result %+v; want answered with the token as a", existed[0], recs[0].Result)
	}
	if existed[1] || recs[1].Result != nil {
		t.Fatalf("task b: existed %v, result %+v; want a miss", existed[1], recs[1].Result)
	}
	if len(store.finished) != 1 || store.finished[0].ID != "a" || len(delivered) != 1 || delivered[0].ID != "a" {
		t.Fatalf("finished %v, delivered %v; want task a's result once each", store.finished, delivered)
	}
	c := rs.Counts(now)
	if len(c) != 1 || c[0].Hits != 1 || c[0].Misses != 1 || c[0].HandedOut != 1 {
		t.Fatalf("Counts = %+v; want 1 hit, 1 miss, 1 handed out", c)
	}
	if rs.Finished(captchaqtype.Result{ID: "a", Status: captchaqtype.StatusSolved}) {
		t.Fatal("Finished(a client's task) = true, want false")
	}
}

// Every method of a queue without reservoirs does nothing.
func TestReservoirsNil(t *testing.T) {
	var rs *Reservoirs
	if rs = NewReservoirs(nil, nil, nil, 0.25, 5, ReservoirHost{}); rs != nil {
		t.Fatalf("NewReservoirs(none) = %v, want nil", rs)
	}
	rs.Draw(context.Background(), nil, nil, nil, nil, time.Time{})
	rs.Resume("x")
	if rs.Finished(captchaqtype.Result{}) || rs.Counts(time.Time{}) != nil {
		t.Fatal("a nil Reservoirs counted something")
	}
}
