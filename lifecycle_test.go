package captchaq_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/sim"
)

func TestResumeInFlightPollsWithoutResubmit(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{Latency: fastLatency(300 * time.Millisecond)}, captchaq.Config{})
	b.start(t)
	submitAll(t, b.q, task("a", 5))
	ctx := testbound.Context(t)
	testbound.Until(t, "checkpoint", func() bool {
		r, err := b.store.Get(ctx, "a")
		return err == nil && r.Status == captchaq.StatusInFlight
	})
	b.q.Close()
	rec, _ := b.store.Get(ctx, "a")
	if rec.CaptchaID == "" || rec.Attempts != 1 {
		t.Fatalf("checkpoint after Close: %+v", rec)
	}

	rec2 := &recorder{Provider: b.client}
	q2, err := captchaq.New(captchaq.Config{Provider: rec2, Store: b.store, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q2.Close() })
	f, err := q2.Submit(ctx, task("a", 5)) // known id: attaches before Start
	if err != nil {
		t.Fatal(err)
	}
	if err := q2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	r := waitAll(t, []*captchaq.Future{f})[0]
	if r.Status != captchaq.StatusSolved || r.Attempts != 1 || r.Token == "" {
		t.Fatalf("result %+v", r)
	}
	if n := b.srv.Stats().Accepted; n != 1 {
		t.Fatalf("simulator accepted %d submits, want 1 (resume must poll, not resubmit)", n)
	}
	if got := rec2.order(); len(got) != 0 {
		t.Fatalf("second queue submitted %v", got)
	}
	if m := q2.Metrics(); m.Resumed != 1 || m.ResumedInFlight != 1 || m.Submitted != 0 {
		t.Fatalf("Metrics Resumed %d, ResumedInFlight %d, Submitted %d; want 1, 1, 0", m.Resumed, m.ResumedInFlight, m.Submitted)
	}
}

// A resumed captcha id that the provider no longer knows (here: a new
// simulator, as after a provider restart) is submitted again, once, and the
// lost attempt is not counted.
func TestResumeUnknownIDSubmitsAgain(t *testing.T) {
	t.Parallel()
	first := setup(t, sim.Config{Latency: fastLatency(time.Hour)}, captchaq.Config{})
	first.start(t)
	submitAll(t, first.q, task("a", 5))
	ctx := testbound.Context(t)
	testbound.Until(t, "checkpoint", func() bool {
		r, err := first.store.Get(ctx, "a")
		return err == nil && r.Status == captchaq.StatusInFlight
	})
	first.q.Close()

	second := setup(t, sim.Config{}, captchaq.Config{Store: first.store})
	f, err := second.q.Submit(ctx, task("a", 5))
	if err != nil {
		t.Fatal(err)
	}
	second.start(t)
	r := waitAll(t, []*captchaq.Future{f})[0]
	if r.Status != captchaq.StatusSolved || r.Attempts != 1 {
		t.Fatalf("result %+v, want solved on attempt 1", r)
	}
	if n := second.srv.Stats().Accepted; n != 1 {
		t.Fatalf("new simulator accepted %d submits, want 1", n)
	}
	if got := second.prov.order(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("second queue submitted %v, want [a]", got)
	}
}

func TestSubmitKnownIDIsIdempotent(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{}, captchaq.Config{})
	ctx := testbound.Context(t)
	// Twice before Start: one task, two Futures.
	fs := submitAll(t, b.q, task("a", 5), task("a", 1))
	b.start(t)
	rs := waitAll(t, fs)
	if rs[0].Token == "" || rs[0].Token != rs[1].Token {
		t.Fatalf("results %+v", rs)
	}
	// Once final: resolved at once with the stored result.
	f, err := b.q.Submit(ctx, task("a", 5))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.Done():
	default:
		t.Fatal("Future of a finished id not resolved at once")
	}
	r, _ := f.Wait(ctx)
	if r.Token != rs[0].Token || r.Status != captchaq.StatusSolved {
		t.Fatalf("again: %+v", r)
	}
	if n := b.srv.Stats().Accepted; n != 1 {
		t.Fatalf("simulator accepted %d, want 1", n)
	}
	if m := b.q.Metrics(); m.Submitted != 1 || m.Solved != 1 {
		t.Fatalf("metrics submitted %d solved %d", m.Submitted, m.Solved)
	}
}

func TestSolveBatchInputOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{}, captchaq.Config{})
	b.start(t)
	noURL := task("nourl", 5)
	delete(noURL.Params, "pageurl")
	hcaptcha := captchaq.Task{ID: "hc", Method: "hcaptcha", Params: map[string]string{"sitekey": "x", "pageurl": "https://example.com/"}}
	in := []captchaq.Task{task("z", 9), noURL, task("a", 1), hcaptcha, task("m", 5)}
	rs, err := b.q.SolveBatch(testbound.Context(t), in)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		id     string
		status captchaq.Status
		code   string
	}
	var got []row
	for _, r := range rs {
		got = append(got, row{r.ID, r.Status, r.ErrorCode})
	}
	want := []row{
		{"z", captchaq.StatusSolved, ""},
		{"nourl", captchaq.StatusFailed, captchaq.CodeInvalidTask},
		{"a", captchaq.StatusSolved, ""},
		{"hc", captchaq.StatusFailed, captchaq.CodeUnsupportedType},
		{"m", captchaq.StatusSolved, ""},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("results %v, want %v", got, want)
	}
	if n := b.srv.Stats().Calls.Submit; n != 3 {
		t.Fatalf("submits %d, want 3 (invalid tasks never sent)", n)
	}
}

// TestStreamFuncBackpressure: a stream larger than MaxQueued is read no
// faster than the queue takes it, every task gets its result, and a task
// refused at the door comes back as a failed result.
func TestStreamFuncBackpressure(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{}, captchaq.Config{MaxQueued: 4})
	b.start(t)
	in := make(chan captchaq.Task)
	ctx := testbound.Context(t)
	want := ids("s", 20)
	go func() {
		defer close(in)
		for _, id := range want {
			in <- task(id, 5)
		}
		in <- captchaq.Task{ID: "bad", Method: "turnstile"}
	}()
	var got []string
	solved := 0
	err := captchaq.StreamFunc(ctx, b.q, in, 0, func(t captchaq.Task) (captchaq.Task, error) { return t, nil }, func(_ captchaq.Task, r captchaq.Result, refused error) {
		got = append(got, r.ID)
		if r.Status == captchaq.StatusSolved {
			solved++
		} else if r.ID != "bad" || r.ErrorCode != captchaq.CodeInvalidTask || refused == nil {
			t.Errorf("unexpected result %+v (refused: %v)", r, refused)
		}
	})
	if err != nil {
		t.Fatalf("StreamFunc: %v (%d results)", err, len(got))
	}
	sort.Strings(got)
	if !slices.Equal(got, sortedWith(want, "bad")) {
		t.Fatalf("results for %v", got)
	}
	if solved != 20 {
		t.Fatalf("solved %d", solved)
	}
}

