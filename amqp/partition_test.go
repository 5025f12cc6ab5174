package amqp

import (
	"context"
	"log/slog"
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

// TestPartitionedSubmitIsGivenUp: a worker is cut off from the broker
// and from the provider without its sockets closing (a partition) while
// its submit of a task is on its way, held up in the network. The broker
// gives up on the worker and another worker solves the task. When the
// partition lifts, the held submit must not reach the provider: the
// first worker gave it up once the channel that held the task closed.
// The outcome: one paid solve, one result.
func TestPartitionedSubmitIsGivenUp(t *testing.T) {
	p := newPartition(t)
	held := &heldSubmits{Client: p.clientA, submitting: make(chan struct{}), release: make(chan struct{})}
	a := p.worker(p.cA, held, "part-a", nil)
	p.run(a)
	p.consumers(1)
	p.publish("partitioned-0001")
	p.wait(held.submitting, "worker a's submit")
	b := p.worker(p.cB, p.clientB, "part-b", nil)
	p.run(b)
	p.consumers(2)
	p.proxy.mute(true)

	got := p.collect(1)
	// The partition lifts: a submit still held goes on to the provider.
	close(held.release)
	p.proxy.mute(false)
	p.until("worker a reconnects", func() bool { return p.cA.Reconnects() > 0 })
	p.stop()

	if len(got) != 1 || got[0].Status != captchaq.StatusSolved {
		t.Fatalf("results %+v, want the task solved once", got)
	}
	if n := held.forwarded.Load(); n != 0 {
		t.Errorf("worker a's held submit reached the provider after the partition (%d), want it given up", n)
	}
	if st := p.sim.Stats(); st.Accepted != 1 || st.Duplicates != 0 {
		t.Errorf("the provider accepted %d submits (%d duplicates), want one paid solve", st.Accepted, st.Duplicates)
	}
	p.noResultsLeft()
}

// TestPartitionedCheckpointIsForfeited: the provider accepted a worker's
// submit, and the worker is cut off from the broker before it could
// checkpoint the captcha id. The broker gives the task to another worker,
// which waits for a claim, hears none, and solves it again (the window
// that stays: two paid solves). When the partition lifts, the first
// worker must not take the task up again (its claim comes too late to
// stop the second solve): one result.
func TestPartitionedCheckpointIsForfeited(t *testing.T) {
	p := newPartition(t)
	submitted, proceed := make(chan struct{}), make(chan struct{})
	var logA lockedBuffer
	a := p.worker(p.cA, &cutAfterSubmit{Client: p.clientA, submitted: submitted, proceed: proceed}, "forfeit-a",
		slog.New(slog.NewTextHandler(&logA, nil)))
	p.run(a)
	p.consumers(1)
	p.publish("forfeited-0001")
	p.wait(submitted, "worker a's submit")
	b := p.worker(p.cB, p.clientB, "forfeit-b", nil)
	p.run(b)
	p.consumers(2)
	p.proxy.mute(true)

	got := p.collect(1)
	p.proxy.mute(false)
	close(proceed)
	p.until("worker a lets go of the task", func() bool { return a.Held() == 0 })
	p.stop()

	if len(got) != 1 || got[0].Status != captchaq.StatusSolved {
		t.Fatalf("results %+v, want the task solved once", got)
	}
	if st := p.sim.Stats(); st.Accepted != 2 {
		t.Errorf("the provider accepted %d submits, want 2 (the second solve of the window that stays)", st.Accepted)
	}
	if want := "too long ago to claim it"; !strings.Contains(logA.String(), want) {
		t.Errorf("worker a's log lacks %q:\n%s", want, logA.String())
	}
	p.noResultsLeft()
}

// partition is two workers' setting: a's way to the broker goes through
// a proxy that can stop forwarding without closing anything (mute).
type partition struct {
	t                *testing.T
	ctx              context.Context
	c, cA, cB        *Conn
	sim              *sim.Server
	clientA, clientB *provider.Client
	proxy            *cutProxy
	runCtx           context.Context
	stopRun          context.CancelFunc
	wg               sync.WaitGroup
}

func newPartition(t *testing.T) *partition {
	cfg := fleetConfig(t)
	// A short heartbeat: the broker gives up on the silent worker two to
	// three seconds after it last heard from it.
	cfg.Heartbeat = time.Second
	srv, apiURL, err := sim.Start(sim.Config{PollBan: sim.PollBan{Disabled: true}, Threads: 10, Seed: 27,
		Latency: map[provider.Kind]sim.Latency{provider.KindTurnstile: {Median: 500 * time.Millisecond, Min: 500 * time.Millisecond, Max: 500 * time.Millisecond}}},
		"127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	p := &partition{t: t, ctx: testbound.Context(t), sim: srv}
	p.c = setup(t, cfg)
	p.proxy = newCutProxy(t, cfg.URL)
	cfgA := cfg
	cfgA.URL = p.proxy.url
	if p.cA, err = Dial(p.ctx, cfgA); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.cA.Close() })
	if p.cB, err = Dial(p.ctx, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.cB.Close() })
	p.clientA, _ = provider.NewClient(provider.ClientConfig{BaseURL: apiURL, Key: "test-key"})
	p.clientB, _ = provider.NewClient(provider.ClientConfig{BaseURL: apiURL, Key: "test-key"})
	p.runCtx, p.stopRun = context.WithCancel(p.ctx)
	t.Cleanup(func() { p.stop() })
	return p
}

