package captchaq_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/simrig"
	"github.com/captchaq/captchaq/internal/tasktest"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/provider/createtask"
	"github.com/captchaq/captchaq/sim"
)

// lanePair is a queue on two simulators: "main", a thread plan serving
// CaptchaAI's methods, and "backup", a per-solve service.
type lanePair struct {
	main, backup *sim.Server
	q            *captchaq.Queue
	cfg          captchaq.Config
	results      chan captchaq.Result
}

// createTaskLane, as a lane's Provider given to setupLanes, makes it a
// createtask.Client on its simulator instead of an in.php one.
var createTaskLane captchaq.Provider = &createtask.Client{}

func setupLanes(t *testing.T, mainSim, backupSim sim.Config, mainLane, backupLane captchaq.ProviderConfig, opts ...func(*captchaq.Config)) *lanePair {
	t.Helper()
	return setupFleetLanes(t, mainSim, backupSim, mainLane, backupLane, nil, opts...)
}

// setupFleetLanes is setupLanes for a queue in fleet (nil: none).
func setupFleetLanes(t *testing.T, mainSim, backupSim sim.Config, mainLane, backupLane captchaq.ProviderConfig, fleet captchaq.Fleet, opts ...func(*captchaq.Config)) *lanePair {
	t.Helper()
	p := &lanePair{results: make(chan captchaq.Result, 1000)}
	start := func(c sim.Config, methods []string, createTask bool) (*sim.Server, captchaq.Provider) {
		if c.Latency == nil {
			c.Latency = fastLatency(20 * time.Millisecond)
		}
		c.Seed = 1
		c.PollBan.Disabled = true
		r := simrig.Start(t, simrig.Options{Sim: c, CreateTask: createTask, Methods: methods, Timeout: 10 * time.Second})
		return r.Sim, r.Provider
	}
	backupSim.Methods = tasktest.BackupMethods
	mainMethods := []string(nil)
	if mainLane.Provider == createTaskLane {
		mainMethods = createtask.Methods
		if mainLane.Methods != nil {
			mainMethods = mainLane.Methods
		}
		if mainSim.Methods == nil {
			mainSim.Methods = provider.KnownMethods
		}
	}
	p.main, mainLane.Provider = start(mainSim, mainMethods, mainLane.Provider == createTaskLane)
	p.backup, backupLane.Provider = start(backupSim, tasktest.BackupMethods, backupLane.Provider == createTaskLane)
	mainLane.Name, backupLane.Name = "main", "backup"
	if mainLane.Methods == nil {
		mainLane.Methods = provider.CaptchaAIMethods
	}
	backupLane.Methods = tasktest.BackupMethods
	cfg := captchaq.Config{
		Store:        captchaq.NewMemoryStore(captchaq.MemoryStoreConfig{}),
		Providers:    []captchaq.ProviderConfig{mainLane, backupLane},
		PollInterval: 10 * time.Millisecond,
		RetryBackoff: 5 * time.Millisecond, RetryBackoffMax: 20 * time.Millisecond,
		OnResult: func(r captchaq.Result) { p.results <- r },
	}
	for _, o := range opts {
		o(&cfg)
	}
	var fleets []captchaq.Fleet
	if fleet != nil {
		fleets = append(fleets, fleet)
	}
	q := simrig.NewQueue(t, cfg, fleets...)
	p.q, p.cfg = q, cfg
	if err := q.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return p
}

func hcaptchaTask(id string) captchaq.Task {
	return captchaq.Task{ID: id, Method: "hcaptcha", Params: map[string]string{
		"sitekey": "10000000-ffff-ffff-ffff-000000000001", "pageurl": "https://example.com/" + id,
	}}
}

// collect waits for n results from OnResult, by id.
func (p *lanePair) collect(t *testing.T, n int) map[string]captchaq.Result {
	t.Helper()
	out := map[string]captchaq.Result{}
	timeout := time.After(60 * time.Second) // only a hang reaches it
	for len(out) < n {
		select {
		case r := <-p.results:
			out[r.ID] = r
		case <-timeout:
			t.Fatalf("%d of %d results after 60 s", len(out), n)
		}
	}
	return out
}

