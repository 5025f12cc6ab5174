package amqp

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/sim"
)

// childEnv carries a worker's settings to a copy of the test binary that
// runs as that worker (see TestMain).
const childEnv = "CAPTCHAQ_TEST_WORKER"

type childConfig struct {
	URL, Prefix, Owner, APIURL string
	TaskTTL, Lease, Poll       time.Duration
	Grace                      time.Duration
	Threads, Prefetch          int
	RetryDelays                []time.Duration
	SharedThreads              bool
	// FreezeAt, when set, stops the worker process (SIGSTOP to itself)
	// the first time this many of its tasks are at the provider, each
	// polled and none answered yet (see freezer).
	FreezeAt int
	// Verbose logs each task taken and let go (Debug), so a failure's
	// log says where each task went.
	Verbose bool
}

func (cc childConfig) logLevel() slog.Level {
	if cc.Verbose {
		return slog.LevelDebug
	}
	return slog.LevelWarn
}

func TestMain(m *testing.M) {
	if raw := os.Getenv(childEnv); raw != "" {
		os.Exit(runChild(raw))
	}
	os.Exit(m.Run())
}

// runChild is a worker process: it stops on SIGTERM and exits 0 after a
// clean stop.
func runChild(raw string) int {
	var cc childConfig
	if err := json.Unmarshal([]byte(raw), &cc); err != nil {
		fmt.Fprintln(os.Stderr, "child config:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: cc.logLevel()}))
	c, err := Dial(ctx, Config{URL: cc.URL, Prefix: cc.Prefix, TaskTTL: cc.TaskTTL, InflightLease: cc.Lease,
		RetryDelays: cc.RetryDelays, ReconnectMin: 50 * time.Millisecond, ReconnectMax: 500 * time.Millisecond, Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, "dial:", err)
		return 1
	}
	defer c.Close()
	client, err := provider.NewClient(provider.ClientConfig{BaseURL: cc.APIURL, Key: "test-key"})
	if err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		return 1
	}
	var p captchaq.Provider = client
	if cc.FreezeAt > 0 {
		p = &freezer{Client: client, at: cc.FreezeAt, polled: map[string]bool{}}
	}
	w, err := NewWorker(c, WorkerConfig{
		Queue: captchaq.Config{Provider: p, Threads: cc.Threads, PollInterval: cc.Poll,
			RetryBackoff: 50 * time.Millisecond, RetryBackoffMax: time.Second, Logger: log},
		Owner: cc.Owner, Prefetch: cc.Prefetch, Grace: cc.Grace, BeatInterval: time.Second, Logger: log,
		SharedThreads: cc.SharedThreads,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	if err := w.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "run:", err)
		return 1
	}
	return 0
}

// freezer stops its process (SIGSTOP) in a poll, the first time at tasks
// are at the provider, polled and not answered: the queue polls a task
// only once its checkpoint is confirmed, so at that moment, with at
// equal to the worker's threads, every thread is at the provider with its
// checkpoint on the broker and none is submitting. A test kills the
// frozen worker there (fleet.frozen), at an exact moment however slowly
// the test sees the broker's state.
type freezer struct {
	*provider.Client
	at     int
	mu     sync.Mutex
	polled map[string]bool // polled and not answered
	done   bool
}

func (f *freezer) Poll(ctx context.Context, id string) (provider.PollResult, error) {
	f.polling([]string{id})
	r, err := f.Client.Poll(ctx, id)
	if err == nil {
		f.answered([]provider.PollResult{r})
	}
	return r, err
}

func (f *freezer) PollMany(ctx context.Context, ids []string) ([]provider.PollResult, error) {
	f.polling(ids)
	rs, err := f.Client.PollMany(ctx, ids)
	if err == nil {
		f.answered(rs)
	}
	return rs, err
}

func (f *freezer) polling(ids []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range ids {
		f.polled[id] = true
	}
	if !f.done && len(f.polled) >= f.at {
		f.done = true
		_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
	}
}

func (f *freezer) answered(rs []provider.PollResult) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range rs {
		if r.Ready || r.Err != nil {
			delete(f.polled, r.ID)
		}
	}
}

// fleet is one test's broker topology, simulator and worker processes.
type fleet struct {
	t      testing.TB
	cfg    Config
	c      *Conn
	pub    *Publisher
	sim    *sim.Server
	apiURL string
	base   childConfig

	mu     sync.Mutex
	procs  map[string]*exec.Cmd
	exits  map[string]chan error
	owners []string
}

