package sqlite

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
)

// TestBatchWithFailingWrite checks that a database error in one write of a
// group commit fails that write alone: the others commit, and the failing
// one leaves nothing behind.
func TestBatchWithFailingWrite(t *testing.T) {
	t.Parallel()
	s := OpenTemp(t, Config{Retention: RetentionOff})
	defer s.Close()
	// Run one batch by hand: stop the loop, and start a fresh one after.
	s.w.stop()
	defer func() {
		s.w = newWriter(s.conn, s.st, MaxBatchDefault, s.ckpt)
		s.w.start()
	}()

	insert := func(id string) func(context.Context, *statements) error {
		return func(ctx context.Context, st *statements) error {
			r, err := newTaskRow(captchaq.Task{ID: id, Method: "turnstile"}, time.Now())
			if err != nil {
				return err
			}
			_, err = st.insert.ExecContext(ctx, r.args()...)
			return err
		}
	}
	badSQL := errors.New("no such table")
	writeThenFail := func(ctx context.Context, st *statements) error {
		if err := insert("half")(ctx, st); err != nil {
			return err
		}
		if _, err := s.conn.ExecContext(ctx, "INSERT INTO no_such_table VALUES (1)"); err != nil {
			return fmt.Errorf("%w: %v", badSQL, err)
		}
		return nil
	}
	unknown := func(ctx context.Context, st *statements) error {
		return affected("nope")(st.checkpoint.ExecContext(ctx, "c", 1, nil, "nope"))
	}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()

	ops := []*writeOp{
		{ctx: context.Background(), run: insert("a")},
		{ctx: context.Background(), run: unknown},
		{ctx: context.Background(), run: writeThenFail},
		{ctx: canceled, run: insert("skipped")},
		{ctx: context.Background(), run: insert("b")},
	}
	for _, op := range ops {
		op.done = make(chan error, 1)
	}
	s.w.runBatch(ops)

	wantErrs := []error{nil, captchaq.ErrNotFound, badSQL, context.Canceled, nil}
	for i, op := range ops {
		err := <-op.done
		if (wantErrs[i] == nil) != (err == nil) || (err != nil && !errors.Is(err, wantErrs[i])) {
			t.Errorf("write %d answered %v, want %v", i, err, wantErrs[i])
		}
	}
	for id, want := range map[string]error{"a": nil, "b": nil, "half": captchaq.ErrNotFound, "skipped": captchaq.ErrNotFound} {
		if _, err := s.Get(t.Context(), id); !errors.Is(err, want) {
			t.Errorf("Get(%s) = %v, want %v", id, err, want)
		}
	}
}

// TestGroupCommitAnswersEveryCaller checks that each of many concurrent
// callers gets its own answer when their writes share transactions.
func TestGroupCommitAnswersEveryCaller(t *testing.T) {
	t.Parallel()
	s := OpenTemp(t, Config{Retention: RetentionOff, MaxBatch: 4})
	defer s.Close()
	const n = 64
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("t%d", i)
			if _, _, err := s.Enqueue(t.Context(), []captchaq.Task{{ID: id, Method: "turnstile"}}, time.Now()); err != nil {
				errs[i] = err
				return
			}
			// Every other caller names an unknown id in the same stream of batches.
			if i%2 == 0 {
				id = "unknown-" + id
			}
			errs[i] = s.Checkpoint(t.Context(), id, "c", 1, time.Now())
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if i%2 == 0 && !errors.Is(err, captchaq.ErrNotFound) {
			t.Errorf("caller %d: %v, want ErrNotFound", i, err)
		}
		if i%2 == 1 && err != nil {
			t.Errorf("caller %d: %v", i, err)
		}
	}
	inflight := 0
	if err := s.Pending(t.Context(), func(r captchaq.Record) error {
		if r.Status == captchaq.StatusInFlight {
			inflight++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if inflight != n/2 {
		t.Errorf("%d tasks in flight, want %d", inflight, n/2)
	}
}

// TestCloseDuringWrites checks that writes racing Close either fail with
// ErrClosed or are committed: nothing acknowledged is lost.
func TestCloseDuringWrites(t *testing.T) {
	t.Parallel()
	s := OpenTemp(t, Config{Retention: RetentionOff})
	path := s.Path()
	const goroutines = 16
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		acked   []string
		started = make(chan struct{}, goroutines)
	)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				id := fmt.Sprintf("g%d-%d", g, i)
				_, _, err := s.Enqueue(context.Background(), []captchaq.Task{{ID: id, Method: "turnstile"}}, time.Now())
				if i == 0 {
					started <- struct{}{}
				}
				if errors.Is(err, ErrClosed) {
					return
				}
				if err != nil {
					t.Errorf("Enqueue(%s): %v, want nil or ErrClosed", id, err)
					return
				}
				mu.Lock()
				acked = append(acked, id)
				mu.Unlock()
			}
		}()
	}
	for range goroutines {
		<-started
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()

	s, err := Open(t.Context(), path, Config{Retention: RetentionOff})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, id := range acked {
		if _, err := s.Get(t.Context(), id); err != nil {
			t.Errorf("acknowledged %s: %v", id, err)
		}
	}
	t.Logf("%d writes acknowledged before Close", len(acked))
}