func TestProvidersRouteByType(t *testing.T) {
	t.Parallel()
	p := setupLanes(t, sim.Config{Threads: 3}, sim.Config{Threads: 3, PricePer1000: 2.99},
		captchaq.ProviderConfig{Threads: 3},
		captchaq.ProviderConfig{Threads: 3, PricePer1000: map[string]float64{"default": 2.99, "hcaptcha": 1.5}, SpillAfter: time.Hour})
	var tasks []captchaq.Task
	for i := range 12 {
		tasks = append(tasks, task(fmt.Sprintf("t%02d", i), 0), hcaptchaTask(fmt.Sprintf("h%02d", i)))
	}
	if errs := p.q.SubmitBatchFunc(context.Background(), tasks, func(int, captchaq.Result) {}); errors.Join(errs...) != nil {
		t.Fatal(errors.Join(errs...))
	}
	got := p.collect(t, len(tasks))
	for id, r := range got {
		want, price := "main", 0.0
		if id[0] == 'h' {
			want, price = "backup", 0.0015
		}
		if r.Status != captchaq.StatusSolved || r.Provider != want || r.Price != price || r.Abandoned != nil {
			t.Errorf("%s: %s at %q for %v (abandoned %v), want solved at %q for %v", id, r.Status, r.Provider, r.Price, r.Abandoned, want, price)
		}
	}
	if a, b := p.main.Stats().Accepted, p.backup.Stats().Accepted; a != 12 || b != 12 {
		t.Fatalf("main accepted %d, backup %d; want 12 each", a, b)
	}
	m := p.q.Metrics()
	if len(m.Providers) != 2 || m.Providers[1].Solved != 12 || math.Abs(m.Providers[1].Spend-0.018) > 1e-9 ||
		math.Abs(m.Providers[1].CostPer1000-1.5) > 1e-9 || m.Providers[0].Spend != 0 || !m.Providers[0].Healthy {
		t.Fatalf("provider metrics %+v", m.Providers)
	}
}

func TestProvidersRefuseOnlyWhatNoneSolves(t *testing.T) {
	t.Parallel()
	p := setupLanes(t, sim.Config{Threads: 1}, sim.Config{Threads: 1},
		captchaq.ProviderConfig{}, captchaq.ProviderConfig{})
	lemin := captchaq.Task{ID: "l", Method: "lemin", Params: map[string]string{"captcha_id": "c", "pageurl": "https://a.example/"}}
	if err := p.q.Validate(lemin); err != nil {
		t.Fatalf("lemin (main solves it): %v", err)
	}
	if err := p.q.Validate(hcaptchaTask("h")); err != nil {
		t.Fatalf("hcaptcha (backup solves it): %v", err)
	}
	_, err := p.q.Submit(context.Background(), captchaq.Task{ID: "f", Method: "funcaptcha", Params: map[string]string{"publickey": "k", "pageurl": "https://a.example/"}})
	var te *captchaq.TaskError
	want := `captchaq: task "f": unsupported captcha type FunCaptcha (Arkose Labs) (method "funcaptcha"): no configured provider solves it ` +
		`(main: base64, bls, captchafox, cloudflare_challenge, friendly_captcha, geetest, lemin, post, turnstile, userrecaptcha; ` +
		`backup: base64, hcaptcha, turnstile, userrecaptcha); a provider with "funcaptcha" in its methods would ` +
		`(per-solve services of the protocol such as 2captcha and RuCaptcha solve it)`
	if !errors.As(err, &te) || te.Code != captchaq.CodeUnsupportedType || err.Error() != want {
		t.Fatalf("funcaptcha: %v\nwant %s", err, want)
	}
}

