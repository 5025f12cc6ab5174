package captchaq_test

import (
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/sim"
)

// line is what a caller of StreamFunc carries beside each task.
type line struct {
	n    int
	task captchaq.Task
}

// streamAll runs StreamFunc over tasks and returns, by line, the one
// outcome each got (a second call for a line fails the test).
func streamAll(t *testing.T, q *captchaq.Queue, parallel int, tasks []captchaq.Task) (results map[int]captchaq.Result, errs map[int]error, done func()) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	results, errs = map[int]captchaq.Result{}, map[int]error{}
	in := make(chan line)
	go func() {
		defer close(in)
		for i, tk := range tasks {
			wg.Add(1)
			in <- line{i, tk}
		}
	}()
	captchaq.StreamFunc(testbound.Context(t), q, in, parallel, func(l line) captchaq.Task { return l.task }, func(l line, r captchaq.Result, err error) {
		defer wg.Done()
		mu.Lock()
		defer mu.Unlock()
		_, twice := results[l.n]
		if _, e := errs[l.n]; twice || e {
			t.Errorf("line %d: a second outcome (%+v, %v)", l.n, r, err)
		}
		if err != nil {
			errs[l.n] = err
			return
		}
		results[l.n] = r
	})
	return results, errs, func() {
		testbound.WaitGroup(t, "an outcome for every line", &wg)
		mu.Lock()
		defer mu.Unlock()
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
	wait()
	if len(results) != len(want) {
		t.Fatalf("%d results, want %d", len(results), len(want))
	}
	for i, id := range want {
		if r := results[i]; r.ID != id || r.Status != captchaq.StatusSolved {
			t.Errorf("line %d: %+v, want %s solved", i, r, id)
		}
	}
	var te *captchaq.TaskError
	if err := errs[len(want)]; !errors.As(err, &te) || te.Code != captchaq.CodeInvalidTask {
		t.Errorf("bad task: %v, want a *TaskError %s", err, captchaq.CodeInvalidTask)
	}
	if err := errs[len(want)+1]; !errors.Is(err, captchaq.ErrIDConflict) {
		t.Errorf("conflicting task: %v, want ErrIDConflict", err)
	}
	if got := b.prov.order(); !slices.Equal(got, want) {
		t.Errorf("submit order differs from the input's (first %v)", got[:min(len(got), 5)])
	}
}

// TestStreamFuncAfterClose: once the queue is closed every item is refused
// with ErrClosed, and in is still read to its end.
func TestStreamFuncAfterClose(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{}, captchaq.Config{})
	b.start(t)
	b.q.Close()
	var tasks []captchaq.Task
	for _, id := range ids("c", 300) {
		tasks = append(tasks, task(id, 5))
	}
	results, errs, wait := streamAll(t, b.q, 0, tasks)
	wait()
	if len(results) != 0 || len(errs) != len(tasks) {
		t.Fatalf("%d results and %d refusals, want 0 and %d", len(results), len(errs), len(tasks))
	}
	for n, err := range errs {
		if !errors.Is(err, captchaq.ErrClosed) {
			t.Fatalf("line %d: %v, want ErrClosed", n, err)
		}
	}
}
