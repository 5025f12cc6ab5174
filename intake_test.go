package captchaq_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/sim"
	"github.com/captchaq/captchaq/storetest"
)

// collector gathers SubmitBatchFunc's callbacks by index.
type collector struct {
	mu   sync.Mutex
	got  map[int][]captchaq.Result
	done chan struct{}
	want int
}

func newCollector(want int) *collector {
	return &collector{got: map[int][]captchaq.Result{}, done: make(chan struct{}), want: want}
}

func (c *collector) add(i int, r captchaq.Result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got[i] = append(c.got[i], r)
	if c.want--; c.want == 0 {
		close(c.done)
	}
}

// wait returns the results once all wanted have come, or nil after
// reporting a timeout (it may run on a goroutine of the test's).
func (c *collector) wait(t *testing.T) map[int][]captchaq.Result {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		t.Error("timed out waiting for the batch's results")
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.got
}

// A batch is stored in one Enqueue: an invalid task is refused on its own,
// a repeated id is stored once and both indexes get its result, and an id
// the Store has finished gets the stored result without a submit.
func TestSubmitBatchFuncStoresTogether(t *testing.T) {
	t.Parallel()
	mem := captchaq.NewMemoryStore(captchaq.MemoryStoreConfig{})
	store := storetest.NewRecorder(mem)
	b := setup(t, sim.Config{}, captchaq.Config{Store: store})
	ctx := context.Background()
	done := captchaq.Result{ID: "done", Status: captchaq.StatusSolved, Method: "turnstile", Token: "stored-token", FinishedAt: time.Now()}
	if _, _, err := mem.Enqueue(ctx, []captchaq.Task{task("done", 5)}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := mem.Finish(ctx, done); err != nil {
		t.Fatal(err)
	}
	invalid := task("bad", 5)
	delete(invalid.Params, "sitekey")
	tasks := []captchaq.Task{task("a", 5), invalid, task("b", 5), task("a", 5), task("done", 5), task("c", 5)}
	c := newCollector(5)
	errs := b.q.SubmitBatchFunc(ctx, tasks, c.add)
	for i, err := range errs {
		if i == 1 {
			var te *captchaq.TaskError
			if !errors.As(err, &te) || te.Code != captchaq.CodeInvalidTask || te.ID != "bad" {
				t.Errorf("task 1: %v, want an INVALID_TASK *TaskError for bad", err)
			}
			continue
		}
		if err != nil {
			t.Errorf("task %d: %v", i, err)
		}
	}
	if got := store.Enqueues(); !slices.Equal(got, []int{4}) {
		t.Fatalf("Enqueue calls of %v tasks, want one of 4 (a, b, done, c)", got)
	}
	b.start(t)
	got := c.wait(t)
	if got == nil {
		return
	}
	for _, i := range []int{0, 2, 3, 5} {
		if len(got[i]) != 1 || got[i][0].ID != tasks[i].ID || got[i][0].Status != captchaq.StatusSolved || got[i][0].Token == "" {
			t.Errorf("task %d: results %+v, want one solved result for %s", i, got[i], tasks[i].ID)
		}
	}
	if got[0][0].Token != got[3][0].Token {
		t.Errorf("the repeated id got tokens %q and %q, want its one result twice", got[0][0].Token, got[3][0].Token)
	}
	if len(got[4]) != 1 || got[4][0].Token != "stored-token" {
		t.Errorf("finished id: results %+v, want the stored one", got[4])
	}
	if _, ok := got[1]; ok {
		t.Errorf("the invalid task got a result: %+v", got[1])
	}
	if n := b.srv.Stats().Accepted; n != 3 {
		t.Errorf("simulator accepted %d submits, want 3 (a, b, c)", n)
	}
	if m := b.q.Metrics(); m.Submitted != 3 {
		t.Errorf("Metrics.Submitted = %d, want 3", m.Submitted)
	}
}

// A batch larger than MaxQueued goes in as room frees up, in rounds no
// larger than the room; when ctx ends while it waits, the tasks not yet
// stored get ctx's error and the stored ones still get their results.
func TestSubmitBatchFuncWaitsForRoom(t *testing.T) {
	t.Parallel()
	store := storetest.NewRecorder(captchaq.NewMemoryStore(captchaq.MemoryStoreConfig{}))
	b := setup(t, sim.Config{}, captchaq.Config{Store: store, MaxQueued: 3})
	tasks := make([]captchaq.Task, 5)
	for i, id := range ids("r", 5) {
		tasks[i] = task(id, 5)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	c := newCollector(3)
	errs := b.q.SubmitBatchFunc(ctx, tasks, c.add)
	want := []error{nil, nil, nil, context.DeadlineExceeded, context.DeadlineExceeded}
	for i, err := range errs {
		if !errors.Is(err, want[i]) || (want[i] == nil) != (err == nil) {
			t.Errorf("before Start, task %d: %v, want %v", i, err, want[i])
		}
	}
	if got := store.Enqueues(); !slices.Equal(got, []int{3}) {
		t.Fatalf("Enqueue calls of %v tasks, want one of 3", got)
	}
	b.start(t)
	if got := c.wait(t); len(got) != 3 || len(got[0]) != 1 || len(got[1]) != 1 || len(got[2]) != 1 {
		t.Fatalf("results %+v, want one for each of tasks 0, 1, 2", got)
	}

	// Started: ten tasks through room for three.
	more := make([]captchaq.Task, 10)
	for i, id := range ids("m", 10) {
		more[i] = task(id, 5)
	}
	c = newCollector(10)
	for i, err := range b.q.SubmitBatchFunc(testbound.Context(t), more, c.add) {
		if err != nil {
			t.Fatalf("task %d: %v", i, err)
		}
	}
	got := c.wait(t)
	if got == nil {
		return
	}
	for i := range more {
		if len(got[i]) != 1 || got[i][0].Status != captchaq.StatusSolved {
			t.Errorf("task %d: results %+v, want one solved", i, got[i])
		}
	}
	for _, n := range store.Enqueues()[1:] {
		if n > 3 {
			t.Errorf("an Enqueue of %d tasks with room for 3 at most: %v", n, store.Enqueues())
		}
	}
}

// Two batches naming the same ids in opposite orders neither deadlock nor
// store an id twice.
func TestSubmitBatchFuncOverlappingBatches(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{}, captchaq.Config{})
	b.start(t)
	ctx := testbound.Context(t)
	fwd := make([]captchaq.Task, 20)
	for i, id := range ids("o", 20) {
		fwd[i] = task(id, 5)
	}
	rev := slices.Clone(fwd)
	slices.Reverse(rev)
	tokens := make([]map[string]string, 2)
	var wg sync.WaitGroup
	for k, batch := range [][]captchaq.Task{fwd, rev} {
		c := newCollector(len(batch))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, err := range b.q.SubmitBatchFunc(ctx, batch, c.add) {
				if err != nil {
					t.Errorf("batch %d task %d: %v", k, i, err)
				}
			}
			tokens[k] = map[string]string{}
			for i, rs := range c.wait(t) {
				tokens[k][batch[i].ID] = rs[0].Token
			}
		}()
	}
	testbound.WaitGroup(t, "both batches", &wg)
	if t.Failed() {
		return
	}
	for id, tok := range tokens[0] {
		if tok == "" || tokens[1][id] != tok {
			t.Errorf("%s: tokens %q and %q, want its one result in both batches", id, tok, tokens[1][id])
		}
	}
	if n := b.srv.Stats().Accepted; n != 20 {
		t.Errorf("simulator accepted %d submits, want 20", n)
	}
}