// A saturated main plan: backup takes tasks only once they have waited its
// SpillAfter, and no more than its MaxSpendPerHour pays for.
func TestProvidersSpillAfterWaitAndStopAtCap(t *testing.T) {
	t.Parallel()
	const (
		spillAfter = 150 * time.Millisecond
		price      = 2.0 // per 1000: 0.002 a solve
		capSolves  = 5
	)
	p := setupLanes(t, sim.Config{Threads: 2, Latency: fastLatency(100 * time.Millisecond)}, sim.Config{Threads: 10, PricePer1000: price},
		captchaq.ProviderConfig{Threads: 2},
		captchaq.ProviderConfig{Threads: 10, PricePer1000: map[string]float64{"default": price}, SpillAfter: spillAfter, MaxSpendPerHour: capSolves * price / 1000})
	var tasks []captchaq.Task
	for i := range 30 {
		tasks = append(tasks, task(fmt.Sprintf("t%02d", i), 0))
	}
	if errs := p.q.SubmitBatchFunc(context.Background(), tasks, func(int, captchaq.Result) {}); errors.Join(errs...) != nil {
		t.Fatal(errors.Join(errs...))
	}
	got := p.collect(t, len(tasks))
	spilled, spend := 0, 0.0
	for id, r := range got {
		if r.Status != captchaq.StatusSolved {
			t.Errorf("%s: %s %s", id, r.Status, r.Error)
		}
		if r.Provider == "backup" {
			spilled++
			spend += r.Price
			if waited := r.SubmittedAt.Sub(r.AcceptedAt); waited < spillAfter {
				t.Errorf("%s spilled after waiting %v, before SpillAfter %v", id, waited, spillAfter)
			}
		}
	}
	// 30 tasks on 2 threads of 100 ms solves: the main plan needs 1.5 s,
	// so far more than 5 tasks wait 150 ms; the cap stops the sixth.
	if spilled != capSolves || p.backup.Stats().Accepted != capSolves || math.Abs(spend-capSolves*price/1000) > 1e-9 {
		t.Fatalf("backup took %d tasks (sim accepted %d) for %v; want %d for %v", spilled, p.backup.Stats().Accepted, spend, capSolves, capSolves*price/1000)
	}
	if st := p.main.Stats(); st.Accepted != 30-capSolves || st.PeakThreadsInUse != 2 {
		t.Fatalf("main accepted %d (peak %d threads), want %d on 2", st.Accepted, st.PeakThreadsInUse, 30-capSolves)
	}
}

// Killing the main simulator mid-run: its queued tasks move to backup once
// it is down, its tasks in flight are submitted there when they cannot be
// polled, and every task gets its result.
func TestProvidersMainKilledMidRun(t *testing.T) {
	t.Parallel()
	p := setupLanes(t, sim.Config{Threads: 4, Latency: fastLatency(300 * time.Millisecond)}, sim.Config{Threads: 20, PricePer1000: 3},
		captchaq.ProviderConfig{Threads: 4, DownAfter: 100 * time.Millisecond},
		captchaq.ProviderConfig{Threads: 20, PricePer1000: map[string]float64{"default": 3}, SpillAfter: time.Hour})
	var tasks []captchaq.Task
	for i := range 20 {
		tasks = append(tasks, task(fmt.Sprintf("t%02d", i), 0))
	}
	if errs := p.q.SubmitBatchFunc(context.Background(), tasks, func(int, captchaq.Result) {}); errors.Join(errs...) != nil {
		t.Fatal(errors.Join(errs...))
	}
	first := p.collect(t, 4) // the main plan's first round is done
	p.main.Close()
	got := p.collect(t, len(tasks)-4)
	for id, r := range first {
		got[id] = r
	}
	var moved []string
	for id, r := range got {
		if r.Status != captchaq.StatusSolved {
			t.Errorf("%s: %s %s", id, r.Status, r.Error)
		}
		if r.Abandoned != nil {
			moved = append(moved, id)
			if !slices.Equal(r.Abandoned, []string{"main"}) || r.Provider != "backup" || r.Price != 0.003 {
				t.Errorf("%s: abandoned %v, solved at %q for %v; want abandoned at main (flat rate), solved at backup for 0.003", id, r.Abandoned, r.Provider, r.Price)
			}
		}
	}
	m := p.q.Metrics()
	if !m.Providers[0].Down || m.Providers[0].Healthy || int(m.Providers[0].Moved) != len(moved) {
		t.Fatalf("main's metrics %+v; want down, %d moved", m.Providers[0], len(moved))
	}
	if s := p.backup.Stats().Accepted; s+int64(len(first)) < 20 {
		t.Fatalf("backup accepted %d", s)
	}
	t.Logf("%d tasks in flight at main when it died were submitted to backup", len(moved))
}

