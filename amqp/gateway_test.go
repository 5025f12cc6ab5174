package amqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/reportfwd"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/sim"
)

// gatewayRig is one test's topology with the worker and gateway queues it
// declares, all deleted when the test ends.
type gatewayRig struct {
	t   *testing.T
	cfg Config
	c   *Conn

	// reports, when set, is each gateway's AttachReports.
	reports func(captchaq.ReportOutcome)

	mu       sync.Mutex
	owners   []string
	gateways []string
}

func newGatewayRig(t *testing.T, cfg Config) *gatewayRig {
	t.Helper()
	r := &gatewayRig{t: t, cfg: cfg, c: setup(t, cfg)}
	// Runs before setup's cleanup deletes the topology.
	t.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		n := NamesFor(cfg.Prefix)
		var queues []string
		for _, g := range r.gateways {
			queues = append(queues, n.ReplyQueue(g))
		}
		for _, o := range r.owners {
			queues = append(queues, n.InflightQueue(o), n.ClaimQueue(o))
		}
		if err := deleteAll(context.Background(), cfg.withDefaults(), queues, nil); err != nil {
			t.Errorf("delete the gateway and worker queues: %v", err)
		}
	})
	return r
}

// worker runs an in-process worker against its own simulator until the
// test ends.
func (r *gatewayRig) worker(owner string, sc sim.Config, threads, prefetch int) *sim.Server {
	r.t.Helper()
	return r.workerWith(owner, sc, threads, prefetch, nil)
}

// workerWith is worker with its config changed by change first.
func (r *gatewayRig) workerWith(owner string, sc sim.Config, threads, prefetch int, change func(*WorkerConfig)) *sim.Server {
	r.t.Helper()
	srv, apiURL, err := sim.Start(sc, "127.0.0.1:0")
	if err != nil {
		r.t.Fatal(err)
	}
	cl, err := provider.NewClient(provider.ClientConfig{BaseURL: apiURL, Key: "test-key"})
	if err != nil {
		r.t.Fatal(err)
	}
	quiet := testLogger(r.t)
	wc := WorkerConfig{
		Queue: captchaq.Config{Provider: cl, Threads: threads, PollInterval: 10 * time.Millisecond,
			RetryBackoff: 10 * time.Millisecond, RetryBackoffMax: 100 * time.Millisecond, Logger: quiet},
		Owner: owner, Prefetch: prefetch, Grace: time.Second, BeatInterval: time.Second, Logger: quiet,
		Report: reportfwd.New(captchaq.Config{Provider: cl}).Forward,
	}
	if change != nil {
		change(&wc)
	}
	w, err := NewWorker(r.c, wc)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { srv.Close() })
	r.run(owner, w)
	return srv
}

// run runs w until the test ends or the stop it returns is called.
func (r *gatewayRig) run(owner string, w *Worker) (stop func()) {
	r.mu.Lock()
	r.owners = append(r.owners, owner)
	r.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stop = sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			r.t.Errorf("worker %s: %v", owner, err)
		}
	})
	r.t.Cleanup(stop)
	return stop
}

// testLogger logs warnings and errors to the test's log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// gateway builds and starts a gateway on a memory store; results go to
// the returned channel.
func (r *gatewayRig) gateway(name string, weights map[string]int, change func(*GatewayConfig)) (*Gateway, <-chan captchaq.Result) {
	r.t.Helper()
	gc := GatewayConfig{Store: captchaq.NewMemoryStore(captchaq.MemoryStoreConfig{}), Name: name}
	if change != nil {
		change(&gc)
	}
	return r.start(gc, weights, nil, nil)
}