// A stream waiting for room ends when the queue stops: the task it held
// will send no result, StreamFunc returns ErrClosed with no result, the
// rest of in is not stored (the accepted task stays in the Store).
func TestStreamFuncEndsWhenQueueClosesWhileFull(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{}, captchaq.Config{MaxQueued: 1})
	in := make(chan captchaq.Task, 2)
	in <- task("held", 5)
	in <- task("waiting", 5)
	close(in)
	done := make(chan error, 1)
	go func() {
		done <- captchaq.StreamFunc(context.Background(), b.q, in, 1, func(t captchaq.Task) (captchaq.Task, error) { return t, nil }, func(_ captchaq.Task, r captchaq.Result, _ error) {
			t.Errorf("result %+v after Close, want none", r)
		})
	}()
	testbound.Until(t, "the first task accepted", func() bool {
		_, err := b.store.Get(context.Background(), "held")
		return err == nil
	})
	b.q.Close()
	select {
	case err := <-done:
		if !errors.Is(err, captchaq.ErrClosed) {
			t.Fatalf("StreamFunc returned %v after Close, want ErrClosed", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("StreamFunc still running 30 s after the queue closed")
	}
	if _, err := b.store.Get(context.Background(), "waiting"); !errors.Is(err, captchaq.ErrNotFound) {
		t.Fatalf("the task read after Close: %v, want ErrNotFound (never stored)", err)
	}
}

func sortedWith(s []string, extra ...string) []string {
	out := append(slices.Clone(s), extra...)
	sort.Strings(out)
	return out
}

func TestSubmitFuncAndOnResultSeeDurableResults(t *testing.T) {
	t.Parallel()
	var (
		mu       sync.Mutex
		onResult []string
		store    = captchaq.NewMemoryStore(captchaq.MemoryStoreConfig{})
	)
	b := setup(t, sim.Config{}, captchaq.Config{Store: store, OnResult: func(r captchaq.Result) {
		rec, err := store.Get(context.Background(), r.ID)
		mu.Lock()
		defer mu.Unlock()
		if err == nil && rec.Status == r.Status {
			onResult = append(onResult, r.ID)
		}
	}})
	b.start(t)
	done := make(chan captchaq.Result, 2)
	for _, id := range []string{"a", "b"} {
		if err := b.q.SubmitFunc(testbound.Context(t), task(id, 5), func(r captchaq.Result) {
			rec, err := store.Get(context.Background(), r.ID)
			if err != nil || rec.Status != captchaq.StatusSolved {
				r.Status = "not durable"
			}
			done <- r
		}); err != nil {
			t.Fatal(err)
		}
	}
	got := []string{}
	for range 2 {
		r := testbound.Receive(t, "a SubmitFunc callback", done)
		if r.Status != captchaq.StatusSolved {
			t.Fatalf("callback got %+v", r)
		}
		got = append(got, r.ID)
	}
	sort.Strings(got)
	if !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("callbacks %v", got)
	}
	if err := b.q.Shutdown(testbound.Context(t)); err != nil {
		t.Fatalf("Shutdown: %v (hung if the deadline passed: %v)", err, testbound.Bound)
	}
	mu.Lock()
	defer mu.Unlock()
	sort.Strings(onResult)
	if !slices.Equal(onResult, []string{"a", "b"}) {
		t.Fatalf("OnResult saw durable %v", onResult)
	}
}

func TestShutdownDrains(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{Threads: 2}, captchaq.Config{Threads: 2})
	b.start(t)
	var tasks []captchaq.Task
	for _, id := range ids("d", 10) {
		tasks = append(tasks, task(id, 5))
	}
	fs := submitAll(t, b.q, tasks...)
	if err := b.q.Shutdown(testbound.Context(t)); err != nil {
		t.Fatalf("Shutdown: %v (hung if the deadline passed: %v)", err, testbound.Bound)
	}
	for _, f := range fs {
		select {
		case <-f.Done():
		default:
			t.Fatalf("%s unfinished after Shutdown", f.ID())
		}
	}
	if got := statuses(waitAll(t, fs)); got[captchaq.StatusSolved] != 10 {
		t.Fatalf("statuses %v", got)
	}
	if _, err := b.q.Submit(context.Background(), task("late", 5)); !errors.Is(err, captchaq.ErrClosed) {
		t.Fatalf("Submit after Shutdown: %v", err)
	}
}

