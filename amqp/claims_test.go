package amqp

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/testbound"
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
	r := newClaimRig(t, "claim")
	submitted, proceed := make(chan struct{}), make(chan struct{})
	a := r.worker(r.cA, &cutAfterSubmit{Client: r.client(), submitted: submitted, proceed: proceed}, "claim-a", slog.New(slog.DiscardHandler))
	r.run(a)
	r.consumers(1)
	r.publish("claimed-0001")
	select {
	case <-submitted:
	case <-r.ctx.Done():
		t.Fatal("worker a never submitted")
	}
	r.run(r.b)
	r.consumers(2)
	r.proxy.cut() // a's connection drops with the captcha id not yet checkpointed
	close(proceed)
	r.check("claimed-0001", r.b.Owner())
	if m := r.b.Queue().Metrics(); m.Submitted != 0 || m.Solved != 0 {
		t.Errorf("worker b's queue took %d tasks and solved %d, want none", m.Submitted, m.Solved)
	}
}

// TestLostAckIsClaimed: a worker's connection dies between its first
// checkpoint's confirm and the broker reading the ack of the task's
// delivery (here the ack is never sent: the connection is cut in
// between), so the broker gives the task back to the fleet twice: the
// task delivery, requeued without its captcha id, and the checkpoint,
// dead-lettered to Names.Adopt. One paid solve, one result: the first
// worker claims the task once it hears the connection ended that soon
// after the ack (a worker holding the copy drops it), and a worker that
// holds the copy waiting when the checkpoint reaches it adopts the
// checkpoint and acks the copy. Before, the copy's worker solved it again
// after its wait (two paid solves, as TestFleetDroppedConnection saw
// under load); with the claim alone, the claim dropped the checkpoint
// held beside the copy: the task was lost.
func TestLostAckIsClaimed(t *testing.T) {
	r := newClaimRig(t, "ack")
	a := r.worker(r.cA, r.client(), "ack-a", slog.New(slog.NewTextHandler(&r.logs, nil)))
	var once sync.Once
	a.store.afterFirstConfirm = func(string) {
		once.Do(func() {
			r.run(r.b)
			if !testbound.Eventually(func() bool { return r.consumerCount() == 2 }) {
				t.Error("worker b never consumed")
			}
			r.proxy.cut()
			if !testbound.Eventually(func() bool { return r.cA.Reconnects() > 0 }) {
				t.Error("worker a's connection never dropped")
			}
		})
	}
	r.run(a)
	r.consumers(1)
	r.publish("acked-0001")
	r.check("acked-0001")
	// a claimed the task: a copy b held waiting would have been dropped.
	testbound.Until(t, "worker b to hear a's claim", func() bool {
		r.b.store.mu.Lock()
		defer r.b.store.mu.Unlock()
		_, heard := r.b.store.claims["acked-0001"]
		return heard
	})
}

// claimRig is two workers, a (through a proxy that can cut its
// connection) and b, one task, and the simulator, for the claim tests.
type claimRig struct {
	t      *testing.T
	ctx    context.Context
	srv    *sim.Server
	apiURL string
	c      *Conn
	proxy  *cutProxy
	cA, cB *Conn
	b      *Worker
	// logs is both workers' log.
	logs   lockedBuffer
	stop   context.CancelFunc
	runCtx context.Context
	wg     sync.WaitGroup
	pub    *Publisher
}

