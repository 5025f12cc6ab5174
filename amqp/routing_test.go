package amqp

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
)

// routingProviders are a fleet's two providers, as a --providers file
// gives them; change edits a copy.
func routingProviders(change func(ps []captchaq.ProviderConfig)) captchaq.Config {
	ps := []captchaq.ProviderConfig{
		{Name: "main", Threads: 2, Methods: []string{"base64", "turnstile", "userrecaptcha"}},
		{Name: "backup", Threads: 3, Methods: []string{"hcaptcha", "turnstile"}, SpillAfter: 5 * time.Second},
	}
	if change != nil {
		change(ps)
	}
	return captchaq.Config{Providers: ps}
}

func TestRoutingOfSaysWhatRoutes(t *testing.T) {
	plan := routingOf(captchaq.Config{}, 20)
	if plan != "one provider of 20 threads (no --providers)" {
		t.Errorf("plan: %q", plan)
	}
	base := routingOf(routingProviders(nil), 5)
	if want := "providers main (2 threads; base64 turnstile userrecaptcha), backup (3 threads; hcaptcha turnstile; spill_after 5s)"; base != want {
		t.Errorf("providers:\n got %q\nwant %q", base, want)
	}
	same := routingProviders(func(ps []captchaq.ProviderConfig) {
		// What each worker may have of its own, and the methods' order.
		ps[0].Methods = []string{"userrecaptcha", "base64", "turnstile"}
		ps[1].PricePer1000 = map[string]float64{"default": 2.99}
		ps[1].MaxSpendPerHour, ps[1].DownAfter = 1.5, time.Minute
	})
	if got := routingOf(same, 5); got != base {
		t.Errorf("price, spend cap, down_after or methods' order changed the routing: %q", got)
	}
	for name, change := range map[string]func(ps []captchaq.ProviderConfig){
		"order":       func(ps []captchaq.ProviderConfig) { ps[0], ps[1] = ps[1], ps[0] },
		"threads":     func(ps []captchaq.ProviderConfig) { ps[0].Threads = 4 },
		"methods":     func(ps []captchaq.ProviderConfig) { ps[1].Methods = []string{"hcaptcha"} },
		"spill_after": func(ps []captchaq.ProviderConfig) { ps[1].SpillAfter = 0 },
		"name":        func(ps []captchaq.ProviderConfig) { ps[1].Name = "other" },
	} {
		if got := routingOf(routingProviders(change), 5); got == base {
			t.Errorf("%s: the routing did not change: %q", name, got)
		}
	}
	defaults := routingOf(captchaq.Config{Providers: []captchaq.ProviderConfig{{Name: "solo"}}}, 5)
	if want := "providers solo (5 threads; " + strings.Join(provider.CommonMethods, " ") + ")"; defaults != want {
		t.Errorf("defaults:\n got %q\nwant %q", defaults, want)
	}
}

// Each check is on a connection of its own, as each worker process has.
func TestFleetRefusesAnotherRouting(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	ctx := testCtx(t)
	fleet := routingOf(routingProviders(nil), 5)
	check := func(routing string) error {
		t.Helper()
		return setup(t, cfg).declareRouting(ctx, routing)
	}
	if err := check(fleet); err != nil {
		t.Fatalf("first worker: %v", err)
	}
	if err := check(fleet); err != nil {
		t.Fatalf("a second worker of the same routing: %v", err)
	}
	plan := routingOf(captchaq.Config{}, 5)
	err := check(plan)
	var rc *RoutingConflictError
	if !errors.As(err, &rc) || rc.Fleet != fleet || rc.Worker != plan || rc.Prefix != cfg.Prefix {
		t.Fatalf("a worker without providers: %v, want a *RoutingConflictError", err)
	}
	for _, want := range []string{"route by " + fleet, "this worker by " + plan, "the same --providers file",
		"stop every worker on prefix " + cfg.Prefix, "rabbitmqctl delete_queue " + cfg.Prefix + ".routing"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error lacks %q: %v", want, err)
		}
	}
	for name, change := range map[string]func(ps []captchaq.ProviderConfig){
		"order swapped":  func(ps []captchaq.ProviderConfig) { ps[0], ps[1] = ps[1], ps[0] },
		"threads differ": func(ps []captchaq.ProviderConfig) { ps[1].Threads = 10 },
		"methods differ": func(ps []captchaq.ProviderConfig) { ps[1].Methods = append(ps[1].Methods, "funcaptcha") },
	} {
		if err := check(routingOf(routingProviders(change), 5)); !errors.As(err, &rc) || rc.Fleet != fleet {
			t.Errorf("%s: %v, want a *RoutingConflictError naming the fleet's routing", name, err)
		}
	}

	// The documented reset, with every worker stopped: the next worker
	// records its routing, and the old one is refused.
	if err := DeleteRouting(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if err := check(plan); err != nil {
		t.Fatalf("after DeleteRouting: %v", err)
	}
	if err := check(fleet); !errors.As(err, &rc) || rc.Fleet != plan || rc.Worker != fleet {
		t.Fatalf("the old routing after the reset: %v, want a *RoutingConflictError", err)
	}
}