func TestShutdownTimeoutKeepsTasksInStore(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{}, captchaq.Config{})
	b.srv.SetAccount(sim.Account{BadKey: true}) // nothing can finish
	b.start(t)
	fs := submitAll(t, b.q, task("a", 5), task("b", 5))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := b.q.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v", err)
	}
	for _, f := range fs {
		if _, err := f.Wait(testbound.Context(t)); !errors.Is(err, captchaq.ErrClosed) {
			t.Fatalf("Wait %s: %v", f.ID(), err)
		}
	}
	var pending []string
	b.store.Pending(context.Background(), func(r captchaq.Record) error {
		pending = append(pending, r.Task.ID+":"+string(r.Status))
		return nil
	})
	if !slices.Equal(pending, []string{"a:queued", "b:queued"}) {
		t.Fatalf("pending %v", pending)
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{Threads: 1, Latency: fastLatency(200 * time.Millisecond)}, captchaq.Config{Threads: 1})
	ctx := testbound.Context(t)
	b.start(t)
	fs := submitAll(t, b.q, task("first", 1), task("second", 5))
	testbound.Until(t, "first in flight", func() bool {
		r, _ := b.store.Get(ctx, "first")
		return r.Status == captchaq.StatusInFlight
	})
	if err := b.q.Cancel(ctx, "first"); !errors.Is(err, captchaq.ErrInFlight) {
		t.Fatalf("Cancel in flight: %v", err)
	}
	if err := b.q.Cancel(ctx, "second"); err != nil {
		t.Fatalf("Cancel queued: %v", err)
	}
	rs := waitAll(t, fs)
	if rs[0].Status != captchaq.StatusSolved || rs[1].Status != captchaq.StatusFailed || rs[1].ErrorCode != captchaq.CodeCanceled {
		t.Fatalf("results %+v", rs)
	}
	if err := b.q.Cancel(ctx, "second"); !errors.Is(err, captchaq.ErrFinal) {
		t.Fatalf("Cancel finished: %v", err)
	}
	if err := b.q.Cancel(ctx, "nope"); !errors.Is(err, captchaq.ErrNotFound) {
		t.Fatalf("Cancel unknown: %v", err)
	}
	if got := b.prov.order(); !slices.Equal(got, []string{"first"}) {
		t.Fatalf("submitted %v", got)
	}
}

// TestAbandon: a task let go of in flight is polled no more, frees its
// thread for the next task at once, and finishes CANCELED through the
// Store; one being let go of while queued is never submitted.
func TestAbandon(t *testing.T) {
	t.Parallel()
	// The provider has a thread more than the queue: "held" stays on
	// one there (its solve takes an hour) once the queue lets go of it.
	b := setup(t, sim.Config{Threads: 2, Latency: fastLatency(time.Hour)}, captchaq.Config{Threads: 1})
	ctx := testbound.Context(t)
	b.start(t)
	fs := submitAll(t, b.q, task("held", 1), task("queued", 5), task("next", 9))
	testbound.Until(t, "held in flight", func() bool {
		r, _ := b.store.Get(ctx, "held")
		return r.Status == captchaq.StatusInFlight
	})
	if err := b.q.Abandon(ctx, "queued"); err != nil {
		t.Fatalf("Abandon queued: %v", err)
	}
	if err := b.q.Abandon(ctx, "held"); err != nil {
		t.Fatalf("Abandon in flight: %v", err)
	}
	for i, id := range []string{"held", "queued"} {
		r, err := fs[i].Wait(ctx)
		if err != nil || r.Status != captchaq.StatusFailed || r.ErrorCode != captchaq.CodeCanceled {
			t.Fatalf("%s: %+v, %v; want failed CANCELED", id, r, err)
		}
		if rec, _ := b.store.Get(ctx, id); rec.Status != captchaq.StatusFailed {
			t.Fatalf("%s in the store: %s, want failed", id, rec.Status)
		}
	}
	// The one thread is free again: the last task goes out on it.
	testbound.Until(t, "next submitted", func() bool { return slices.Equal(b.prov.order(), []string{"held", "next"}) })
	if err := b.q.Abandon(ctx, "held"); !errors.Is(err, captchaq.ErrFinal) {
		t.Fatalf("Abandon finished: %v", err)
	}
	if err := b.q.Abandon(ctx, "nope"); !errors.Is(err, captchaq.ErrNotFound) {
		t.Fatalf("Abandon unknown: %v", err)
	}
}