func (p *partition) worker(c *Conn, prov captchaq.Provider, owner string, log *slog.Logger) *Worker {
	p.t.Cleanup(func() { _ = DeleteTopology(context.Background(), c.Config(), owner) })
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w, err := NewWorker(c, WorkerConfig{Queue: captchaq.Config{Provider: prov, Threads: 2, PollInterval: 50 * time.Millisecond, Logger: log},
		Owner: owner, Grace: 5 * time.Second, Logger: log})
	if err != nil {
		p.t.Fatal(err)
	}
	return w
}

func (p *partition) run(w *Worker) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if err := w.Run(p.runCtx); err != nil {
			p.t.Errorf("worker %s: %v", w.Owner(), err)
		}
	}()
}

func (p *partition) stop() {
	p.stopRun()
	p.wg.Wait()
}

func (p *partition) publish(id string) {
	pub := p.c.NewPublisher()
	defer pub.Close()
	if err := pub.PublishTask(p.ctx, TaskMessage{Task: fleetTask(id, 0)}); err != nil {
		p.t.Fatal(err)
	}
}

func (p *partition) wait(ch <-chan struct{}, what string) {
	p.t.Helper()
	testbound.Receive(p.t, what, ch)
}

func (p *partition) until(what string, cond func() bool) {
	p.t.Helper()
	testbound.Until(p.t, what, cond)
}

func (p *partition) consumers(n int) {
	p.until("the task queue has its consumers", func() bool {
		qs, err := p.c.Depths(p.ctx, p.c.Names().Tasks)
		if err != nil {
			p.t.Fatal(err)
		}
		return qs[0].Consumers == n
	})
}

func (p *partition) collect(n int) []captchaq.Result {
	var got []captchaq.Result
	if _, err := p.c.Collect(p.ctx, n, func(r captchaq.Result) error { got = append(got, r); return nil }); err != nil {
		p.t.Fatal(err)
	}
	return got
}

// noResultsLeft checks, once the workers stopped, that no second result
// and no task is left on the broker.
func (p *partition) noResultsLeft() {
	n := p.c.Names()
	qs, err := p.c.Depths(p.ctx, n.Tasks, n.Results, n.Failed)
	if err != nil {
		p.t.Fatal(err)
	}
	for _, q := range qs {
		if q.Ready != 0 {
			p.t.Errorf("%s holds %d messages after the run, want 0", q.Name, q.Ready)
		}
	}
}

// heldSubmits holds the first submit up, as a cut network holds a
// request: it goes on to the provider once release closes, unless its
// sender gave it up first.
type heldSubmits struct {
	*provider.Client
	once                sync.Once
	submitting, release chan struct{}
	forwarded           atomic.Int64
}

func (h *heldSubmits) Submit(ctx context.Context, t provider.Task, pingback string) (string, error) {
	if err := h.hold(ctx); err != nil {
		return "", err
	}
	return h.Client.Submit(ctx, t, pingback)
}

func (h *heldSubmits) SubmitChecked(ctx context.Context, t provider.Checked, pingback string) (string, error) {
	if err := h.hold(ctx); err != nil {
		return "", err
	}
	return h.Client.SubmitChecked(ctx, t, pingback)
}

func (h *heldSubmits) hold(ctx context.Context) error {
	first := false
	h.once.Do(func() { first = true })
	if !first {
		return nil
	}
	close(h.submitting)
	select {
	case <-h.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	h.forwarded.Add(1)
	return nil
}