func newClaimRig(t *testing.T, name string) *claimRig {
	cfg := fleetConfig(t)
	srv, apiURL, err := sim.Start(sim.Config{PollBan: sim.PollBan{Disabled: true}, Threads: 10, Seed: 15,
		Latency: map[provider.Kind]sim.Latency{provider.KindTurnstile: {Median: 500 * time.Millisecond, Min: 500 * time.Millisecond, Max: 500 * time.Millisecond}}},
		"127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	r := &claimRig{t: t, ctx: longCtx(t, time.Minute), srv: srv, apiURL: apiURL, c: setup(t, cfg)}
	t.Cleanup(func() { _ = DeleteTopology(context.Background(), cfg, name+"-a", name+"-b") })
	r.proxy = newCutProxy(t, cfg.URL)
	cfgA := cfg
	cfgA.URL = r.proxy.url
	if r.cA, err = Dial(r.ctx, cfgA); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.cA.Close() })
	if r.cB, err = Dial(r.ctx, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.cB.Close() })
	r.runCtx, r.stop = context.WithCancel(r.ctx)
	t.Cleanup(func() { r.stop(); r.wg.Wait() })
	r.b = r.worker(r.cB, r.client(), name+"-b", slog.New(slog.NewTextHandler(&r.logs, nil)))
	r.pub = r.c.NewPublisher()
	t.Cleanup(func() { r.pub.Close() })
	return r
}

func (r *claimRig) client() *provider.Client {
	c, _ := provider.NewClient(provider.ClientConfig{BaseURL: r.apiURL, Key: "test-key"})
	return c
}

func (r *claimRig) worker(conn *Conn, p captchaq.Provider, owner string, log *slog.Logger) *Worker {
	w, err := NewWorker(conn, WorkerConfig{Queue: captchaq.Config{Provider: p, Threads: 2, PollInterval: 50 * time.Millisecond, Logger: log},
		Owner: owner, Grace: 5 * time.Second, Logger: log})
	if err != nil {
		r.t.Fatal(err)
	}
	return w
}

func (r *claimRig) run(w *Worker) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		if err := w.Run(r.runCtx); err != nil {
			r.t.Errorf("worker %s: %v", w.Owner(), err)
		}
	}()
}

func (r *claimRig) consumerCount() int {
	qs, err := r.c.Depths(r.ctx, r.c.Names().Tasks)
	if err != nil {
		return -1
	}
	return qs[0].Consumers
}

func (r *claimRig) consumers(n int) {
	r.t.Helper()
	testbound.Until(r.t, fmt.Sprintf("%d consumers of the task queue", n), func() bool { return r.consumerCount() == n })
}

func (r *claimRig) publish(id string) {
	r.t.Helper()
	if err := r.pub.PublishTask(r.ctx, TaskMessage{Task: fleetTask(id, 0)}); err != nil {
		r.t.Fatal(err)
	}
}

// check collects the one result and checks that the task was solved and
// paid once, that no task, result or dead letter is left, and, with
// droppers (worker names), that one of them dropped a redelivered copy.
func (r *claimRig) check(id string, droppers ...string) {
	t := r.t
	t.Helper()
	var got []captchaq.Result
	if _, err := r.c.Collect(r.ctx, 1, func(res captchaq.Result) error { got = append(got, res); return nil }); err != nil {
		t.Fatal(err)
	}
	r.stop()
	r.wg.Wait()
	if len(got) != 1 || got[0].ID != id || got[0].Status != captchaq.StatusSolved {
		t.Fatalf("results %+v, want %s solved once", got, id)
	}
	st := r.srv.Stats()
	if st.Accepted != 1 || st.Duplicates != 0 {
		t.Errorf("the provider accepted %d submits (%d duplicates), want one paid solve", st.Accepted, st.Duplicates)
	}
	dropped := len(droppers) == 0 || slices.ContainsFunc(droppers, func(owner string) bool {
		return strings.Contains(r.logs.String(), `msg="dropping a redelivered task another worker checkpointed" owner=`+owner+` id=`+id)
	})
	if !dropped {
		t.Errorf("no worker of %v logged dropping the redelivered copy of %s:\n%s", droppers, id, r.logs.String())
	}
	if r.cA.Reconnects() == 0 {
		t.Error("worker a's connection never dropped")
	}
	n := r.c.Names()
	qs, err := r.c.Depths(r.ctx, n.Tasks, n.Results, n.Failed)
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