// Two workers of different routings starting at once: exactly one
// starts, whichever comes first.
func TestRoutingRaceHasOneWinner(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	ctx := testCtx(t)
	routings := []string{routingOf(routingProviders(nil), 5), routingOf(captchaq.Config{}, 5)}
	for round := range 5 {
		conns := []*Conn{setup(t, cfg), setup(t, cfg)}
		errs := make([]error, 2)
		var start, wg sync.WaitGroup
		start.Add(1)
		for i := range 2 {
			wg.Go(func() {
				start.Wait()
				errs[i] = conns[i].declareRouting(ctx, routings[i])
			})
		}
		start.Done()
		wg.Wait()
		var rc *RoutingConflictError
		switch {
		case errs[0] == nil && errors.As(errs[1], &rc) && rc.Fleet == routings[0]:
		case errs[1] == nil && errors.As(errs[0], &rc) && rc.Fleet == routings[1]:
		default:
			t.Fatalf("round %d: %v and %v; want one nil and one *RoutingConflictError", round, errs[0], errs[1])
		}
		if err := DeleteRouting(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
}

// A worker that dies while it checks leaves neither its lock nor the
// record unreadable: a worker of the fleet's routing starts after it,
// another is still refused.
func TestRoutingSurvivesADeadChecker(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	ctx := testCtx(t)
	fleet := routingOf(captchaq.Config{}, 7)
	if err := setup(t, cfg).declareRouting(ctx, fleet); err != nil {
		t.Fatal(err)
	}
	conn, _, err := dial(ctx, cfg.withDefaults())
	if err != nil {
		t.Fatal(err)
	}
	n := NamesFor(cfg.Prefix)
	if _, err := lockQueue(ctx, conn, n.RoutingLock, "a test"); err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := ch.Get(n.Routing, false); !ok || err != nil {
		t.Fatalf("read the record: %v %v", ok, err)
	}
	conn.Close() // dies holding the lock and the record
	if err := setup(t, cfg).declareRouting(ctx, fleet); err != nil {
		t.Fatalf("the fleet's routing after a dead checker: %v", err)
	}
	var rc *RoutingConflictError
	if err := setup(t, cfg).declareRouting(ctx, routingOf(captchaq.Config{}, 8)); !errors.As(err, &rc) {
		t.Fatalf("another routing after a dead checker: %v, want a *RoutingConflictError", err)
	}
}

// A Worker checks its routing before its pools and before any task: two
// of the same providers start; one without providers on their prefix is
// refused by Run, and declares no pool.
func TestWorkerRefusesAnotherRouting(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	ctx := testCtx(t)
	cl, err := provider.NewClient(provider.ClientConfig{BaseURL: "http://127.0.0.1:9", Key: "test-key"})
	if err != nil {
		t.Fatal(err)
	}
	plan := captchaq.Config{Provider: cl, Threads: 4}
	providers := routingProviders(func(ps []captchaq.ProviderConfig) {
		ps[0].Provider, ps[1].Provider = cl, cl
	})
	t.Cleanup(func() {
		if err := DeleteProviderThreads(context.Background(), cfg, "main", "backup"); err != nil {
			t.Errorf("delete the providers' thread pools: %v", err)
		}
	})
	if err := startWorker(t, ctx, cfg, "route-w1", providers); err != nil {
		t.Fatalf("the first worker: %v", err)
	}
	if err := startWorker(t, ctx, cfg, "route-w2", providers); err != nil {
		t.Fatalf("a second worker of the same routing: %v", err)
	}
	var rc *RoutingConflictError
	if err := startWorker(t, ctx, cfg, "route-w3", plan); !errors.As(err, &rc) || rc.Worker != routingOf(plan, 4) {
		t.Fatalf("a worker without providers: %v, want a *RoutingConflictError", err)
	}
	conn, _, err := dial(ctx, cfg.withDefaults())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclarePassive(NamesFor(cfg.Prefix).Threads, true, false, false, false, nil); !isCode(err, amqp091.NotFound) {
		t.Errorf("the refused worker declared the plan's pool: %v", err)
	}
}

// The routing is checked again on every reconnect: a fleet whose record
// changed while a worker was away refuses it (the reconnect fails and is
// retried), and takes it back once the record is its routing again.
func TestRoutingIsCheckedOnReconnect(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("rabbitmqctl"); err != nil && os.Getenv("CI") == "true" {
		t.Fatal("rabbitmqctl is needed to close a connection from the broker side")
	} else if err != nil {
		t.Skip("skipping: rabbitmqctl is needed to close a connection from the broker side")
	}
	cfg := testConfig(t)
	ctx := testCtx(t)
	lines := make(chan string, 1000)
	logged := cfg
	logged.Logger = slog.New(slog.NewTextHandler(lineWriter{t, lines}, nil))
	c := setup(t, logged)
	mine, theirs := routingOf(captchaq.Config{}, 3), routingOf(routingProviders(nil), 5)
	if err := c.declareRouting(ctx, mine); err != nil {
		t.Fatal(err)
	}
	if err := DeleteRouting(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	conn, _, err := dial(ctx, cfg.withDefaults())
	if err != nil {
		t.Fatal(err)
	}
	if err := checkRouting(ctx, conn, cfg.Prefix, theirs); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	if n := closeConnections(t, cfg.Prefix); n != 1 {
		t.Fatalf("closed %d connections, want 1", n)
	}
	awaitLine(t, ctx, lines, `msg="broker reconnect failed"`, "route by "+theirs, "this worker by "+mine)
	if c.Connected() {
		t.Fatal("connected on another routing")
	}
	if err := DeleteRouting(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	awaitLine(t, ctx, lines, `msg="broker reconnected"`)
	var rc *RoutingConflictError
	if err := setup(t, cfg).declareRouting(ctx, theirs); !errors.As(err, &rc) || rc.Fleet != mine {
		t.Fatalf("the record after the reconnect: %v, want the reconnected worker's", err)
	}
}

// startWorker runs a worker with SharedThreads on queue qc, on a
// connection of its own as a worker process has, until the test ends. It
// returns nil once the worker started, or the error Run returned instead.
func startWorker(t *testing.T, ctx context.Context, cfg Config, owner string, qc captchaq.Config) error {
	t.Helper()
	t.Cleanup(func() {
		n := NamesFor(cfg.Prefix)
		_ = deleteAll(context.Background(), cfg.withDefaults(), []string{n.InflightQueue(owner), n.ClaimQueue(owner)}, nil)
	})
	lines := make(chan string, 1000)
	qc.Logger = testLogger(t)
	w, err := NewWorker(setup(t, cfg), WorkerConfig{Queue: qc, Owner: owner, Grace: time.Second, SharedThreads: true,
		Logger: slog.New(slog.NewTextHandler(lineWriter{t, lines}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	for started := false; !started; {
		select {
		case err := <-done:
			stop()
			return err
		case line := <-lines:
			started = strings.Contains(line, `msg="worker started"`)
		case <-ctx.Done():
			t.Fatalf("worker %s neither started nor returned", owner)
		}
	}
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("worker %s: %v", owner, err)
		}
	})
	return nil
}

// lineWriter logs each line to the test's log and sends it on lines,
// dropping it when lines is full.
type lineWriter struct {
	t     *testing.T
	lines chan string
}

func (w lineWriter) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	w.t.Log(line)
	select {
	case w.lines <- line:
	default:
	}
	return len(p), nil
}

// awaitLine waits for a line that has every one of want.
func awaitLine(t *testing.T, ctx context.Context, lines <-chan string, want ...string) {
	t.Helper()
	for {
		select {
		case line := <-lines:
			if !slices.ContainsFunc(want, func(w string) bool { return !strings.Contains(line, w) }) {
				return
			}
		case <-ctx.Done():
			t.Fatalf("no log line with %q", want)
		}
	}
}
