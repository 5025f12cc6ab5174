package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/captchaq/captchaq"
)

// gatedRecords is a recordGetter whose Get signals it was entered and then
// waits for release (or for its context): a result recorded just as the
// server stops, its pingback between the queue and the Store read.
type gatedRecords struct {
	records
	entered chan string
	release chan struct{}
}

func (g gatedRecords) Get(ctx context.Context, id string) (captchaq.Record, error) {
	g.entered <- id
	select {
	case <-g.release:
		return g.records.Get(ctx, id)
	case <-ctx.Done():
		return captchaq.Record{}, ctx.Err()
	}
}

// hangLimit bounds every wait of these tests; it fires only on a hang.
const hangLimit = 60 * time.Second

func recv[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(hangLimit):
		t.Fatalf("no %s after %s", what, hangLimit)
		panic("unreachable")
	}
}

func closeAsync(ps *pingbackSender, ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		ps.close(ctx)
		close(done)
	}()
	return done
}

// A pingback being sent when the server stops, and one queued behind it,
// are both delivered before close returns.
func TestPingbackCloseDrainsInProgress(t *testing.T) {
	t.Parallel()
	hits := make(chan string, 4)
	rx := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		hits <- r.Form.Get("id")
	}))
	defer rx.Close()
	st := gatedRecords{records: records{}, entered: make(chan string, 4), release: make(chan struct{})}
	for _, id := range []string{"qa/1", "qa/2"} {
		st.records[id] = captchaq.Record{Task: captchaq.Task{ID: id, Pingback: formPingback + rx.URL + "/hook"}}
	}
	ps := newTestSender(t, 1, testLoopback)
	ps.enqueue(st, captchaq.Result{ID: "qa/1", Status: captchaq.StatusSolved, Token: "T1"}, "1")
	ps.enqueue(st, captchaq.Result{ID: "qa/2", Status: captchaq.StatusSolved, Token: "T2"}, "2")
	if id := recv(t, st.entered, "store read"); id != "qa/1" {
		t.Fatalf("first read %q, want qa/1", id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
	defer cancel()
	done := closeAsync(ps, ctx)
	recv(t, ps.closing, "close")
	close(st.release) // the read goes on only once close has begun
	got := []string{recv(t, hits, "first pingback"), recv(t, hits, "second pingback")}
	recv(t, done, "return from close")
	if got[0] != "1" || got[1] != "2" {
		t.Errorf("pingbacks %v, want [1 2]", got)
	}
	for outcome, want := range map[string]float64{pingbackSent: 2, pingbackFailed: 0, pingbackDropped: 0, pingbackAbandoned: 0} {
		if n := testutil.ToFloat64(ps.metrics.WithLabelValues(outcome)); n != want {
			t.Errorf("%s pingbacks: %v, want %v", outcome, n, want)
		}
	}
	// After close, a result's pingback is dropped and counted.
	ps.enqueue(st, captchaq.Result{ID: "qa/3", Status: captchaq.StatusSolved}, "3")
	if n := testutil.ToFloat64(ps.metrics.WithLabelValues(pingbackDropped)); n != 1 {
		t.Errorf("dropped after close: %v, want 1", n)
	}
}

// When close's context ends first, the pingback in progress and the one
// queued behind it are abandoned and counted, and close returns.
func TestPingbackCloseDeadlineCountsAbandoned(t *testing.T) {
	t.Parallel()
	rx := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		t.Error("a pingback was sent past the deadline")
	}))
	defer rx.Close()
	st := gatedRecords{records: records{}, entered: make(chan string, 4), release: make(chan struct{})}
	defer close(st.release)
	for _, id := range []string{"qa/1", "qa/2"} {
		st.records[id] = captchaq.Record{Task: captchaq.Task{ID: id, Pingback: rx.URL}}
	}
	ps := newTestSender(t, 1, testLoopback)
	ps.enqueue(st, captchaq.Result{ID: "qa/1", Status: captchaq.StatusSolved}, "1")
	ps.enqueue(st, captchaq.Result{ID: "qa/2", Status: captchaq.StatusSolved}, "2")
	recv(t, st.entered, "store read")
	ctx, cancel := context.WithCancel(context.Background())
	done := closeAsync(ps, ctx)
	recv(t, ps.closing, "close")
	cancel() // the shutdown deadline
	recv(t, done, "return from close")
	for outcome, want := range map[string]float64{pingbackSent: 0, pingbackAbandoned: 2} {
		if n := testutil.ToFloat64(ps.metrics.WithLabelValues(outcome)); n != want {
			t.Errorf("%s pingbacks: %v, want %v", outcome, n, want)
		}
	}
}

// flakyRecords is a recordGetter whose first fails reads fail as a
// PostgreSQL restart fails them (the server ended the connection), then
// answer; it counts the reads.
type flakyRecords struct {
	records
	mu    sync.Mutex
	fails int
	reads int
}

func (f *flakyRecords) Get(ctx context.Context, id string) (captchaq.Record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	if f.reads <= f.fails {
		return captchaq.Record{}, errors.New("FATAL: terminating connection due to administrator command (SQLSTATE 57P01)")
	}
	return f.records.Get(ctx, id)
}

// A store that fails while it restarts delays a pingback; it never drops
// it: the read is tried again until the store answers, and the pingback
// goes once.
func TestPingbackWaitsForTheStore(t *testing.T) {
	t.Parallel()
	hits := make(chan string, 4)
	rx := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		hits <- r.Form.Get("id") + "=" + r.Form.Get("code")
	}))
	defer rx.Close()
	st := &flakyRecords{records: records{"qa/1": {Task: captchaq.Task{ID: "qa/1", Pingback: formPingback + rx.URL + "/hook"}}}, fails: 3}
	ps := newTestSender(t, 1, testLoopback)
	ps.enqueue(st, captchaq.Result{ID: "qa/1", Status: captchaq.StatusSolved, Token: "T1"}, "1")
	if got := recv(t, hits, "pingback"); got != "1=T1" {
		t.Fatalf("pingback %q, want 1=T1", got)
	}
	waitCount(t, ps, pingbackSent, 1)
	st.mu.Lock()
	reads := st.reads
	st.mu.Unlock()
	if reads != 4 {
		t.Errorf("store read %d times, want 4 (3 failed, 1 answered)", reads)
	}
	if n := testutil.ToFloat64(ps.metrics.WithLabelValues(pingbackFailed)); n != 0 {
		t.Errorf("failed pingbacks: %v, want 0", n)
	}
	select {
	case extra := <-hits:
		t.Errorf("a second pingback %q", extra)
	default:
	}
}

// A task the store does not hold is read once: nothing to wait for.
func TestPingbackOfAnUnknownTaskFailsAtOnce(t *testing.T) {
	t.Parallel()
	ps := newTestSender(t, 1, testLoopback)
	st := &missingRecords{}
	ps.enqueue(st, captchaq.Result{ID: "qa/9", Status: captchaq.StatusSolved, Token: "T"}, "9")
	waitCount(t, ps, pingbackFailed, 1)
	if n := st.reads.Load(); n != 1 {
		t.Errorf("store read %d times, want 1", n)
	}
}

type missingRecords struct{ reads atomic.Int32 }

func (m *missingRecords) Get(_ context.Context, id string) (captchaq.Record, error) {
	m.reads.Add(1)
	return captchaq.Record{}, fmt.Errorf("%w: %q", captchaq.ErrNotFound, id)
}