func newFleet(t testing.TB, cfg Config, sc sim.Config, base childConfig) *fleet {
	t.Helper()
	srv, apiURL, err := sim.Start(sc, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Dial(ctx, cfg)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	f := &fleet{t: t, cfg: cfg, c: c, pub: c.NewPublisher(), sim: srv, apiURL: apiURL, procs: map[string]*exec.Cmd{}, exits: map[string]chan error{}}
	base.URL, base.Prefix, base.APIURL = cfg.URL, cfg.Prefix, apiURL
	base.TaskTTL, base.Lease, base.RetryDelays = cfg.TaskTTL, cfg.InflightLease, cfg.RetryDelays
	f.base = base
	t.Cleanup(func() {
		f.mu.Lock()
		for name, p := range f.procs {
			_ = p.Process.Kill()
			<-f.exits[name]
		}
		owners := f.owners
		f.mu.Unlock()
		f.pub.Close()
		c.Close()
		if err := DeleteTopology(context.Background(), cfg, owners...); err != nil {
			t.Errorf("DeleteTopology: %v", err)
		}
	})
	return f
}

// start runs a worker process named owner.
func (f *fleet) start(owner string, change func(*childConfig)) {
	f.t.Helper()
	cc := f.base
	cc.Owner = owner
	if change != nil {
		change(&cc)
	}
	raw, _ := json.Marshal(cc)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
	cmd.Stderr = &prefixWriter{t: f.t, prefix: owner}
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	f.mu.Lock()
	f.procs[owner], f.exits[owner] = cmd, done
	f.owners = append(f.owners, owner)
	f.mu.Unlock()
}

// wait returns the exit of owner's process and forgets it.
func (f *fleet) wait(owner string, timeout time.Duration) error {
	f.t.Helper()
	f.mu.Lock()
	done := f.exits[owner]
	f.mu.Unlock()
	select {
	case err := <-done:
		f.mu.Lock()
		delete(f.procs, owner)
		delete(f.exits, owner)
		f.mu.Unlock()
		return err
	case <-time.After(timeout):
		f.t.Fatalf("worker %s did not exit within %v", owner, timeout)
	}
	return nil
}

func (f *fleet) signal(owner string, sig syscall.Signal) {
	f.t.Helper()
	f.mu.Lock()
	p := f.procs[owner]
	f.mu.Unlock()
	if err := syscall.Kill(p.Process.Pid, sig); err != nil {
		f.t.Fatal(err)
	}
}

// frozen waits until owner's process has stopped itself (FreezeAt).
func (f *fleet) frozen(ctx context.Context, owner string) {
	f.t.Helper()
	f.mu.Lock()
	pid := f.procs[owner].Process.Pid
	f.mu.Unlock()
	f.until(ctx, owner+" frozen at its tasks", func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return false
		}
		// pid (comm) state ...: comm may hold spaces, so after its ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		return i >= 0 && i+2 < len(s) && s[i+2] == 'T'
	})
}

// waitConsumers waits until n consumers take from the task queue.
func (f *fleet) waitConsumers(ctx context.Context, n int) {
	f.t.Helper()
	f.until(ctx, fmt.Sprintf("%d consumers on the task queue", n), func() bool {
		ch, _, err := f.c.channel(ctx)
		if err != nil {
			return false
		}
		defer ch.Close()
		q, err := ch.QueueDeclarePassive(f.c.Names().Tasks, true, false, false, false, nil)
		return err == nil && q.Consumers == n
	})
}

// until polls cond, a state outside this process, until it holds.
func (f *fleet) until(ctx context.Context, what string, cond func() bool) {
	f.t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			f.t.Fatalf("timed out waiting for %s", what)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (f *fleet) accepted() int64 { return f.sim.Stats().Accepted }

// fleetTask is a turnstile task whose fingerprint is its own.
func fleetTask(id string, prio int) captchaq.Task {
	return captchaq.Task{ID: id, Method: "turnstile", Priority: prio,
		Params: map[string]string{"sitekey": "0x4AAAAAAA" + id, "pageurl": "https://shop.example/" + id}}
}

// enqueue publishes n tasks named prefix-i and returns their ids.
func (f *fleet) enqueue(ctx context.Context, prefix string, n, prio int) []string {
	f.t.Helper()
	ids := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		ids[i] = fmt.Sprintf("%s-%04d", prefix, i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- f.pub.PublishTask(ctx, TaskMessage{Task: fleetTask(ids[i], prio)})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			f.t.Fatal(err)
		}
	}
	return ids
}

