package postgres

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/pgtest"
)

// TestLoopsStartStop starts and stops the prune loop many times while
// writes go on: every write is answered and stored, and Close leaves no
// goroutine behind (TestMain's goleak).
func TestLoopsStartStop(t *testing.T) {
	t.Parallel()
	s, err := Open(t.Context(), pgtest.NewDatabase(t), Config{Retention: RetentionOff})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pruner := newPruner(s, time.Hour, time.Millisecond, discardLogger, nil)
	const writers, each = 4, 25
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			for j := range each {
				id := fmt.Sprintf("t%d-%d", i, j)
				if _, _, err := s.Enqueue(t.Context(), []captchaq.Task{{ID: id, Method: "turnstile"}}, time.Now()); err != nil {
					t.Errorf("Enqueue %s: %v", id, err)
				}
			}
		})
	}
	var l interface {
		Start(context.Context) error
		Stop()
	} = pruner
	for range 100 {
		l.Stop()
		l.Stop()
		if err := l.Start(t.Context()); err != nil {
			t.Fatalf("Start: %v", err)
		}
		if err := l.Start(t.Context()); err != nil {
			t.Fatalf("Start again: %v", err)
		}
	}
	wg.Wait()
	pruner.Stop()
	for i := range writers {
		for j := range each {
			if _, err := s.Get(t.Context(), fmt.Sprintf("t%d-%d", i, j)); err != nil {
				t.Errorf("Get t%d-%d: %v", i, j, err)
			}
		}
	}
}
