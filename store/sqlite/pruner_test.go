package sqlite

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
)

func TestPrunerDeletesOnlyPastRetention(t *testing.T) {
	t.Parallel()
	now := time.Now()
	s := OpenTemp(t, Config{Retention: RetentionOff})
	path := s.Path()
	tasks := []captchaq.Task{{ID: "old", Method: "turnstile"}, {ID: "recent", Method: "turnstile"}, {ID: "queued", Method: "turnstile"}}
	if _, _, err := s.Enqueue(t.Context(), tasks, now.Add(-3*time.Hour)); err != nil {
		t.Fatal(err)
	}
	for id, finished := range map[string]time.Time{"old": now.Add(-2 * time.Hour), "recent": now.Add(-30 * time.Minute)} {
		if err := s.Finish(t.Context(), captchaq.Result{ID: id, Status: captchaq.StatusSolved, FinishedAt: finished}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	type report struct {
		n   int
		err error
	}
	reports := make(chan report, 10)
	s, err := Open(t.Context(), path, Config{Retention: time.Hour, PruneInterval: time.Hour, Logger: slog.New(slog.DiscardHandler),
		pruned: func(n int, err error) { reports <- report{n, err} }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if r := <-reports; r.n != 1 || r.err != nil {
		t.Fatalf("the prune at Open deleted %d, %v; want 1, nil", r.n, r.err)
	}
	if _, err := s.Get(t.Context(), "old"); !errors.Is(err, captchaq.ErrNotFound) {
		t.Errorf("Get(old) after the prune: %v, want ErrNotFound", err)
	}
	for _, id := range []string{"recent", "queued"} {
		if _, err := s.Get(t.Context(), id); err != nil {
			t.Errorf("Get(%s) after the prune: %v", id, err)
		}
	}
}

func TestRetentionOffStartsNoPruner(t *testing.T) {
	t.Parallel()
	s := OpenTemp(t, Config{Retention: RetentionOff})
	defer s.Close()
	if s.pruner != nil {
		t.Error("RetentionOff started a prune loop")
	}
}
