package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
)

func testPending(t *testing.T, s captchaq.Store) {
	enqueue(t, s, t0, task("q1"), task("f1"), task("i1"), task("s1"))
	enqueue(t, s, at(time.Second), task("q2"), task("i2"))
	checkpoint(t, s, "i1", "c-i1", 1, at(2*time.Second))
	checkpoint(t, s, "i2", "c-i2", 1, at(2*time.Second))
	checkpoint(t, s, "f1", "c-f1", 1, at(2*time.Second))
	finish(t, s, failed("f1", "ERROR_BAD_PARAMETERS", 1, at(3*time.Second)))
	checkpoint(t, s, "s1", "c-s1", 1, at(2*time.Second))
	finish(t, s, solved("s1", 1, at(3*time.Second)))

	got := pending(t, s)
	if d := diff([]string{"q1", "i1", "q2", "i2"}, ids(got)); d != "" {
		t.Fatalf("Pending (-want +got):\n%s", d)
	}
	for _, rec := range got {
		if d := diff(get(t, s, rec.Task.ID), rec); d != "" {
			t.Errorf("Pending record %s differs from Get (-want +got):\n%s", rec.Task.ID, d)
		}
	}
}

func testCallbackError(t *testing.T, s captchaq.Store) {
	ctx := context.Background()
	enqueue(t, s, t0, task("a"), task("b"), task("c"))
	for _, id := range []string{"a", "b"} {
		checkpoint(t, s, id, "c", 1, t0)
		finish(t, s, failed(id, "ERROR_X", 1, at(time.Second)))
	}
	enqueue(t, s, t0, task("d"), task("e"))
	stop := errors.New("stop here")
	iterations := []struct {
		name string
		run  func(calls *int) error
	}{
		{"Pending", func(calls *int) error {
			return s.Pending(ctx, func(captchaq.Record) error { *calls++; return stop })
		}},
		{"Results", func(calls *int) error {
			return s.Results(ctx, func(captchaq.Result) error { *calls++; return stop })
		}},
		{"DeadLetters", func(calls *int) error {
			return s.DeadLetters(ctx, captchaq.DeadLetterFilter{All: true}, func(captchaq.Record) error { *calls++; return stop })
		}},
	}
	for _, it := range iterations {
		calls := 0
		if err := it.run(&calls); !errors.Is(err, stop) {
			t.Errorf("%s returned %v, want the callback's error", it.name, err)
		}
		if calls != 1 {
			t.Errorf("%s called fn %d times after it failed, want 1", it.name, calls)
		}
	}
}

func testPrune(t *testing.T, s captchaq.Store) {
	ctx := context.Background()
	cutoff := at(time.Hour)
	enqueue(t, s, t0, task("old-solved"), task("old-failed"), task("inflight"), task("queued"), task("at-cutoff"), task("new"))
	finishes := []captchaq.Result{
		solved("old-solved", 1, cutoff.Add(-2*time.Hour)),
		failed("old-failed", "ERROR_X", 1, cutoff.Add(-time.Millisecond)),
		solved("at-cutoff", 1, cutoff),
		solved("new", 1, cutoff.Add(time.Hour)),
	}
	for _, r := range finishes {
		checkpoint(t, s, r.ID, "c", 1, t0)
		finish(t, s, r)
	}
	checkpoint(t, s, "inflight", "c", 1, t0)
	// Deadlines and submit times before the cutoff must not matter.
	keep := map[string]captchaq.Record{}
	for _, id := range []string{"inflight", "queued", "at-cutoff", "new"} {
		keep[id] = get(t, s, id)
	}

	n, err := s.Prune(ctx, cutoff)
	if err != nil || n != 2 {
		t.Fatalf("Prune = %d, %v; want 2, nil", n, err)
	}
	for _, id := range []string{"old-solved", "old-failed"} {
		if _, err := s.Get(ctx, id); !errors.Is(err, captchaq.ErrNotFound) {
			t.Errorf("Get(%s) after Prune: %v, want ErrNotFound", id, err)
		}
	}
	for id, want := range keep {
		if d := diff(want, get(t, s, id)); d != "" {
			t.Errorf("Prune changed %s (-want +got):\n%s", id, d)
		}
	}
	if d := diff([]string{"at-cutoff", "new"}, resultIDs(results(t, s))); d != "" {
		t.Errorf("Results after Prune (-want +got):\n%s", d)
	}
	if got := deadLetters(t, s, captchaq.DeadLetterFilter{All: true}); len(got) != 0 {
		t.Errorf("DeadLetters after Prune: %v, want none", ids(got))
	}
	if n, err := s.Prune(ctx, cutoff); err != nil || n != 0 {
		t.Errorf("second Prune = %d, %v; want 0, nil", n, err)
	}
}

