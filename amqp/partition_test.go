package amqp

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/sim"
)

// TestPartitionedSubmitIsAnsweredOnce: a worker is cut off from the
// broker and from the provider without its sockets closing (a partition)
// while its submit of a task is on its way, held up in the network. The
// broker gives up on the worker and another worker solves the task. When
// the partition lifts, the held submit reaches the provider (bytes in a
// socket cannot be called back: the second paid solve of the window that
// stays), and the first worker must not checkpoint, poll or answer it: the
// connection that held the task is gone, too long ago for a claim to win.
// The outcome: one result.
func TestPartitionedSubmitIsAnsweredOnce(t *testing.T) {
	p := newPartition(t)
	held := &heldSubmits{Client: p.clientA, submitting: make(chan struct{}), release: make(chan struct{})}
	var logA testbound.Buffer
	a := p.worker(p.cA, held, "part-a", slog.New(slog.NewTextHandler(&logA, nil)))
	p.run(a)
	p.consumers(1)
	p.publish("partitioned-0001")
	p.wait(held.submitting, "worker a's submit")
	b := p.worker(p.cB, p.clientB, "part-b", nil)
	p.run(b)
	p.consumers(2)
	p.proxy.mute(true)

	got := p.collect(1)
	// The partition lifts: the held submit goes on to the provider.
	close(held.release)
	p.proxy.mute(false)
	p.until("worker a lets go of the task", func() bool { return a.Held() == 0 && held.forwarded.Load() == 1 })
	p.stop()

	if len(got) != 1 || got[0].Status != captchaq.StatusSolved {
		t.Fatalf("results %+v, want the task solved once", got)
	}
	if st := p.sim.Stats(); st.Accepted != 2 {
		t.Errorf("the provider accepted %d submits, want 2 (the held one and the fleet's)", st.Accepted)
	}
	if want := "too long ago to claim it"; !strings.Contains(logA.String(), want) {
		t.Errorf("worker a's log lacks %q:\n%s", want, logA.String())
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
	var logA testbound.Buffer
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

// workerPair is two workers' setting: a's way to the broker goes through
// a proxy that can cut its connections (cut) or stop forwarding without
// closing anything (mute). The partition tests and the claim tests use it.
type workerPair struct {
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

// newPartition is newWorkerPair with a short heartbeat: the broker gives
// up on the silent worker two to three seconds after it last heard from
// it.
func newPartition(t *testing.T) *workerPair {
	cfg := fleetConfig(t)
	cfg.Heartbeat = time.Second
	return newWorkerPair(t, cfg)
}

func newWorkerPair(t *testing.T, cfg Config) *workerPair {
	srv, apiURL, err := sim.Start(sim.Config{PollBan: sim.PollBan{Disabled: true}, Threads: 10, Seed: 27,
		Latency: map[provider.Kind]sim.Latency{provider.KindTurnstile: {Median: 500 * time.Millisecond, Min: 500 * time.Millisecond, Max: 500 * time.Millisecond}}},
		"127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	p := &workerPair{t: t, ctx: testbound.Context(t), sim: srv}
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

func (p *workerPair) worker(c *Conn, prov captchaq.Provider, owner string, log *slog.Logger) *Worker {
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

func (p *workerPair) run(w *Worker) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if err := w.Run(p.runCtx); err != nil {
			p.t.Errorf("worker %s: %v", w.Owner(), err)
		}
	}()
}

func (p *workerPair) stop() {
	p.stopRun()
	p.wg.Wait()
}

func (p *workerPair) publish(id string) {
	pub := p.c.NewPublisher()
	defer pub.Close()
	if err := pub.PublishTask(p.ctx, TaskMessage{Task: fleetTask(id, 0)}); err != nil {
		p.t.Fatal(err)
	}
}

func (p *workerPair) wait(ch <-chan struct{}, what string) {
	p.t.Helper()
	testbound.Receive(p.t, what, ch)
}

func (p *workerPair) until(what string, cond func() bool) {
	p.t.Helper()
	testbound.Until(p.t, what, cond)
}

func (p *workerPair) consumers(n int) {
	p.until("the task queue has its consumers", p.consuming(p.c.Names().Tasks, n))
}

// consuming reports whether queue has n consumers (false while the broker
// cannot say).
func (p *workerPair) consuming(queue string, n int) func() bool {
	return func() bool {
		qs, err := p.c.Depths(p.ctx, queue)
		return err == nil && qs[0].Consumers == n
	}
}

func (p *workerPair) collect(n int) []captchaq.Result {
	var got []captchaq.Result
	if _, err := p.c.Collect(p.ctx, n, func(r captchaq.Result) error { got = append(got, r); return nil }); err != nil {
		p.t.Fatal(err)
	}
	return got
}

// noResultsLeft checks, once the workers stopped, that no second result
// and no task is left on the broker.
func (p *workerPair) noResultsLeft() {
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

// TestMayClaim: a worker whose task's connection closed before the
// task's first checkpoint was confirmed claims it only while a worker
// that received it again may still be waiting for the claim: within
// claimWindow of the latest moment the broker surely held the connection.
func TestMayClaim(t *testing.T) {
	const hb = 5 * time.Second
	now := time.Now()
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	cases := []struct {
		name            string
		heard, ended    time.Duration // how long ago
		stallFrom, upTo time.Duration // a stall, 0 for none
		awake           time.Duration // the watcher's last tick
		down            time.Duration // the broker's last refused connect after a shutdown, 0 for none
		want            bool
	}{
		{name: "closed a second ago", heard: 2 * time.Second, ended: time.Second, awake: time.Second, want: true},
		{name: "closed longer ago than the window", heard: 7 * time.Second, ended: 6 * time.Second, awake: time.Second},
		{name: "fell silent before it ended (a partition)", heard: 8 * time.Second, ended: time.Second / 2, awake: time.Second},
		{name: "read and closed right after a stall (SIGSTOP)", heard: time.Second / 5, ended: time.Second / 10,
			stallFrom: 30 * time.Second, upTo: time.Second / 3, awake: time.Second / 4},
		{name: "read and closed in a stall the watcher has not seen end", heard: time.Second / 5, ended: time.Second / 10,
			awake: 30 * time.Second},
		{name: "a stall long before the close", heard: 2 * time.Second, ended: time.Second,
			stallFrom: 60 * time.Second, upTo: 40 * time.Second, awake: time.Second, want: true},
		// A broker restart (stop_app, start_app): it closed the
		// connection 10 s ago and gave the task back, but to nobody
		// before it listened again; it refused a connect a second ago.
		{name: "a broker restart, down a second ago", heard: 10*time.Second + time.Second/2, ended: 10 * time.Second,
			awake: time.Second / 2, down: time.Second, want: true},
		{name: "a broker restart, down longer ago than the window", heard: 10*time.Second + time.Second/2, ended: 10 * time.Second,
			awake: time.Second / 2, down: claimWindow + time.Second/2},
		{name: "a broker restart seen in a stall", heard: 10*time.Second + time.Second/2, ended: 10 * time.Second,
			awake: 30 * time.Second, down: time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &Conn{cfg: Config{Heartbeat: hb}, heard: map[uint64]*readClock{1: {}}}
			c.heard[1].at.Store(ago(tc.heard).UnixNano())
			c.awake.last = ago(tc.awake)
			if tc.stallFrom > 0 {
				c.awake.from, c.awake.to = ago(tc.stallFrom), ago(tc.upTo)
			}
			if tc.down > 0 {
				c.noteDown(1, ago(tc.down))
				c.noteDown(1, ago(tc.down+time.Second)) // an earlier refusal changes nothing
			}
			d := &Delivery{epoch: 1, sess: &session{}}
			d.sess.endedAt.Store(ago(tc.ended).UnixNano())
			s := &WorkerStore{pub: &Publisher{c: c}}
			if got := s.mayClaim(d, now); got != tc.want {
				t.Errorf("mayClaim = %v, want %v", got, tc.want)
			}
		})
	}
	if (&WorkerStore{}).mayClaim(nil, now) {
		t.Error("mayClaim of no delivery = true, want false")
	}
}

// TestBrokerShutdownTold: a connection closed by the broker's shutdown is
// told from one closed by an operator (rabbitmqctl close_connection, also
// CONNECTION_FORCED), and a connect that nothing listens for is refused.
func TestBrokerShutdownTold(t *testing.T) {
	for _, tc := range []struct {
		err  *amqp091.Error
		want bool
	}{
		{&amqp091.Error{Code: amqp091.ConnectionForced, Reason: "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'"}, true},
		{&amqp091.Error{Code: amqp091.ConnectionForced, Reason: "CONNECTION_FORCED - fleet bench: forced close"}, false},
		{&amqp091.Error{Code: amqp091.InternalError, Reason: "INTERNAL_ERROR"}, false},
		{nil, false},
	} {
		if got := brokerShutdown(tc.err); got != tc.want {
			t.Errorf("brokerShutdown(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = Dial(t.Context(), Config{URL: "amqp://guest:guest@" + addr + "/"})
	if err == nil || !refused(err) {
		t.Errorf("Dial of a closed port: %v; want it refused", err)
	}
	if refused(errors.New("dial tcp: i/o timeout")) {
		t.Error("a timeout taken as refused")
	}
}

// TestForfeitedTaskTakesNoCopy: a task its worker forfeited (see
// firstCheckpoint) is let go by its queue, and a copy of it the broker
// gives the same worker meanwhile goes back instead of into the
// forfeited entry, whose release would ack it with no result (the task
// lost). Once the entry is released, a copy is a fresh task.
func TestForfeitedTaskTakesNoCopy(t *testing.T) {
	s := &WorkerStore{holdings: holdings{entries: map[string]*entry{}, claims: map[string]time.Time{}}, lease: time.Minute,
		log: slog.New(slog.DiscardHandler)}
	k := &Consumer{} // its channel gone: every delivery below is stale
	dead := func(redelivered bool) *Delivery {
		return &Delivery{consumer: k, Generation: 1, Redelivered: redelivered, sess: &session{}}
	}
	m := TaskMessage{Task: fleetTask("forfeited-copy", 0)}
	id := m.Task.ID
	s.holdings.entries[id] = &entry{msg: m, deliveries: []*Delivery{dead(false)}, checkpoints: map[int]*Delivery{}, forfeit: true}

	again := dead(true)
	if s.receive(again, m) {
		t.Fatal("a copy of a forfeited task was taken as fresh while the entry is held")
	}
	if slices.Contains(s.holdings.entries[id].deliveries, again) {
		t.Fatal("a copy of a forfeited task was taken into the forfeited entry")
	}
	if got := s.letGo(time.Now()); !slices.Equal(got, []string{id}) {
		t.Fatalf("letGo = %v, want the forfeited task", got)
	}
	s.release(id)
	if !s.receive(dead(true), m) {
		t.Fatal("a copy after the forfeited entry's release was not taken as a fresh task")
	}
}

// TestNewestCheckpointBackBeforeArriving: a worker's newest checkpoint,
// confirmed, whose delivery died with its connection before the worker
// read it, comes back to the same worker through Names.Adopt: the worker
// holds the task by it again. An older copy is acked. Before, the newest
// was acked as an older one and the worker waited for a delivery that
// never came, then let go of the task after the lease: lost (seen in
// TestFleetDroppedConnection under load).
func TestNewestCheckpointBackBeforeArriving(t *testing.T) {
	s := &WorkerStore{holdings: holdings{entries: map[string]*entry{}, claims: map[string]time.Time{}}, lease: time.Minute,
		run: "run-1", log: slog.New(slog.DiscardHandler)}
	k := &Consumer{} // its channel gone: every delivery below is stale
	m := TaskMessage{Task: fleetTask("arriving", 0), CaptchaID: "c-1", Attempts: 1}
	id := m.Task.ID
	adopted := func(run string, seq int) *Delivery {
		return &Delivery{consumer: k, Generation: 1, sess: &session{},
			Headers: amqp091.Table{HeaderRun: run, HeaderSeq: int32(seq)}}
	}
	arriving := func() *entry {
		// Copy 2 confirmed, its delivery not received.
		return &entry{msg: m, seq: 2, confirmed: 2, parkedAt: time.Now(), checkpoints: map[int]*Delivery{}}
	}
	for _, c := range []struct {
		name string
		d    *Delivery
		held bool
	}{
		{"the newest copy", adopted("run-1", 2), true},
		{"an older copy", adopted("run-1", 1), false},
		{"another run's copy", adopted("run-0", 2), false},
	} {
		s.holdings.entries[id] = arriving()
		if s.receive(c.d, m) {
			t.Fatalf("%s: taken as a fresh task", c.name)
		}
		e := s.holdings.entries[id]
		if held := slices.Contains(e.deliveries, c.d) && e.confirmed == 0; held != c.held {
			t.Errorf("%s: held %v (deliveries %d, confirmed %d), want %v", c.name, held, len(e.deliveries), e.confirmed, c.held)
		}
	}
}