// A provider's account refused: it leaves routing until a probe answers,
// and the other providers take its tasks meanwhile.
func TestProvidersAccountErrorFailsOver(t *testing.T) {
	t.Parallel()
	p := setupLanes(t, sim.Config{Threads: 2}, sim.Config{Threads: 5},
		captchaq.ProviderConfig{Threads: 2, DownAfter: 20 * time.Millisecond},
		captchaq.ProviderConfig{Threads: 5, SpillAfter: time.Hour})
	p.main.SetAccount(sim.Account{BadKey: true})
	var tasks []captchaq.Task
	for i := range 10 {
		tasks = append(tasks, task(fmt.Sprintf("a%02d", i), 0))
	}
	if errs := p.q.SubmitBatchFunc(context.Background(), tasks, func(int, captchaq.Result) {}); errors.Join(errs...) != nil {
		t.Fatal(errors.Join(errs...))
	}
	for id, r := range p.collect(t, 10) {
		if r.Status != captchaq.StatusSolved || r.Provider != "backup" {
			t.Errorf("%s: %s at %q", id, r.Status, r.Provider)
		}
	}
	if p.q.Paused() != nil {
		t.Fatalf("Paused with backup working: %v", p.q.Paused())
	}
	p.main.SetAccount(sim.Account{})
	// A probe brings main back: the next task goes there.
	testbound.Until(t, "main back in routing", func() bool { return p.q.Metrics().Providers[0].Healthy })
	f, err := p.q.Submit(context.Background(), task("after", 0))
	if err != nil {
		t.Fatal(err)
	}
	if r := waitAll(t, []*captchaq.Future{f})[0]; r.Provider != "main" {
		t.Fatalf("after the probe: solved at %q, want main", r.Provider)
	}
}