func testSeqGrowsAfterPrune(t *testing.T, s captchaq.Store) {
	recs := enqueue(t, s, t0, task("a"), task("b"))
	checkpoint(t, s, "b", "c", 1, t0)
	finish(t, s, solved("b", 1, at(time.Second)))
	if n, err := s.Prune(context.Background(), at(time.Hour)); err != nil || n != 1 {
		t.Fatalf("Prune = %d, %v; want 1, nil", n, err)
	}
	// An id that was pruned may be enqueued again, as a new task.
	again := enqueue(t, s, at(2*time.Hour), task("c"), task("b"))
	if again[0].Seq <= recs[1].Seq || again[1].Seq <= again[0].Seq {
		t.Errorf("Seq after pruning the newest task: c=%d b=%d, want both above %d and growing", again[0].Seq, again[1].Seq, recs[1].Seq)
	}
	if got := get(t, s, "b"); got.Status != captchaq.StatusQueued || got.Result != nil {
		t.Errorf("re-enqueued b: status %q result %v, want queued without result", got.Status, got.Result)
	}
}

func testConcurrent(t *testing.T, s captchaq.Store) {
	const goroutines, perG = 8, 40
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*2)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perG {
				id := fmt.Sprintf("g%d-%d", g, i)
				if _, _, err := s.Enqueue(ctx, []captchaq.Task{task(id)}, t0); err != nil {
					errs <- err
					return
				}
				if err := s.Checkpoint(ctx, id, "c-"+id, 1, t0); err != nil {
					errs <- err
					return
				}
				r := solved(id, 1, at(time.Second))
				if i%2 == 1 {
					r = failed(id, "ERROR_X", 1, at(time.Second))
				}
				if err := s.Finish(ctx, r); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	// Readers run alongside the writers.
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				if err := s.Pending(ctx, func(captchaq.Record) error { return nil }); err != nil {
					errs <- err
					return
				}
				if _, err := s.Get(ctx, "g0-0"); err != nil && !errors.Is(err, captchaq.ErrNotFound) {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	rs := results(t, s)
	if len(rs) != goroutines*perG {
		t.Fatalf("Results has %d entries, want %d", len(rs), goroutines*perG)
	}
	seen := map[string]bool{}
	for _, r := range rs {
		seen[r.ID] = true
	}
	if len(seen) != goroutines*perG {
		t.Errorf("Results has %d distinct ids, want %d", len(seen), goroutines*perG)
	}
	var prev int64
	for _, id := range resultIDs(rs) {
		rec := get(t, s, id)
		if rec.Seq <= prev {
			t.Errorf("Results not in growing Seq order at %s: %d after %d", id, rec.Seq, prev)
		}
		prev = rec.Seq
	}
	if got := len(deadLetters(t, s, captchaq.DeadLetterFilter{All: true})); got != goroutines*perG/2 {
		t.Errorf("DeadLetters has %d entries, want %d", got, goroutines*perG/2)
	}
	if got := pending(t, s); len(got) != 0 {
		t.Errorf("Pending has %d entries, want 0", len(got))
	}
}

func testClosed(t *testing.T, s captchaq.Store) {
	ctx := context.Background()
	enqueue(t, s, t0, task("a"))
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	called := false
	fn := func(captchaq.Record) error { called = true; return nil }
	calls := []struct {
		name string
		err  error
	}{
		{"Enqueue", func() error { _, _, err := s.Enqueue(ctx, []captchaq.Task{task("b")}, t0); return err }()},
		{"Checkpoint", s.Checkpoint(ctx, "a", "c", 1, t0)},
		{"Retry", s.Retry(ctx, "a", 1, t0, "x", "X")},
		{"Finish", s.Finish(ctx, solved("a", 1, t0))},
		{"Pending", s.Pending(ctx, fn)},
		{"Get", func() error { _, err := s.Get(ctx, "a"); return err }()},
		{"Results", s.Results(ctx, func(captchaq.Result) error { called = true; return nil })},
		{"DeadLetters", s.DeadLetters(ctx, captchaq.DeadLetterFilter{All: true}, fn)},
		{"Replay", func() error { _, err := s.Replay(ctx, captchaq.DeadLetterFilter{All: true}, t0); return err }()},
		{"Prune", func() error { _, err := s.Prune(ctx, at(time.Hour)); return err }()},
		{"Renew", func() error { _, err := s.Renew(ctx, task("a"), t0); return err }()},
		{"Report", func() error { _, err := s.Report(ctx, "a", true, t0); return err }()},
	}
	for name, err := range optionalCallsAfterClose(s) {
		calls = append(calls, struct {
			name string
			err  error
		}{name, err})
	}
	for _, c := range calls {
		if !errors.Is(c.err, captchaq.ErrStoreClosed) {
			t.Errorf("%s after Close: %v, want ErrStoreClosed", c.name, c.err)
		}
	}
	if called {
		t.Error("an iteration after Close called its callback")
	}
}
