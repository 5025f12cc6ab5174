package postgres_test

import (
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/pgtest"
	"github.com/captchaq/captchaq/store/postgres"
	"github.com/captchaq/captchaq/storetest"
)

// Takers in 8 processes on one database (8 Stores, each with its own
// pool) take each token once.
func TestReservoirTokensTakenOnceAcrossReplicas(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	stores := make([]captchaq.ReservoirStore, 8)
	for i := range stores {
		stores[i] = open(t, url, postgres.Config{Retention: postgres.RetentionOff})
	}
	storetest.TokensTakenOnce(t, stores...)
}

// A store closed and opened again keeps its reservoirs' tokens.
func TestReservoirTokensOutliveARestart(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	s := open(t, url, postgres.Config{})
	now := time.Now()
	for _, id := range []string{"a", "b"} {
		r := captchaq.Result{ID: id, Status: captchaq.StatusSolved, Token: "0.tok-" + id, ExpiresAt: now.Add(time.Minute)}
		if err := s.StockToken(t.Context(), "ts", r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, url, postgres.Config{})
	if counts, err := s.TokenCounts(t.Context()); err != nil || !maps.Equal(counts, map[string]int{"ts": 2}) {
		t.Fatalf("TokenCounts after the restart: %v, %v; want map[ts:2]", counts, err)
	}
	if r, ok, err := s.TakeToken(t.Context(), "ts", now); err != nil || !ok || r.ID != "a" || r.Token != "0.tok-a" {
		t.Fatalf("TakeToken after the restart: %+v, %v, %v; want a", r, ok, err)
	}
}

// BenchmarkTakeToken measures TakeToken by 1 taker, and by 8 at once in
// 8 processes (Stores) on one database.
func BenchmarkTakeToken(b *testing.B) {
	for _, takers := range []int{1, 8} {
		b.Run(fmt.Sprintf("takers=%d", takers), func(b *testing.B) {
			url := pgtest.NewDatabase(b)
			stores := make([]captchaq.ReservoirStore, takers)
			for i := range stores {
				s, err := postgres.Open(b.Context(), url, postgres.Config{Retention: postgres.RetentionOff})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = s.Close() })
				stores[i] = s
			}
			storetest.BenchTakeToken(b, takers, stores...)
		})
	}
}