// start builds and starts gc's gateway; results go to the returned
// channel, and, when accepted or finished is set, the news of the other
// replicas of its front to them (AttachReplicas).
func (r *gatewayRig) start(gc GatewayConfig, weights map[string]int, accepted func(captchaq.Record), finished func(captchaq.Result)) (*Gateway, <-chan captchaq.Result) {
	r.t.Helper()
	r.mu.Lock()
	r.gateways = append(r.gateways, gc.Name)
	r.mu.Unlock()
	g, err := NewGateway(r.c, gc)
	if err != nil {
		r.t.Fatal(err)
	}
	if accepted != nil || finished != nil {
		if err := g.AttachReplicas(accepted, finished); err != nil {
			r.t.Fatal(err)
		}
	}
	if r.reports != nil {
		if err := g.AttachReports(r.reports); err != nil {
			r.t.Fatal(err)
		}
	}
	results := make(chan captchaq.Result, 100)
	if err := g.Attach(weights, func(res captchaq.Result) { results <- res }); err != nil {
		r.t.Fatal(err)
	}
	if err := g.Start(testCtx(r.t)); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() {
		if err := g.Shutdown(context.Background()); err != nil {
			r.t.Errorf("Shutdown: %v", err)
		}
	})
	return g, results
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// await takes n results from ch, failing after the test deadline.
func await(t *testing.T, ctx context.Context, ch <-chan captchaq.Result, n int) []captchaq.Result {
	t.Helper()
	var out []captchaq.Result
	for len(out) < n {
		select {
		case r := <-ch:
			out = append(out, r)
		case <-ctx.Done():
			t.Fatalf("%d of %d results before the deadline: %+v", len(out), n, out)
		}
	}
	return out
}

// quietFor fails if ch yields a result within d.
func quietFor(t *testing.T, ch <-chan captchaq.Result, d time.Duration) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("unexpected result %+v", r)
	case <-time.After(d):
	}
}