// collect takes results until every id in want has one; a result for an
// id not in want fails the test.
func (f *fleet) collect(ctx context.Context, want []string) map[string]captchaq.Result {
	f.t.Helper()
	need := map[string]bool{}
	for _, id := range want {
		need[id] = true
	}
	got := map[string]captchaq.Result{}
	var stray []string
	_, err := f.c.Collect(ctx, len(want), func(r captchaq.Result) error {
		if !need[r.ID] {
			stray = append(stray, r.ID)
		}
		got[r.ID] = r
		return nil
	})
	if err != nil {
		f.t.Fatal(err)
	}
	if len(stray) > 0 {
		f.t.Fatalf("results for ids never enqueued: %v", stray)
	}
	var missing []string
	for _, id := range want {
		if _, ok := got[id]; !ok {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		f.t.Logf("the topology's queues (messages, ready, unacked) at the loss:\n%s", f.queueListing())
		f.t.Fatalf("lost %d of %d tasks (no result before the deadline): %v", len(missing), len(want), missing)
	}
	return got
}

// queueListing lists the queues of the fleet's topology with their
// messages, ready and unacknowledged (for a quorum queue, messages beyond
// ready and unacked are dead letters their target has not taken yet).
func (f *fleet) queueListing() string {
	lines, err := queueLines("messages", "messages_ready", "messages_unacknowledged")
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, line := range lines {
		if strings.HasPrefix(line, f.cfg.Prefix+".") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// ledger checks the books once every result is in: each task solved once,
// no second solve of any task, and every accepted submit accounted for.
func (f *fleet) ledger(results map[string]captchaq.Result, wantAccepted int64) sim.Stats {
	f.t.Helper()
	return f.ledgerAfterKill(results, wantAccepted, 0)
}

// ledgerAfterKill is ledger for a run with a SIGKILL at a moment the test
// does not choose: up to maxSecond second solves are the killed worker's
// tasks between the provider's answer and their checkpoint (see the
// package doc), each one accepted submit more.
func (f *fleet) ledgerAfterKill(results map[string]captchaq.Result, tasks, maxSecond int64) sim.Stats {
	f.t.Helper()
	for id, r := range results {
		if r.Status != captchaq.StatusSolved || r.Token == "" {
			f.t.Errorf("task %s: status %s error %q, want solved with a token", id, r.Status, r.Error)
		}
	}
	st := f.sim.Stats()
	if st.Duplicates > maxSecond {
		f.t.Errorf("simulator saw %d duplicate submits (a task solved twice), want at most %d", st.Duplicates, maxSecond)
	}
	if st.Accepted != tasks+st.Duplicates {
		f.t.Errorf("simulator accepted %d submits, want %d (one per task, one per second solve)", st.Accepted, tasks+st.Duplicates)
	}
	if n := f.depth(f.c.Names().Tasks); n != 0 {
		f.t.Errorf("task queue holds %d messages after every result, want 0", n)
	}
	if n := f.depth(f.c.Names().Failed); n != 0 {
		f.t.Errorf("dead-letter queue holds %d messages, want 0", n)
	}
	return st
}

func (f *fleet) depth(q string) int {
	ch, _, err := f.c.channel(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	defer ch.Close()
	s, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
	if err != nil {
		f.t.Fatalf("inspect %s: %v", q, err)
	}
	return s.Messages
}

// prefixWriter sends a child's log lines to the test log.
type prefixWriter struct {
	t      testing.TB
	prefix string
}

func (w *prefixWriter) Write(p []byte) (int, error) {
	w.t.Logf("[%s] %s", w.prefix, p)
	return len(p), nil
}

func fleetConfig(t *testing.T) Config { return fleetSettings(testConfig(t)) }

// disruptiveFleetConfig is fleetConfig for a test that restarts the broker
// or closes connections (see disruptiveConfig).
func disruptiveFleetConfig(t *testing.T) Config { return fleetSettings(disruptiveConfig(t)) }

// fleetSettings are the fleet tests' settings: short retry delays. The
// checkpoint lease stays at its default: a dead worker's checkpoints come
// back through the broker, not by their lease.
func fleetSettings(cfg Config) Config {
	cfg.RetryDelays = []time.Duration{100 * time.Millisecond, 500 * time.Millisecond}
	return cfg
}

func longCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestFleetEndToEnd: three worker processes solve every task once.
func TestFleetEndToEnd(t *testing.T) {
	cfg := fleetConfig(t)
	f := newFleet(t, cfg, sim.Config{PollBan: sim.PollBan{Disabled: true}, Threads: 30, LatencyScale: 0.01, Seed: 1},
		childConfig{Threads: 30, Poll: 20 * time.Millisecond, Grace: 5 * time.Second})
	ctx := longCtx(t, 90*time.Second)
	for _, o := range []string{"e2e-a", "e2e-b", "e2e-c"} {
		f.start(o, nil)
	}
	f.waitConsumers(ctx, 3)
	ids := f.enqueue(ctx, "e2e", 300, 0)
	res := f.collect(ctx, ids)
	f.ledger(res, 300)
}

// TestFleetPriority: with every task waiting before the worker starts, the
// urgent ones are solved first.
func TestFleetPriority(t *testing.T) {
	cfg := fleetConfig(t)
	f := newFleet(t, cfg, sim.Config{PollBan: sim.PollBan{Disabled: true}, Threads: 1, Instant: true, Seed: 2},
		childConfig{Threads: 1, Prefetch: 1, Poll: 10 * time.Millisecond, Grace: 5 * time.Second})
	ctx := longCtx(t, 60*time.Second)
	low := f.enqueue(ctx, "low", 15, 9)
	urgent := f.enqueue(ctx, "urgent", 5, 1)
	f.start("prio-a", nil)
	var order []string
	all := map[string]captchaq.Result{}
	_, err := f.c.Collect(ctx, 20, func(r captchaq.Result) error {
		order = append(order, r.ID)
		all[r.ID] = r
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	first := append([]string(nil), order[:5]...)
	sort.Strings(first)
	if fmt.Sprint(first) != fmt.Sprint(urgent) {
		t.Fatalf("first five results %v, want the urgent tasks %v (order %v)", order[:5], urgent, order)
	}
	if len(all) != len(low)+len(urgent) {
		t.Fatalf("%d distinct results, want %d", len(all), len(low)+len(urgent))
	}
	f.ledger(all, 20)
}
