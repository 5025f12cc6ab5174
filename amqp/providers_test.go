package amqp

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/reportfwd"
	"github.com/captchaq/captchaq/internal/tasktest"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/sim"
)

// providerPair is two simulators, "main" (a thread plan with CaptchaAI's
// methods) and "backup" (a per-solve service that solves hCaptcha), and
// the providers of a fleet on them. Both simulators have the same seed,
// so they give out the same captcha ids: an answer fetched from the
// wrong one would be another task's (and of another kind).
type providerPair struct {
	main, backup *sim.Server
	providers    []captchaq.ProviderConfig
}

// The plans the fleet is given; the simulators allow far more, so only
// the fleet's shared pools keep it within them.
const (
	pairMainThreads   = 2
	pairBackupThreads = 3
)

func newProviderPair(t *testing.T, cfg Config) *providerPair {
	t.Helper()
	p := &providerPair{}
	start := func(sc sim.Config) (*sim.Server, *provider.Client) {
		sc.Threads, sc.Seed, sc.LatencyScale, sc.PollBan.Disabled = 50, 7, 0.01, true
		srv, apiURL, err := sim.Start(sc, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		cl, err := provider.NewClient(provider.ClientConfig{BaseURL: apiURL, Key: "test-key", Methods: sc.Methods})
		if err != nil {
			t.Fatal(err)
		}
		return srv, cl
	}
	var mainCl, backupCl *provider.Client
	p.main, mainCl = start(sim.Config{})
	p.backup, backupCl = start(sim.Config{Methods: tasktest.BackupMethods, PricePer1000: 2.99})
	p.providers = []captchaq.ProviderConfig{
		{Name: "main", Provider: mainCl, Threads: pairMainThreads, Methods: provider.CaptchaAIMethods},
		{Name: "backup", Provider: backupCl, Threads: pairBackupThreads, Methods: tasktest.BackupMethods,
			PricePer1000: map[string]float64{"default": 2.99}, SpillAfter: time.Hour},
	}
	t.Cleanup(func() {
		if err := DeleteProviderThreads(context.Background(), cfg, "main", "backup"); err != nil {
			t.Errorf("delete the providers' thread pools: %v", err)
		}
	})
	return p
}

// worker runs a worker on both providers, sharing their threads with the
// fleet, until the test ends. It has a connection of its own, as a
// worker process does (a pool's fill lock is per connection).
func (p *providerPair) worker(r *gatewayRig, owner string, change ...func(*WorkerConfig)) *Worker {
	r.t.Helper()
	w, err := NewWorker(setup(r.t, r.cfg), p.workerConfig(r, owner, change...))
	if err != nil {
		r.t.Fatal(err)
	}
	r.run(owner, w)
	return w
}

// workerConfig is the config of worker owner on both providers, sharing
// their threads with the fleet, changed by change.
func (p *providerPair) workerConfig(r *gatewayRig, owner string, change ...func(*WorkerConfig)) WorkerConfig {
	quiet := testLogger(r.t)
	wc := WorkerConfig{
		Queue: captchaq.Config{Providers: p.providers, PollInterval: 10 * time.Millisecond,
			RetryBackoff: 10 * time.Millisecond, RetryBackoffMax: 100 * time.Millisecond, Logger: quiet},
		Owner: owner, Grace: time.Second, BeatInterval: 100 * time.Millisecond, Logger: quiet, SharedThreads: true,
		Report: reportfwd.New(captchaq.Config{Providers: p.providers}).Forward,
	}
	for _, ch := range change {
		ch(&wc)
	}
	return wc
}

// TestFleetOnTwoProviders: two workers on a main plan and a per-solve
// backup. hCaptcha goes to the backup only, Turnstile to main (the
// backup's spill_after is an hour); each task is solved once and its
// result names its provider and price; the fleet together never has more
// tasks at a provider than its threads; both providers give out the same
// captcha ids, and each answer and each report goes to the right one.
func TestFleetOnTwoProviders(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	r := newGatewayRig(t, cfg)
	ctx := testCtx(t)
	p := newProviderPair(t, cfg)
	g, results := r.gateway("prov", nil, func(gc *GatewayConfig) { gc.Providers = p.providers })
	const n = 12
	for i := range n {
		if err := g.submitTask(ctx, turnstileTask(fmt.Sprintf("t%02d", i))); err != nil {
			t.Fatal(err)
		}
		if err := g.submitTask(ctx, hcaptchaTask(fmt.Sprintf("h%02d", i))); err != nil {
			t.Fatal(err)
		}
	}
	p.worker(r, "prov-w1")
	p.worker(r, "prov-w2")

	mainIDs, backupIDs := map[string]bool{}, map[string]bool{}
	byID := map[string]captchaq.Result{}
	for _, res := range await(t, ctx, results, 2*n) {
		if _, again := byID[res.ID]; again {
			t.Errorf("%s answered twice", res.ID)
		}
		byID[res.ID] = res
		want, price, turnstile := "main", 0.0, strings.HasPrefix(res.ID, "t")
		if !turnstile {
			want, price = "backup", 0.00299
		}
		if res.Status != captchaq.StatusSolved || res.Provider != want || res.Price != price || res.Attempts != 1 || len(res.Abandoned) != 0 {
			t.Errorf("%s: %s at %q for %v in %d attempts (abandoned %v), want solved at %q for %v in 1",
				res.ID, res.Status, res.Provider, res.Price, res.Attempts, res.Abandoned, want, price)
		}
		// A Turnstile answer is "0.<token>.<hex>"; an hCaptcha answer is
		// not: an answer fetched by the other task's id would show.
		if strings.HasPrefix(res.Token, "0.") != turnstile {
			t.Errorf("%s: answer %.20q… is not of its kind", res.ID, res.Token)
		}
		if turnstile {
			mainIDs[res.CaptchaID] = true
		} else {
			backupIDs[res.CaptchaID] = true
		}
	}
	shared := 0
	for id := range mainIDs {
		if backupIDs[id] {
			shared++
		}
	}
	if shared == 0 {
		t.Errorf("the two providers gave out no common captcha id (main %v, backup %v); the test needs them", mainIDs, backupIDs)
	}
	ms, bs := p.main.Stats(), p.backup.Stats()
	if ms.Calls.Submit != n || bs.Calls.Submit != n || ms.Duplicates != 0 || bs.Duplicates != 0 {
		t.Errorf("submits main %d, backup %d, duplicates %d and %d; want %d each, none twice", ms.Calls.Submit, bs.Calls.Submit, ms.Duplicates, bs.Duplicates, n)
	}
	if ms.PeakThreadsInUse != pairMainThreads || bs.PeakThreadsInUse != pairBackupThreads {
		t.Errorf("peak threads at main %d, at backup %d; want their plans, %d and %d", ms.PeakThreadsInUse, bs.PeakThreadsInUse, pairMainThreads, pairBackupThreads)
	}

	// A captcha id both providers gave out: each report reaches the
	// provider of the result it is about, and no other.
	var tr, hr captchaq.Result
	for _, res := range byID {
		if mainIDs[res.CaptchaID] && backupIDs[res.CaptchaID] {
			if res.Provider == "main" {
				tr = res
			} else {
				hr = res
			}
		}
	}
	if err := g.Report(ctx, tr, true); err != nil {
		t.Fatal(err)
	}
	if err := g.Report(ctx, hr, false); err != nil {
		t.Fatal(err)
	}
	if err := g.Report(ctx, captchaq.Result{Provider: "gone", CaptchaID: hr.CaptchaID}, false); err != nil {
		t.Fatal(err)
	}
	testbound.Until(t, "a good report at main and a bad one at the backup", func() bool {
		return p.main.Stats().ReportsGood == 1 && p.backup.Stats().ReportsBad == 1
	})
	testbound.Until(t, "the reports queue empty", func() bool { return depth(t, ctx, r.c, r.c.Names().Reports) == 0 })
	ms, bs = p.main.Stats(), p.backup.Stats()
	if ms.ReportsBad != 0 || bs.ReportsGood != 0 || ms.Calls.Report != 1 || bs.Calls.Report != 1 {
		t.Errorf("reports: main %d good %d bad in %d calls, backup %d good %d bad in %d calls; want 1 good at main, 1 bad at the backup, nothing else",
			ms.ReportsGood, ms.ReportsBad, ms.Calls.Report, bs.ReportsGood, bs.ReportsBad, bs.Calls.Report)
	}
}

// TestFleetSpendCapIsPerWorker: a provider's MaxSpendPerHour bounds what
// each worker sends it in an hour, not the fleet: two workers with a cap
// of two solves' price send the backup exactly four tasks, and hold the
// others (see "Several providers" in the package doc: give each worker
// the fleet's cap divided by the number of workers).
func TestFleetSpendCapIsPerWorker(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	r := newGatewayRig(t, cfg)
	ctx := testCtx(t)
	p := newProviderPair(t, cfg)
	p.providers[1].MaxSpendPerHour = 2 * 2.99 / 1000
	g, results := r.gateway("cap", nil, func(gc *GatewayConfig) { gc.Providers = p.providers })
	const n = 10
	for i := range n {
		if err := g.submitTask(ctx, hcaptchaTask(fmt.Sprintf("h%02d", i))); err != nil {
			t.Fatal(err)
		}
	}
	// Three tasks each at most, so both get some whoever starts first.
	prefetch := func(wc *WorkerConfig) { wc.Prefetch = 3 }
	workers := []*Worker{p.worker(r, "cap-w1", prefetch), p.worker(r, "cap-w2", prefetch)}
	for _, res := range await(t, ctx, results, 4) {
		if res.Status != captchaq.StatusSolved || res.Provider != "backup" {
			t.Errorf("%s: %s at %q, want solved at the backup", res.ID, res.Status, res.Provider)
		}
	}
	// Settled: each worker holds three tasks it may not send this hour,
	// and none at the provider.
	testbound.Until(t, "each worker holding three tasks, none at the provider", func() bool {
		for _, w := range workers {
			if w.Held() != 3 || w.Queue().Metrics().ThreadsInUse != 0 {
				return false
			}
		}
		return true
	})
	if st := p.backup.Stats(); st.Calls.Submit != 4 {
		t.Errorf("the backup got %d submits, want 4: two per worker", st.Calls.Submit)
	}
}

// TestGatewayValidatesForProviders: with providers, a gateway accepts a
// type any of them solves and refuses one none does, naming them; without,
// it refuses what the one provider (CaptchaAI) does not solve.
func TestGatewayValidatesForProviders(t *testing.T) {
	t.Parallel()
	r := newGatewayRig(t, testConfig(t))
	ctx := testCtx(t)
	providers := []captchaq.ProviderConfig{{Name: "main", Methods: provider.CaptchaAIMethods}, {Name: "backup", Methods: tasktest.BackupMethods}}
	g, _ := r.gateway("valp", nil, func(gc *GatewayConfig) { gc.Providers = providers })
	one, _ := r.gateway("val1", nil, nil)
	if err := g.submitTask(ctx, hcaptchaTask("h")); err != nil {
		t.Errorf("hCaptcha with a backup that solves it: %v", err)
	}
	err := one.submitTask(ctx, hcaptchaTask("h"))
	if captchaq.RefusalCode(err) != captchaq.CodeUnsupportedType {
		t.Errorf("hCaptcha on one CaptchaAI provider: %v, want %s", err, captchaq.CodeUnsupportedType)
	}
	fun := captchaq.Task{ID: "f", Method: "funcaptcha", Params: map[string]string{"publickey": "69A21A01-CC7B-B9C6-0F9A-E7FA06677FFC", "pageurl": "https://example.com/"}}
	err = g.submitTask(ctx, fun)
	if captchaq.RefusalCode(err) != captchaq.CodeUnsupportedType || !strings.Contains(err.Error(), "backup: base64, hcaptcha") || !strings.Contains(err.Error(), `"funcaptcha" in its methods would`) {
		t.Errorf("FunCaptcha that no provider solves: %v; want %s naming each provider's methods and which would", err, captchaq.CodeUnsupportedType)
	}
	if n := depth(t, ctx, r.c, r.c.Names().Tasks); n != 1 {
		t.Errorf("task queue holds %d, want the one accepted task", n)
	}
}

// turnstileTask is a Turnstile task on a page of its own, so the
// simulator counts no duplicate.
func turnstileTask(id string) captchaq.Task {
	t := task(id, 0)
	t.Params["pageurl"] = "https://shop.example/" + id
	return t
}

func hcaptchaTask(id string) captchaq.Task {
	return captchaq.Task{ID: id, Method: "hcaptcha", Params: map[string]string{
		"sitekey": "10000000-ffff-ffff-ffff-000000000001", "pageurl": "https://example.com/" + id,
	}}
}

// TestFleetAdoptsACheckpointAtItsProvider: a dead worker's checkpoint
// carries its captcha id with its provider's name; the worker that adopts
// it polls that provider, not the other one that gave out the same id to
// another task, and submits nothing.
func TestFleetAdoptsACheckpointAtItsProvider(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	r := newGatewayRig(t, cfg)
	ctx := testCtx(t)
	p := newProviderPair(t, cfg)
	backupID, err := p.providers[1].Provider.Submit(ctx, hcaptchaTask("h").ProviderTask(), "")
	if err != nil {
		t.Fatal(err)
	}
	mainID, err := p.providers[0].Provider.Submit(ctx, turnstileTask("other").ProviderTask(), "")
	if err != nil {
		t.Fatal(err)
	}
	if mainID != backupID {
		t.Fatalf("main gave out %s, the backup %s; the test needs the same id", mainID, backupID)
	}
	pub := r.c.NewPublisher()
	defer pub.Close()
	confirm, err := pub.SendTask(ctx, TaskMessage{Task: hcaptchaTask("h"), CaptchaID: "backup:" + backupID, Attempts: 1, Submitted: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if err := confirm(ctx); err != nil {
		t.Fatal(err)
	}
	p.worker(r, "adopt-w1")
	var got captchaq.Result
	if _, err := r.c.Collect(ctx, 1, func(res captchaq.Result) error { got = res; return nil }); err != nil {
		t.Fatal(err)
	}
	if got.ID != "h" || got.Status != captchaq.StatusSolved || got.Provider != "backup" || got.CaptchaID != backupID || strings.HasPrefix(got.Token, "0.") || got.Attempts != 1 {
		t.Errorf("result %+v; want h solved at the backup under %s with an hCaptcha answer, in 1 attempt", got, backupID)
	}
	if ms, bs := p.main.Stats(), p.backup.Stats(); ms.Calls.Submit != 1 || bs.Calls.Submit != 1 {
		t.Errorf("submits: main %d, backup %d; want only the test's own, 1 each", ms.Calls.Submit, bs.Calls.Submit)
	}
}