// A task in flight at the second provider is checkpointed under its
// name: a restarted queue polls it there and pays for no second solve.
func TestProvidersResumeInFlightAtItsProvider(t *testing.T) {
	t.Parallel()
	p := setupLanes(t, sim.Config{Threads: 1}, sim.Config{Threads: 1, Latency: fastLatency(300 * time.Millisecond)},
		captchaq.ProviderConfig{Threads: 1}, captchaq.ProviderConfig{Threads: 1})
	if _, err := p.q.Submit(context.Background(), hcaptchaTask("h")); err != nil {
		t.Fatal(err)
	}
	var rec captchaq.Record
	testbound.Until(t, "the task in flight", func() bool {
		rec, _ = p.q.Get(context.Background(), "h")
		return rec.Status == captchaq.StatusInFlight
	})
	id, ok := strings.CutPrefix(rec.CaptchaID, "backup:")
	if !ok || id == "" {
		t.Fatalf("checkpointed captcha id %q, want backup:ID", rec.CaptchaID)
	}
	p.q.Close()
	q2, err := captchaq.New(p.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer q2.Close()
	if err := q2.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := p.collect(t, 1)["h"]
	if r.Status != captchaq.StatusSolved || r.Provider != "backup" || r.CaptchaID != id || p.backup.Stats().Accepted != 1 {
		t.Fatalf("after restart: %+v; backup accepted %d, want 1", r, p.backup.Stats().Accepted)
	}
}

// BenchmarkSpillOverMainUtilization runs one batch on the main plan with
// a spill-over provider behind it and the same batch on the main plan
// alone, side by side, and reports the main plan's utilization in each:
// its threads busy at the simulator (accepted, not yet solved) over its
// threads, sampled every 5 ms while tasks wait in the queue, which is
// when an idle main thread would be a loss. The run alone is reported
// twice: over all its samples, and over the samples within the time the
// spill-over run had tasks waiting (main-util-alone-same-window), the fair
// comparison: spill-over drains the queue sooner, so its window is shorter
// and the start of the batch weighs more in it. Also the simulator's own
// figure over the whole run (from its first to its last accepted submit,
// so edges weigh more in the shorter run too), the share of tasks that
// spilled, and the makespan.
//
//	go test -run '^$' -bench SpillOverMainUtilization -benchtime 1x .
//	LATENCY_SCALE=0.05 go test -run '^$' -bench SpillOverMainUtilization -benchtime 3x .
//
// At 0.05 (3 runs) the main plan was 0.908 busy alone over its whole
// window and 0.860 with spill-over, but 0.861 alone over the same window:
// spill-over costs the main plan nothing. The start is what weighs: no
// solve time is learned before the first answers, so the first ten solves
// (0.4 s) were found about 0.48 s late, against 20 to 30 ms later on, alone
// and with spill-over alike; 0.48 thread-seconds each is 0.10 of a 4.9 s
// window and 0.04 of a 13.3 s one. Submits and dispatch added under 0.5 ms
// to a thread's gap in both runs.
func BenchmarkSpillOverMainUtilization(b *testing.B) {
	// LATENCY_SCALE scales the simulators' solve times (Turnstile's
	// median is 8 s at 1); spill_after is five of those medians.
	scale := 0.2
	if v, err := strconv.ParseFloat(os.Getenv("LATENCY_SCALE"), 64); err == nil {
		scale = v
	}
	spillAfter := time.Duration(scale * float64(40*time.Second))
	const (
		tasks   = 300
		threads = 10
	)
	run := func(b *testing.B, spill bool) (samples []utilSample, whole, spilled, seconds float64) {
		lat := sim.Config{Threads: threads, LatencyScale: scale, Seed: 11, PollBan: sim.PollBan{Disabled: true}}
		mainSrv, mainURL, err := sim.Start(lat, "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer mainSrv.Close()
		mainClient, _ := provider.NewClient(provider.ClientConfig{BaseURL: mainURL, Key: "k"})
		cfg := captchaq.Config{}
		if spill {
			bl := lat
			bl.Threads, bl.Methods, bl.PricePer1000, bl.Balance = 30, tasktest.BackupMethods, 1, 1000
			backupSrv, backupURL, err := sim.Start(bl, "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer backupSrv.Close()
			backupClient, _ := provider.NewClient(provider.ClientConfig{BaseURL: backupURL, Key: "k", Methods: tasktest.BackupMethods})
			cfg.Providers = []captchaq.ProviderConfig{
				{Name: "main", Provider: mainClient, Threads: threads, Methods: provider.CaptchaAIMethods},
				{Name: "backup", Provider: backupClient, Threads: 30, Methods: tasktest.BackupMethods, PricePer1000: map[string]float64{"default": 1}, SpillAfter: spillAfter},
			}
		} else {
			cfg.Provider, cfg.Threads = mainClient, threads
		}
		cfg.PollGap = 50 * time.Millisecond
		q, err := captchaq.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		if err := q.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		defer q.Close()
		var in []captchaq.Task
		for i := range tasks {
			in = append(in, task(fmt.Sprintf("u%03d", i), 0))
		}
		start := time.Now()
		stop := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				if q.Metrics().QueueDepth > 0 {
					samples = append(samples, utilSample{time.Since(start), float64(mainSrv.Stats().ThreadsInUse) / threads})
				}
			}
		}()
		done := make(chan captchaq.Result, tasks)
		if errs := q.SubmitBatchFunc(context.Background(), in, func(_ int, r captchaq.Result) { done <- r }); errors.Join(errs...) != nil {
			b.Fatal(errors.Join(errs...))
		}
		n := 0
		for range tasks {
			if r := <-done; r.Provider == "backup" {
				n++
			}
		}
		close(stop)
		<-sampled
		return samples, mainSrv.Stats().Utilization, float64(n) / tasks, time.Since(start).Seconds()
	}
	var alone, aloneWindow, with, wholeAlone, wholeWith, spilled, tAlone, tWith float64
	for range b.N {
		sw, w, f, s := run(b, true)
		with, wholeWith, spilled, tWith = with+meanUtil(sw, 0), wholeWith+w, spilled+f, tWith+s
		sa, w, _, s := run(b, false)
		alone, wholeAlone, tAlone = alone+meanUtil(sa, 0), wholeAlone+w, tAlone+s
		if len(sw) > 0 {
			aloneWindow += meanUtil(sa, sw[len(sw)-1].at)
		}
	}
	n := float64(b.N)
	b.ReportMetric(alone/n, "main-util-alone")
	b.ReportMetric(aloneWindow/n, "main-util-alone-same-window")
	b.ReportMetric(with/n, "main-util-with-spill")
	b.ReportMetric(wholeAlone/n, "sim-util-alone")
	b.ReportMetric(wholeWith/n, "sim-util-with-spill")
	b.ReportMetric(spilled/n, "spilled-share")
	b.ReportMetric(tAlone/n, "s-alone")
	b.ReportMetric(tWith/n, "s-with-spill")
}

// utilSample is one sample of a simulator's threads in use over its
// threads, at a time since the batch started.
type utilSample struct {
	at   time.Duration
	util float64
}

// meanUtil is the mean of the samples taken up to until (zero: all).
func meanUtil(ss []utilSample, until time.Duration) float64 {
	var sum, n float64
	for _, s := range ss {
		if until > 0 && s.at > until {
			break
		}
		sum, n = sum+s.util, n+1
	}
	if n == 0 {
		return 0
	}
	return sum / n
}

// noBalance hides a provider's Balance: the probe of a provider that has
// none asks for an id instead.
type noBalance struct{ captchaq.Provider }

// A provider down on the network leaves routing, and comes back once a
// probe gets an answer from it again.
func TestProvidersDownThenBackAfterProbe(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	mainCfg := sim.Config{Threads: 2, Latency: fastLatency(20 * time.Millisecond), PollBan: sim.PollBan{Disabled: true}}
	mainSrv, base, err := sim.Start(mainCfg, addr)
	if err != nil {
		t.Fatal(err)
	}
	client, err := provider.NewClient(provider.ClientConfig{BaseURL: base, Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	backupSrv, backupBase, err := sim.Start(sim.Config{Threads: 2, Methods: tasktest.BackupMethods, Latency: fastLatency(20 * time.Millisecond)}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer backupSrv.Close()
	backup, err := provider.NewClient(provider.ClientConfig{BaseURL: backupBase, Key: "k", Methods: tasktest.BackupMethods})
	if err != nil {
		t.Fatal(err)
	}
	q, err := captchaq.New(captchaq.Config{
		Providers: []captchaq.ProviderConfig{
			{Name: "main", Provider: noBalance{client}, Threads: 2, Methods: provider.CaptchaAIMethods, DownAfter: 50 * time.Millisecond},
			{Name: "backup", Provider: backup, Threads: 2, Methods: tasktest.BackupMethods, SpillAfter: time.Hour},
		},
		PollInterval: 10 * time.Millisecond, RetryBackoff: 5 * time.Millisecond, RetryBackoffMax: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	solveAt := func(id string) string {
		t.Helper()
		f, err := q.Submit(context.Background(), task(id, 0))
		if err != nil {
			t.Fatal(err)
		}
		return waitAll(t, []*captchaq.Future{f})[0].Provider
	}
	if p := solveAt("before"); p != "main" {
		t.Fatalf("before: solved at %q", p)
	}
	mainSrv.Close()
	// Failing submits take main down; the task goes to backup.
	if p := solveAt("while-down"); p != "backup" {
		t.Fatalf("while main is down: solved at %q", p)
	}
	if m := q.Metrics().Providers[0]; !m.Down || m.Healthy {
		t.Fatalf("main after failing: %+v", m)
	}
	mainSrv, _, err = sim.Start(mainCfg, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer mainSrv.Close()
	testbound.Until(t, "a probe bringing main back", func() bool { return q.Metrics().Providers[0].Healthy })
	if p := solveAt("after"); p != "main" {
		t.Fatalf("after the probe: solved at %q", p)
	}
}

// TestCreateTaskCallbacksByProvider: two createTask services give out the
// same task ids (the same seed); each is sent the queue's pingback URL
// as callbackUrl and POSTs getTaskResult's JSON there with the taskId,
// as CapMonster Cloud and Anti-Captcha do; each answer finishes the task
// of its own provider, with nothing polled.
func TestCreateTaskCallbacksByProvider(t *testing.T) {
	t.Parallel()
	pbURL, serve := pingbackServer(t)
	p := setupLanes(t, sim.Config{Threads: 5}, sim.Config{Threads: 5},
		captchaq.ProviderConfig{Threads: 5, Provider: createTaskLane, Methods: []string{"turnstile"}},
		captchaq.ProviderConfig{Threads: 5, Provider: createTaskLane, SpillAfter: time.Hour},
		func(c *captchaq.Config) { c.PingbackURL, c.PollInterval = pbURL, time.Hour })
	serve(p.q.PingbackHandler())
	for i := range 4 {
		for _, tk := range []captchaq.Task{task(fmt.Sprintf("t%d", i), 0), hcaptchaTask(fmt.Sprintf("h%d", i))} {
			if _, err := p.q.Submit(context.Background(), tk); err != nil {
				t.Fatal(err)
			}
		}
	}
	ids := map[string]map[string]bool{"main": {}, "backup": {}}
	for id, r := range p.collect(t, 8) {
		turnstile := strings.HasPrefix(id, "t")
		want := map[bool]string{true: "main", false: "backup"}[turnstile]
		if r.Status != captchaq.StatusSolved || r.Provider != want || strings.HasPrefix(r.Token, "0.") != turnstile || r.Token == "" {
			t.Errorf("%s: %s at %q with answer %.12q…; want solved at %q with an answer of its kind", id, r.Status, r.Provider, r.Token, want)
		}
		ids[r.Provider][r.CaptchaID] = true
	}
	shared := 0
	for id := range ids["main"] {
		if ids["backup"][id] {
			shared++
		}
	}
	if shared == 0 {
		t.Errorf("no task id given out by both providers (%v); the test needs them", ids)
	}
	testbound.Until(t, "4 callbacks from each", func() bool { return p.main.Stats().PingbacksSent == 4 && p.backup.Stats().PingbacksSent == 4 })
	for name, st := range map[string]sim.Stats{"main": p.main.Stats(), "backup": p.backup.Stats()} {
		if st.Calls.CreateTask != 4 || st.Calls.Submit != 4 || st.Calls.PollSingle+st.Calls.PollBulk != 0 || st.PingbacksFailed != 0 {
			t.Errorf("%s: %d createTask-protocol calls, %d submits, %d polls, %d failed callbacks; want 4, 4, 0, 0",
				name, st.Calls.CreateTask, st.Calls.Submit, st.Calls.PollSingle+st.Calls.PollBulk, st.PingbacksFailed)
		}
	}
}

// noSig is PingbackHandler's answer to a pingback without its provider's
// secret.
const noSig = "sig is missing or not the provider's: give each provider the pingback URL its submits carry"

// TestCreateTaskCallbackGuards: a createTask callback goes through the
// pingback's checks. One on the wrong provider's URL, or for an id its
// provider did not give out, changes nothing; one naming a provider
// without that provider's secret (none, or another's) is refused with
// 403; one naming no provider or none of the queue's, or that is not
// getTaskResult's JSON with a taskId, is refused; one saying the task
// failed makes the queue ask the service (which says it is still
// processing); the genuine one finishes the task.
func TestCreateTaskCallbackGuards(t *testing.T) {
	t.Parallel()
	pbURL, serve := pingbackServer(t)
	long := map[provider.Kind]sim.Latency{provider.KindHCaptcha: {Median: time.Hour, Min: time.Hour, Max: time.Hour}}
	p := setupLanes(t, sim.Config{Threads: 5}, sim.Config{Threads: 5, Latency: long},
		captchaq.ProviderConfig{Threads: 5, Provider: createTaskLane, Methods: []string{"turnstile"}},
		captchaq.ProviderConfig{Threads: 5, Provider: createTaskLane},
		func(c *captchaq.Config) { c.PingbackURL, c.PollInterval = pbURL, time.Hour })
	serve(p.q.PingbackHandler())
	ctx := context.Background()
	if _, err := p.q.Submit(ctx, hcaptchaTask("h")); err != nil {
		t.Fatal(err)
	}
	var rec captchaq.Record
	testbound.Until(t, "h in flight at backup", func() bool {
		rec, _ = p.cfg.Store.Get(ctx, "h")
		return rec.Status == captchaq.StatusInFlight
	})
	_, taskID, _ := strings.Cut(rec.CaptchaID, ":")
	if taskID == "" {
		t.Fatalf("stored captcha id %q", rec.CaptchaID)
	}
	mainURL, backupURL := p.q.PingbackURLOf("main"), p.q.PingbackURLOf("backup")
	_, mainSig, _ := strings.Cut(mainURL, "&sig=")
	post := func(u, body string) (int, string) {
		t.Helper()
		resp, err := http.Post(u, "application/json; charset=utf-8", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	ready := func(id, token string) string {
		return `{"errorId":0,"status":"ready","solution":{"gRecaptchaResponse":"` + token + `"},"cost":"0.00100","taskId":` + id + `}`
	}
	unchanged := func(what string) {
		t.Helper()
		if r, _ := p.cfg.Store.Get(ctx, "h"); r.Status != captchaq.StatusInFlight || len(p.results) != 0 {
			t.Fatalf("after %s: h is %s, %d results; want it in flight, none", what, r.Status, len(p.results))
		}
	}
	for _, c := range []struct {
		what, url, body string
		status          int
		answer          string
	}{
		{"the wrong provider's URL", mainURL, ready(taskID, "forged-at-main"), 200, "OK"},
		{"backup named with main's secret", pbURL + "?provider=backup&sig=" + mainSig, ready(taskID, "forged-sig"), 403, noSig},
		{"backup named with no secret", pbURL + "?provider=backup", ready(taskID, "forged-nosig"), 403, noSig},
		{"an id backup did not give out", backupURL, ready("4242", "forged-id"), 200, "OK"},
		{"no provider", pbURL, ready(taskID, "forged-none"), 400, "provider names none of the queue's providers"},
		{"an unknown provider", pbURL + "?provider=nope", ready(taskID, "forged-nope"), 400, "provider names none of the queue's providers"},
		{"no taskId", backupURL, `{"errorId":0,"status":"ready","solution":{"gRecaptchaResponse":"x"}}`, 400, "callback: taskId is missing or not a task id (a number or a string of printable characters, at most 100)"},
		{"not JSON", backupURL, `id=` + taskID + `&code=x`, 400, "callback: the body must be getTaskResult's JSON object with the taskId, got id=" + taskID + "&code=x"},
		{"an unknown status", backupURL, `{"errorId":0,"status":"done","taskId":` + taskID + `}`, 400, `callback: status "done" is neither ready nor processing`},
		{"a body over the limit", backupURL, `{"taskId":` + taskID + `,"pad":"` + strings.Repeat("x", createtask.CallbackLimit) + `"}`, 400, "callback: the body is over 1048576 bytes"},
	} {
		if status, answer := post(c.url, c.body); status != c.status || answer != c.answer {
			t.Errorf("%s: HTTP %d %q, want %d %q", c.what, status, answer, c.status, c.answer)
		}
		unchanged(c.what)
	}
	// A failed task: the queue asks the service, which knows better.
	polls := p.backup.Stats().Calls.PollSingle
	if status, _ := post(backupURL, `{"errorId":12,"errorCode":"ERROR_CAPTCHA_UNSOLVABLE","errorDescription":"x","taskId":`+taskID+`}`); status != 200 {
		t.Fatalf("an unsolvable callback: HTTP %d", status)
	}
	testbound.Until(t, "a poll of h after its unsolvable callback", func() bool { return p.backup.Stats().Calls.PollSingle > polls })
	unchanged("an unsolvable callback answered by a poll saying processing")

	if status, answer := post(backupURL, ready(taskID, "tok-from-callback")); status != 200 || answer != "OK" {
		t.Fatalf("the genuine callback: HTTP %d %q", status, answer)
	}
	r := p.collect(t, 1)["h"]
	if r.Status != captchaq.StatusSolved || r.Token != "tok-from-callback" || r.Provider != "backup" || r.CaptchaID != taskID {
		t.Errorf("h: %+v; want solved at backup with the callback's token", r)
	}
}

// TestProvidersPingbacksByProvider: both simulators give out the same
// captcha ids (the same seed); each provider's pingback names it, so each
// answer finishes the task of its own provider, never the other's with
// the same id. A pingback that names no provider is refused.
func TestProvidersPingbacksByProvider(t *testing.T) {
	t.Parallel()
	pbURL, serve := pingbackServer(t)
	p := setupLanes(t, sim.Config{Threads: 5}, sim.Config{Threads: 5},
		captchaq.ProviderConfig{Threads: 5}, captchaq.ProviderConfig{Threads: 5, SpillAfter: time.Hour},
		func(c *captchaq.Config) { c.PingbackURL, c.PollInterval = pbURL, time.Hour })
	serve(p.q.PingbackHandler())
	for i := range 4 {
		for _, tk := range []captchaq.Task{task(fmt.Sprintf("t%d", i), 0), hcaptchaTask(fmt.Sprintf("h%d", i))} {
			if _, err := p.q.Submit(context.Background(), tk); err != nil {
				t.Fatal(err)
			}
		}
	}
	ids := map[string]map[string]bool{"main": {}, "backup": {}}
	for id, r := range p.collect(t, 8) {
		turnstile := strings.HasPrefix(id, "t")
		want := map[bool]string{true: "main", false: "backup"}[turnstile]
		if r.Status != captchaq.StatusSolved || r.Provider != want || strings.HasPrefix(r.Token, "0.") != turnstile {
			t.Errorf("%s: %s at %q with answer %.12q…; want solved at %q with an answer of its kind", id, r.Status, r.Provider, r.Token, want)
		}
		ids[r.Provider][r.CaptchaID] = true
	}
	shared := 0
	for id := range ids["main"] {
		if ids["backup"][id] {
			shared++
		}
	}
	if shared == 0 {
		t.Errorf("no captcha id given out by both providers (%v); the test needs them", ids)
	}
	// The simulator counts a pingback once our handler has answered it.
	testbound.Until(t, "4 pingbacks from each", func() bool { return p.main.Stats().PingbacksSent == 4 && p.backup.Stats().PingbacksSent == 4 })
	if a, b := p.main.Stats(), p.backup.Stats(); a.Calls.PollBulk+a.Calls.PollSingle+b.Calls.PollBulk+b.Calls.PollSingle != 0 {
		t.Errorf("%d polls; want none", a.Calls.PollBulk+a.Calls.PollSingle+b.Calls.PollBulk+b.Calls.PollSingle)
	}
	resp, err := http.PostForm(pbURL, url.Values{"id": {"1"}, "code": {"x"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a pingback naming no provider: %d, want 400", resp.StatusCode)
	}
}
