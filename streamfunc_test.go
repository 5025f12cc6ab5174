package captchaq_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/sim"
)

// line is what a caller of StreamFunc carries beside each task.
type line struct {
	n    int
	task captchaq.Task
}

// streamAll runs StreamFunc over tasks in the background and returns, by
// line, the one result each got and the refusals among them (a second
// call for a line fails the test); done waits for StreamFunc's return
// and gives its error.
func streamAll(t *testing.T, q *captchaq.Queue, parallel int, tasks []captchaq.Task) (results map[int]captchaq.Result, refused map[int]error, done func() error) {
	results, refused = map[int]captchaq.Result{}, map[int]error{}
	in := make(chan line)
	go func() {
		defer close(in)
		for i, tk := range tasks {
			in <- line{i, tk}
		}
	}()
	ret := make(chan error, 1)
	go func() {
		ret <- captchaq.StreamFunc(testbound.Context(t), q, in, parallel, func(l line) (captchaq.Task, error) { return l.task, nil }, func(l line, r captchaq.Result, err error) {
			if _, twice := results[l.n]; twice {
				t.Errorf("line %d: a second result (%+v, %v)", l.n, r, err)
			}
			results[l.n] = r
			if err != nil {
				refused[l.n] = err
			}
		})
	}()
	return results, refused, func() error {
		select {
		case err := <-ret:
			return err
		case <-time.After(testbound.Bound):
			t.Fatalf("StreamFunc still running after %v", testbound.Bound)
			return nil
		}
	}
}

// TestStreamFunc: every item gets one outcome; parallel 1 keeps in's order
// (the queue, started after the intake, submits in acceptance order on
// one thread); refusals come with their error.
func TestStreamFunc(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{Instant: true}, captchaq.Config{Threads: 1})
	want := ids("f", 300) // more than one chunk
	var tasks []captchaq.Task
	for _, id := range want {
		tasks = append(tasks, task(id, 5))
	}
	bad := captchaq.Task{ID: "bad", Method: "turnstile"}
	conflict := task("f01", 5)
	conflict.Params["pageurl"] = "https://example.com/other"
	tasks = append(tasks, bad, conflict)

	results, errs, wait := streamAll(t, b.q, 1, tasks)
	b.start(t)
	if err := wait(); err != nil {
		t.Fatalf("StreamFunc: %v", err)
	}
	if len(results) != len(want)+2 || len(errs) != 2 {
		t.Fatalf("%d results and %d refusals, want %d and 2", len(results), len(errs), len(want)+2)
	}
	for i, id := range want {
		if r := results[i]; r.ID != id || r.Status != captchaq.StatusSolved {
			t.Errorf("line %d: %+v, want %s solved", i, r, id)
		}
	}
	var te *captchaq.TaskError
	if err, r := errs[len(want)], results[len(want)]; !errors.As(err, &te) || te.Code != captchaq.CodeInvalidTask ||
		r.ID != "bad" || r.Status != captchaq.StatusFailed || r.ErrorCode != captchaq.CodeInvalidTask {
		t.Errorf("bad task: %v, %+v; want a *TaskError %s and its failed result", err, r, captchaq.CodeInvalidTask)
	}
	if err, r := errs[len(want)+1], results[len(want)+1]; !errors.Is(err, captchaq.ErrIDConflict) || r.ErrorCode != captchaq.CodeIDConflict {
		t.Errorf("conflicting task: %v, %+v; want ErrIDConflict and a failed result %s", err, r, captchaq.CodeIDConflict)
	}
	if got := b.prov.order(); !slices.Equal(got, want) {
		t.Errorf("submit order differs from the input's (first %v)", got[:min(len(got), 5)])
	}
}

// TestStreamFuncAfterClose: once the queue is closed StreamFunc returns
// ErrClosed, no item gets a result, and in is still read to its end.
func TestStreamFuncAfterClose(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{}, captchaq.Config{})
	b.start(t)
	b.q.Close()
	var tasks []captchaq.Task
	for _, id := range ids("c", 300) {
		tasks = append(tasks, task(id, 5))
	}
	in := make(chan line)
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		defer close(in)
		for i, tk := range tasks {
			in <- line{i, tk}
		}
	}()
	results := 0
	err := captchaq.StreamFunc(testbound.Context(t), b.q, in, 0, func(l line) (captchaq.Task, error) { return l.task, nil }, func(line, captchaq.Result, error) { results++ })
	if !errors.Is(err, captchaq.ErrClosed) || results != 0 {
		t.Fatalf("StreamFunc returned %v with %d results, want ErrClosed and none", err, results)
	}
	select {
	case <-sent:
	case <-time.After(testbound.Bound):
		t.Fatalf("in not read to its end within %v", testbound.Bound)
	}
}