// pingbackServer serves pingbacks at url with the handler given to serve,
// holding requests until it is given.
func pingbackServer(t *testing.T) (url string, serve func(http.Handler)) {
	var handler http.Handler
	ready := make(chan struct{})
	pb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-ready
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(pb.Close)
	return pb.URL + "/pingback", func(h http.Handler) {
		handler = h
		close(ready)
	}
}

func TestPingbackAnswersWithoutPolling(t *testing.T) {
	t.Parallel()
	pbURL, serve := pingbackServer(t)
	b := setup(t, sim.Config{}, captchaq.Config{PingbackURL: pbURL, PollInterval: 200 * time.Millisecond})
	serve(b.q.PingbackHandler())
	b.start(t)
	var tasks []captchaq.Task
	for _, id := range ids("p", 10) {
		tasks = append(tasks, task(id, 5))
	}
	rs := waitAll(t, submitAll(t, b.q, tasks...))
	if got := statuses(rs); got[captchaq.StatusSolved] != 10 {
		t.Fatalf("statuses %v", got)
	}
	// The simulator counts a pingback once our handler has answered it.
	testbound.Until(t, "10 pingbacks counted", func() bool { return b.srv.Stats().PingbacksSent == 10 })
	st := b.srv.Stats()
	// 10 submits; polls only as a fallback far past the expected time.
	m := b.q.Metrics()
	if st.Calls.PollBulk+st.Calls.PollSingle != 0 || m.Requests != 10 || m.RequestsPerSolved != 1 {
		t.Fatalf("polls %d+%d, requests %d (%.2f per solved)", st.Calls.PollBulk, st.Calls.PollSingle, m.Requests, m.RequestsPerSolved)
	}
}

func TestAdoptInFlightRecordPolls(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{}, captchaq.Config{})
	ctx := testbound.Context(t)
	tk := task("redelivered", 5)
	captchaID, err := b.client.Submit(ctx, tk.ProviderTask(), "")
	if err != nil {
		t.Fatal(err)
	}
	b.start(t)
	f, err := b.q.Adopt(ctx, captchaq.Record{Task: tk, Status: captchaq.StatusInFlight, CaptchaID: captchaID, Attempts: 1, SubmittedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	queued, err := b.q.Adopt(ctx, captchaq.Record{Task: task("queued", 5), Status: captchaq.StatusQueued, Attempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	rs := waitAll(t, []*captchaq.Future{f, queued})
	if rs[0].Status != captchaq.StatusSolved || rs[0].Attempts != 1 || rs[0].Token == "" {
		t.Fatalf("adopted in flight: %+v", rs[0])
	}
	if rs[1].Status != captchaq.StatusSolved || rs[1].Attempts != 2 {
		t.Fatalf("adopted queued (one attempt before): %+v", rs[1])
	}
	if got := b.prov.order(); !slices.Equal(got, []string{"queued"}) {
		t.Fatalf("queue submitted %v", got)
	}
	if n := b.srv.Stats().Accepted; n != 2 {
		t.Fatalf("simulator accepted %d, want 2", n)
	}
}

// Many goroutines submitting one id store and solve it once; their
// Futures all get its one result.
func TestConcurrentSubmitsOfOneIDStoreItOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{}, captchaq.Config{})
	b.start(t)
	ctx := testbound.Context(t)
	const n = 50
	fs := make([]*captchaq.Future, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := b.q.Submit(ctx, task("same", 5))
			if err != nil {
				t.Error(err)
				return
			}
			fs[i] = f
		}()
	}
	testbound.WaitGroup(t, "the 50 Submits", &wg)
	if t.Failed() {
		return
	}
	rs := waitAll(t, fs)
	for i, r := range rs {
		if r.Status != captchaq.StatusSolved || r.Token != rs[0].Token {
			t.Fatalf("result %d: %+v, want the one solved result %q", i, r, rs[0].Token)
		}
	}
	if got := b.srv.Stats().Accepted; got != 1 {
		t.Fatalf("simulator accepted %d submits, want 1", got)
	}
	if m := b.q.Metrics(); m.Submitted != 1 {
		t.Fatalf("Metrics.Submitted = %d, want 1", m.Submitted)
	}
}
