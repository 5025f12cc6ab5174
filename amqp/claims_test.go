package amqp

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/sim"
)

// TestLostDeliveryIsClaimed: a worker loses its connection (without
// crashing) between the provider's answer to a submit and its
// checkpoint's confirm, so the broker gives the task to another worker.
// That worker waits before submitting a redelivered copy; the first one
// reconnects, checkpoints the task and claims it, and the second drops its
// copy. The outcome: one paid solve, one result.
func TestLostDeliveryIsClaimed(t *testing.T) {
	cfg := fleetConfig(t)
	srv, apiURL, err := sim.Start(sim.Config{PollBan: sim.PollBan{Disabled: true}, Threads: 10, Seed: 15,
		Latency: map[provider.Kind]sim.Latency{provider.KindTurnstile: {Median: 500 * time.Millisecond, Min: 500 * time.Millisecond, Max: 500 * time.Millisecond}}},
		"127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx := longCtx(t, time.Minute)
	c := setup(t, cfg)
	t.Cleanup(func() { _ = DeleteTopology(context.Background(), cfg, "claim-a", "claim-b") })
	proxy := newCutProxy(t, cfg.URL)
	cfgA := cfg
	cfgA.URL = proxy.url
	cA, err := Dial(ctx, cfgA)
	if err != nil {
		t.Fatal(err)
	}
	defer cA.Close()
	cB, err := Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cB.Close()

	clientA, _ := provider.NewClient(provider.ClientConfig{BaseURL: apiURL, Key: "test-key"})
	clientB, _ := provider.NewClient(provider.ClientConfig{BaseURL: apiURL, Key: "test-key"})
	submitted, proceed := make(chan struct{}), make(chan struct{})
	cut := &cutAfterSubmit{Client: clientA, submitted: submitted, proceed: proceed}
	var logB lockedBuffer
	worker := func(conn *Conn, p captchaq.Provider, owner string, log *slog.Logger) *Worker {
		w, err := NewWorker(conn, WorkerConfig{Queue: captchaq.Config{Provider: p, Threads: 2, PollInterval: 50 * time.Millisecond, Logger: log},
			Owner: owner, Grace: 5 * time.Second, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	run := func(w *Worker) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Run(runCtx); err != nil {
				t.Errorf("worker %s: %v", w.Owner(), err)
			}
		}()
	}
	consumers := func(n int) {
		t.Helper()
		for {
			qs, err := c.Depths(ctx, c.Names().Tasks)
			if err != nil {
				t.Fatal(err)
			}
			if qs[0].Consumers == n {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("timed out waiting for %d consumers", n)
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	a := worker(cA, cut, "claim-a", slog.New(slog.DiscardHandler))
	run(a)
	consumers(1)
	pub := c.NewPublisher()
	defer pub.Close()
	const id = "claimed-0001"
	if err := pub.PublishTask(ctx, TaskMessage{Task: fleetTask(id, 0)}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-submitted:
	case <-ctx.Done():
		t.Fatal("worker a never submitted")
	}
	b := worker(cB, clientB, "claim-b", slog.New(slog.NewTextHandler(&logB, nil)))
	run(b)
	consumers(2)
	proxy.cut() // a's connection drops with the captcha id not yet checkpointed
	close(proceed)

	var got []captchaq.Result
	if _, err := c.Collect(ctx, 1, func(r captchaq.Result) error { got = append(got, r); return nil }); err != nil {
		t.Fatal(err)
	}
	stop()
	wg.Wait()
	if len(got) != 1 || got[0].ID != id || got[0].Status != captchaq.StatusSolved {
		t.Fatalf("results %+v, want %s solved once", got, id)
	}
	st := srv.Stats()
	if st.Accepted != 1 || st.Duplicates != 0 {
		t.Errorf("the provider accepted %d submits (%d duplicates), want one paid solve", st.Accepted, st.Duplicates)
	}
	if m := b.Queue().Metrics(); m.Submitted != 0 || m.Solved != 0 {
		t.Errorf("worker b's queue took %d tasks and solved %d, want none", m.Submitted, m.Solved)
	}
	if want := `msg="dropping a redelivered task another worker checkpointed" owner=claim-b id=` + id; !strings.Contains(logB.String(), want) {
		t.Errorf("worker b's log lacks %q (it never held the redelivered copy):\n%s", want, logB.String())
	}
	if cA.Reconnects() == 0 {
		t.Error("worker a's connection never dropped")
	}
	n := c.Names()
	qs, err := c.Depths(ctx, n.Tasks, n.Results, n.Failed)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.Ready != 0 {
			t.Errorf("%s holds %d messages after the run, want 0", q.Name, q.Ready)
		}
	}
}

// lockedBuffer is a log sink safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// cutAfterSubmit holds the first submit's answer until proceed closes.
// The queue sends a task checked at its door through SubmitChecked when
// the provider has it (as *provider.Client does), so both ways to submit
// are held: an embedded client's own SubmitChecked would pass the hold by.
type cutAfterSubmit struct {
	*provider.Client
	once               sync.Once
	submitted, proceed chan struct{}
}

func (p *cutAfterSubmit) Submit(ctx context.Context, t provider.Task, pingback string) (string, error) {
	id, err := p.Client.Submit(ctx, t, pingback)
	p.hold()
	return id, err
}

func (p *cutAfterSubmit) SubmitChecked(ctx context.Context, t provider.Checked, pingback string) (string, error) {
	id, err := p.Client.SubmitChecked(ctx, t, pingback)
	p.hold()
	return id, err
}

func (p *cutAfterSubmit) hold() {
	p.once.Do(func() {
		close(p.submitted)
		<-p.proceed
	})
}

// cutProxy forwards TCP connections to the broker; cut drops every one
// open, as a network failure would. Muted, it forwards nothing and
// closes nothing, as a network partition: both sockets stay open and
// only heartbeats can tell.
type cutProxy struct {
	url   string
	muted atomic.Bool
	mu    sync.Mutex
	cs    []net.Conn
}

func newCutProxy(t *testing.T, brokerURL string) *cutProxy {
	t.Helper()
	u, err := url.Parse(brokerURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	target := u.Host
	u.Host = ln.Addr().String()
	p := &cutProxy{url: u.String()}
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.cs = append(p.cs, in, out)
			p.mu.Unlock()
			go p.pipe(out, in)
			go p.pipe(in, out)
		}
	}()
	t.Cleanup(p.cut)
	return p
}

func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.cs {
		c.Close()
	}
	p.cs = nil
}

// mute stops (or resumes) forwarding without closing anything.
func (p *cutProxy) mute(muted bool) { p.muted.Store(muted) }

// pipe copies src to dst while not muted; when src ends, it closes dst
// unless muted.
func (p *cutProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			if !p.muted.Load() {
				dst.Close()
			}
			return
		}
		if !p.muted.Load() {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
	}
}
