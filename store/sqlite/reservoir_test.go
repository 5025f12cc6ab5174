package sqlite_test

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/store/sqlite"
)

// A store closed and opened again keeps its reservoirs' tokens, each
// still taken once.
func TestReservoirTokensOutliveARestart(t *testing.T) {
	t.Parallel()
	cfg := sqlite.Config{Retention: sqlite.RetentionOff}
	s := sqlite.OpenTemp(t, cfg)
	now := time.Now()
	for i, id := range []string{"a", "b", "c"} {
		r := captchaq.Result{ID: id, Status: captchaq.StatusSolved, Method: "turnstile", Token: "0.tok-" + id,
			ExpiresAt: now.Add(time.Duration(i+1) * time.Minute)}
		if err := s.StockToken(t.Context(), "ts", r); err != nil {
			t.Fatal(err)
		}
	}
	if r, ok, err := s.TakeToken(t.Context(), "ts", now); err != nil || !ok || r.ID != "a" {
		t.Fatalf("TakeToken before the restart: %q, %v, %v; want a", r.ID, ok, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err := sqlite.Open(t.Context(), s.Path(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	counts, err := s.TokenCounts(t.Context())
	if err != nil || !maps.Equal(counts, map[string]int{"ts": 2}) {
		t.Fatalf("TokenCounts after the restart: %v, %v; want map[ts:2]", counts, err)
	}
	var got []string
	for range 3 {
		r, ok, err := s.TakeToken(t.Context(), "ts", now)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			got = append(got, r.ID+" "+r.Token)
		}
	}
	if want := []string{"b 0.tok-b", "c 0.tok-c"}; !slices.Equal(got, want) {
		t.Errorf("takes after the restart: %q, want %q", got, want)
	}
}