// TestReplyQueueOfAnOlderGateway: a gateway of a version before
// captcha.replies declared its reply queue without binding it there. The
// worker binds it at its first result for that queue, so the gateway
// still gets its results. Before, they all went to the results queue
// (the exchange's alternate), where no gateway reads.
func TestReplyQueueOfAnOlderGateway(t *testing.T) {
	t.Parallel()
	r := newGatewayRig(t, testConfig(t))
	ctx := testCtx(t)
	n := r.c.Names()
	r.gateways = append(r.gateways, "gw-old")
	reply := n.ReplyQueue("gw-old")
	conn, err := r.c.connection(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	// As the gateway declared it then: the queue and its dead-letter
	// binding only.
	if _, err := ch.QueueDeclare(reply, true, false, false, false, replyQueueArgs()); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(reply, FailedRoutingKey, n.DLX, false, nil); err != nil {
		t.Fatal(err)
	}
	_ = ch.Close()
	p := r.c.NewPublisher()
	defer p.Close()
	for _, id := range []string{"old1", "old2"} {
		if err := p.PublishTask(ctx, TaskMessage{Task: task(id, 0), ReplyTo: reply}); err != nil {
			t.Fatal(err)
		}
	}
	r.worker("old-gw-w", sim.Config{Instant: true, Seed: 3, PollBan: sim.PollBan{Disabled: true}}, 5, 10)
	k, err := r.c.Consume(ctx, []string{reply}, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	var got []string
	for _, d := range nextAcked(t, ctx, k, 2) {
		got = append(got, d.Type+":"+d.MessageID)
	}
	slices.Sort(got)
	if want := "result:old1 result:old2"; strings.Join(got, " ") != want {
		t.Errorf("the older gateway's reply queue got %s, want %s", strings.Join(got, " "), want)
	}
	if d := depth(t, ctx, r.c, n.Results); d != 0 {
		t.Errorf("the results queue holds %d results, want none", d)
	}
}

// TestReplyToRouting: a worker sends a result to the task's reply-to when
// it is a gateway's reply queue of the prefix, and to the results queue
// otherwise (no reply-to, another queue, a reply queue that is gone). A
// failed task's dead letter keeps its reply-to, and the reply queue gets
// a copy of it; Replay keeps the reply-to.
func TestReplyToRouting(t *testing.T) {
	t.Parallel()
	r := newGatewayRig(t, testConfig(t))
	ctx := testCtx(t)
	n := r.c.Names()
	if err := r.c.DeclareReplies(ctx, "gw-a"); err != nil {
		t.Fatal(err)
	}
	r.gateways = append(r.gateways, "gw-a")
	reply := n.ReplyQueue("gw-a")
	p := r.c.NewPublisher()
	defer p.Close()
	bad := task("r5", 0)
	bad.Params = map[string]string{"sitekey": "0x4AAA", "pageurl": "ftp://shop.example/"}
	for _, m := range []TaskMessage{
		{Task: task("r1", 0), ReplyTo: reply},
		{Task: task("r2", 0)},
		{Task: task("r3", 0), ReplyTo: n.Tasks},
		{Task: task("r4", 0), ReplyTo: n.ReplyQueue("gone")},
		{Task: bad, ReplyTo: reply},
	} {
		if err := p.PublishTask(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	r.worker("route-w", sim.Config{Instant: true, Seed: 3, PollBan: sim.PollBan{Disabled: true}}, 5, 10)
	var toResults []string
	if _, err := r.c.Collect(ctx, 3, func(res captchaq.Result) error {
		toResults = append(toResults, res.ID+"/"+string(res.Status))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(toResults)
	if got := strings.Join(toResults, " "); got != "r2/solved r3/solved r4/solved" {
		t.Fatalf("results queue got %s, want r2 r3 r4 solved", got)
	}
	k, err := r.c.Consume(ctx, []string{reply}, 10)
	if err != nil {
		t.Fatal(err)
	}
	var inReply []string
	for _, d := range nextAcked(t, ctx, k, 3) {
		what := d.Type + ":" + d.MessageID
		if d.Type == messageTypeResul {
			res, err := DecodeResult(d.Body)
			if err != nil {
				t.Fatal(err)
			}
			what += "/" + string(res.Status)
		} else {
			what += "/" + headerString(d.Headers, HeaderReason) + "/" + d.ReplyTo
		}
		inReply = append(inReply, what)
	}
	k.Close()
	slices.Sort(inReply)
	want := "result:r1/solved result:r5/failed task:r5/permanent/" + reply
	if got := strings.Join(inReply, " "); got != want {
		t.Fatalf("reply queue got %s, want %s", got, want)
	}
	if d := depth(t, ctx, r.c, reply); d != 0 {
		t.Errorf("reply queue holds %d more", d)
	}
	if d := depth(t, ctx, r.c, n.Tasks); d != 0 {
		t.Errorf("a result went into the task queue: %d messages there", d)
	}
	var dls []DeadLetter
	if err := r.c.DeadLetters(ctx, func(dl DeadLetter) error { dls = append(dls, dl); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].Task.Task.ID != "r5" || dls[0].Task.ReplyTo != reply {
		t.Fatalf("dead letters %+v, want r5 with reply-to %s", dls, reply)
	}
}

// TestGatewayFairShareDemotes: a client past FairBurst × weight unfinished
// tasks has its next ones published one priority level lower, so the
// broker hands out the other client's tasks of the same priority first.
func TestGatewayFairShareDemotes(t *testing.T) {
	t.Parallel()
	r := newGatewayRig(t, testConfig(t))
	ctx := testCtx(t)
	g, results := r.gateway("fair", map[string]int{"a": 1, "b": 2}, func(gc *GatewayConfig) { gc.FairBurst = 2 })
	submit := func(tenant string, n int) {
		for i := 1; i <= n; i++ {
			tk := task(fmt.Sprintf("%s/%d", tenant, i), 0)
			tk.Tenant = tenant
			if err := g.submitTask(ctx, tk); err != nil {
				t.Fatal(err)
			}
		}
	}
	submit("a", 3)
	submit("b", 5)
	k, err := r.c.Consume(ctx, []string{r.c.Names().Tasks}, 1)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, d := range nextAcked(t, ctx, k, 8) {
		if d.ReplyTo != g.ReplyQueue() {
			t.Errorf("%s: reply-to %q, want %q", d.MessageID, d.ReplyTo, g.ReplyQueue())
		}
		order = append(order, fmt.Sprintf("%s@%d", strings.TrimPrefix(d.MessageID, "fair/"), d.Priority))
	}
	k.Close()
	want := "a/1@5 a/2@5 b/1@5 b/2@5 b/3@5 b/4@5 a/3@4 b/5@4"
	if got := strings.Join(order, " "); got != want {
		t.Fatalf("broker order %s, want %s", got, want)
	}
	// Answers free a's share: with one task left, its next keeps its
	// priority.
	p := r.c.NewPublisher()
	defer p.Close()
	for _, id := range []string{"a/1", "a/2"} {
		if err := p.Reply(ctx, g.ReplyQueue(), captchaq.Result{ID: "fair/" + id, Status: captchaq.StatusSolved, Method: "turnstile", Token: "tok-" + id}); err != nil {
			t.Fatal(err)
		}
	}
	got := await(t, ctx, results, 2)
	slices.SortFunc(got, func(a, b captchaq.Result) int { return strings.Compare(a.ID, b.ID) })
	if got[0].ID != "a/1" || got[0].Token != "tok-a/1" || got[1].ID != "a/2" || got[1].Token != "tok-a/2" {
		t.Fatalf("results %+v", got)
	}
	submit2 := task("a/4", 0)
	submit2.Tenant = "a"
	if err := g.submitTask(ctx, submit2); err != nil {
		t.Fatal(err)
	}
	k, err = r.c.Consume(ctx, []string{r.c.Names().Tasks}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if d := next(t, ctx, k); d.MessageID != "fair/a/4" || d.Priority != 5 {
		t.Fatalf("after an answer: %s at priority %d, want fair/a/4 at 5", d.MessageID, d.Priority)
	}
}

// TestGatewayOutcomes: a task that expires in the task queue is recorded
// failed EXPIRED; Replay publishes it again with the reply-to from its
// record, leaving the fleet's dead-letter queue as it is; a solved result
// replaces a failure (a replay from the fleet's side) but not a cancel;
// copies are dropped and counted.
func TestGatewayOutcomes(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.TaskTTL = 150 * time.Millisecond
	r := newGatewayRig(t, cfg)
	ctx := testCtx(t)
	g, results := r.gateway("outcomes", nil, nil)
	for _, id := range []string{"x1", "x2"} {
		if err := g.submitTask(ctx, task(id, 0)); err != nil {
			t.Fatal(err)
		}
	}
	got := await(t, ctx, results, 2)
	slices.SortFunc(got, func(a, b captchaq.Result) int { return strings.Compare(a.ID, b.ID) })
	for i, id := range []string{"x1", "x2"} {
		if got[i].ID != id || got[i].Status != captchaq.StatusFailed || got[i].ErrorCode != captchaq.CodeExpired {
			t.Fatalf("result %d: %+v, want %s failed EXPIRED", i, got[i], id)
		}
	}
	// The broker routes each dead letter to the reply queue and to
	// PREFIX.failed; the gateway can answer before the second queue counts it.
	testbound.Until(t, "2 fleet dead letters", func() bool { return depth(t, ctx, r.c, r.c.Names().Failed) == 2 })
	// Replay x1: the task is published again; the fleet's dead letters
	// stay as they were, the operator's.
	k, err := r.c.Consume(ctx, []string{r.c.Names().Tasks}, 1)
	if err != nil {
		t.Fatal(err)
	}
	replayed, err := g.Replay(ctx, []string{"x1", "nope"})
	if err != nil || fmt.Sprint(replayed) != "[x1]" {
		t.Fatalf("Replay = %v, %v; want [x1]", replayed, err)
	}
	d := next(t, ctx, k)
	// A new generation: a worker answers a wire id once.
	if id, gen, ours := g.tasks.ids.storeID(d.MessageID); id != "x1" || gen == "" || !ours || d.ReplyTo != g.ReplyQueue() {
		t.Fatalf("replayed message %s reply-to %s, want x1 in a new generation to %s", d.MessageID, d.ReplyTo, g.ReplyQueue())
	}
	replayedX1 := d.MessageID
	if err := d.Ack(); err != nil {
		t.Fatal(err)
	}
	k.Close()
	if rec, err := g.Get(ctx, "x1"); err != nil || rec.Status != captchaq.StatusInFlight {
		t.Fatalf("x1 after replay: %+v, %v", rec, err)
	}
	var left []string
	if err := r.c.DeadLetters(ctx, func(dl DeadLetter) error { left = append(left, dl.Task.Task.ID); return nil }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(left) != "[outcomes/x1 outcomes/x2]" {
		t.Fatalf("fleet dead letters after replay: %v, want [outcomes/x1 outcomes/x2]", left)
	}
	// Workers answer x1 (solved) and x2 (solved, as after a replay from
	// the fleet's side): both recorded; a second copy of x1 is dropped.
	p := r.c.NewPublisher()
	defer p.Close()
	reply := func(wireID, token string) {
		t.Helper()
		if err := p.Reply(ctx, g.ReplyQueue(), captchaq.Result{ID: wireID, Status: captchaq.StatusSolved, Method: "turnstile", Token: token}); err != nil {
			t.Fatal(err)
		}
	}
	reply(replayedX1, "tok-1")
	reply("outcomes/x2", "tok-2")
	got = await(t, ctx, results, 2)
	slices.SortFunc(got, func(a, b captchaq.Result) int { return strings.Compare(a.ID, b.ID) })
	if got[0].ID != "x1" || got[0].Token != "tok-1" || got[1].ID != "x2" || got[1].Token != "tok-2" {
		t.Fatalf("answers %+v", got)
	}
	reply(replayedX1, "tok-again")
	// Cancel: answered CANCELED at once; a worker's later result is dropped.
	if err := g.submitTask(ctx, task("x3", 0)); err != nil {
		t.Fatal(err)
	}
	if err := g.Cancel(ctx, "x3"); err != nil {
		t.Fatal(err)
	}
	if c := await(t, ctx, results, 1)[0]; c.ID != "x3" || c.ErrorCode != captchaq.CodeCanceled {
		t.Fatalf("cancel result %+v", c)
	}
	if err := g.Cancel(ctx, "x3"); !errors.Is(err, captchaq.ErrFinal) {
		t.Fatalf("second cancel: %v, want ErrFinal", err)
	}
	reply("outcomes/x3", "tok-3")
	quietFor(t, results, 300*time.Millisecond)
	// x1's second copy, x3's answer and x3's own expiry (its message is
	// still in the task queue) are dropped.
	want := GatewayCounts{Accepted: 3, Results: 5, Duplicates: 3}
	testbound.Until(t, fmt.Sprintf("counts %+v", want), func() bool { return g.Counts() == want })
	for id, want := range map[string]string{"x1": "tok-1", "x2": "tok-2"} {
		if rec, err := g.Get(ctx, id); err != nil || rec.Status != captchaq.StatusSolved || rec.Result.Token != want {
			t.Errorf("%s: %+v, %v; want solved with %s", id, rec, err, want)
		}
	}
	if rec, _ := g.Get(ctx, "x3"); rec.Status != captchaq.StatusFailed || rec.Result.ErrorCode != captchaq.CodeCanceled {
		t.Errorf("x3: %+v, want still CANCELED", rec)
	}
	m := g.Metrics()
	if m.Submitted != 3 || m.Solved != 2 || m.Failed != 3 || m.QueueDepth != 0 {
		t.Errorf("metrics: submitted %d solved %d failed %d depth %d; want 3 2 3 0", m.Submitted, m.Solved, m.Failed, m.QueueDepth)
	}
}

// TestGatewayStoreChecks: Start refuses a store whose unfinished tasks
// another gateway published or a local queue sent to the provider, and
// publishes again a task recorded but not marked published.
func TestGatewayStoreChecks(t *testing.T) {
	t.Parallel()
	r := newGatewayRig(t, testConfig(t))
	ctx := testCtx(t)
	store := func(captchaID string) captchaq.Store {
		st := captchaq.NewMemoryStore(captchaq.MemoryStoreConfig{})
		if _, _, err := st.Enqueue(ctx, []captchaq.Task{task("q/1", 0)}, time.Now()); err != nil {
			t.Fatal(err)
		}
		if captchaID != "" {
			if err := st.Checkpoint(ctx, "q/1", captchaID, 1, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		return st
	}
	for _, c := range []struct {
		captchaID, want string
	}{
		{"gateway:web-2", `the store holds 1 unfinished tasks published by gateway "web-2", whose results come to ` + r.c.Names().ReplyQueue("web-2")},
		{"7301", "the store holds 1 tasks in flight at the provider, left by a queue that solves tasks itself"},
	} {
		g, err := NewGateway(r.c, GatewayConfig{Store: store(c.captchaID), Name: "web-1"})
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Start(ctx); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Start with %s: %v, want %q", c.captchaID, err, c.want)
		}
		if err := g.submitTask(ctx, task("q/2", 0)); !errors.Is(err, captchaq.ErrClosed) {
			t.Errorf("Submit after a failed Start: %v, want ErrClosed", err)
		}
	}
	r.mu.Lock()
	r.gateways = append(r.gateways, "web-1")
	r.mu.Unlock()
	st := store("")
	g, err := NewGateway(r.c, GatewayConfig{Store: st, Name: "web-1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.submitTask(ctx, task("q/2", 0)); err == nil || !strings.Contains(err.Error(), "gateway not started") {
		t.Fatalf("Submit before Start: %v", err)
	}
	if err := g.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if c := g.Counts(); c.Republished != 1 {
		t.Fatalf("counts %+v, want 1 republished", c)
	}
	if rec, err := st.Get(ctx, "q/1"); err != nil || rec.Status != captchaq.StatusInFlight || rec.CaptchaID != "gateway:web-1" {
		t.Fatalf("q/1 after Start: %+v, %v", rec, err)
	}
	if d := depth(t, ctx, r.c, r.c.Names().Tasks); d != 1 {
		t.Fatalf("task queue holds %d, want the republished task", d)
	}
	if err := g.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestGatewayDroppedConnection: the broker closes every connection of the
// fleet mid-run; the gateway takes its results on the next one and answers
// every task exactly once, and takes tasks again.
func TestGatewayDroppedConnection(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("rabbitmqctl"); err != nil {
		t.Skip("skipping: rabbitmqctl is needed to close a connection from the broker side")
	}
	cfg := testConfig(t)
	r := newGatewayRig(t, cfg)
	ctx := testCtx(t)
	r.worker("drop-w", sim.Config{Threads: 10, LatencyScale: 0.02, Seed: 5, PollBan: sim.PollBan{Disabled: true}}, 5, 10)
	g, results := r.gateway("drop", nil, nil)
	const n = 30
	submit := func(i int) {
		t.Helper()
		tk := task(fmt.Sprintf("d%02d", i), 0)
		tk.Params = map[string]string{"sitekey": "0x4AAA", "pageurl": fmt.Sprintf("https://shop.example/%d", i)}
		if err := g.submitTask(ctx, tk); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		submit(i)
	}
	got := await(t, ctx, results, 10)
	if closed := closeConnections(t, cfg.Prefix); closed != 1 {
		t.Fatalf("closed %d connections, want the one the worker and gateway share", closed)
	}
	got = append(got, await(t, ctx, results, n-10)...)
	quietFor(t, results, 500*time.Millisecond)
	seen := map[string]bool{}
	for _, res := range got {
		if seen[res.ID] || res.Status != captchaq.StatusSolved || res.Token == "" {
			t.Errorf("result %+v: a second answer, or not solved", res)
		}
		seen[res.ID] = true
	}
	if c := g.Counts(); c.Results != n || c.Unknown != 0 || c.Accepted != n {
		t.Errorf("counts %+v, want %d accepted and results, none unknown", c, n)
	}
	submit(n)
	if res := await(t, ctx, results, 1)[0]; res.ID != fmt.Sprintf("d%02d", n) || res.Status != captchaq.StatusSolved {
		t.Errorf("after the reconnect: %+v", res)
	}
}

// submitTask is what the server's doors do with a task: Check, then
// Submit the ValidTask.
func (g *Gateway) submitTask(ctx context.Context, t captchaq.Task) error {
	v, err := g.Check(t)
	if err != nil {
		return err
	}
	return g.Submit(ctx, v)
}
