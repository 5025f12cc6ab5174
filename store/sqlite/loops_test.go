package sqlite

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
)

// TestLoopsStartStop starts and stops the store's writer, checkpointer and
// pruner many times while writes go on: every write is answered once and
// committed, and Close leaves no goroutine behind (TestMain's goleak).
func TestLoopsStartStop(t *testing.T) {
	t.Parallel()
	s := OpenTemp(t, Config{Retention: RetentionOff})
	defer s.Close()
	pruner := newPruner(s, time.Hour, time.Millisecond, discardLogger, nil)
	loops := map[string]interface {
		Start(context.Context) error
		Stop()
	}{"writer": s.w.loop, "checkpointer": s.ckpt, "pruner": pruner}

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
	for range 100 {
		for _, l := range loops {
			l.Stop()
			l.Stop()
		}
		for name, l := range loops {
			if err := l.Start(t.Context()); err != nil {
				t.Fatalf("%s: Start: %v", name, err)
			}
			if err := l.Start(t.Context()); err != nil {
				t.Fatalf("%s: Start again: %v", name, err)
			}
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
