package captchaq_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/simrig"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/sim"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fastLatency makes every kind the simulator solves take exactly d.
func fastLatency(d time.Duration) map[provider.Kind]sim.Latency {
	m := map[provider.Kind]sim.Latency{}
	for k := range sim.DefaultLatency {
		m[k] = sim.Latency{Median: d, Min: d, Max: d}
	}
	return m
}

// bundle is a queue on a real client against a real simulator on loopback.
type bundle struct {
	srv    *sim.Server
	client *provider.Client
	prov   *recorder
	store  *captchaq.MemoryStore
	q      *captchaq.Queue
}

// recorder wraps the real client: it records the order of submits and can
// inject failures in front of it.
type recorder struct {
	captchaq.Provider
	mu        sync.Mutex
	submitted []string          // task pageurls, in submit order
	inject    func(n int) error // called with the submit's number (1-based); non-nil fails it
	n         int
	// balance, when set, answers Balance in place of the simulator.
	balance func() error
}

// Balance is the account check after an account error: the simulator's
// getbalance unless balance is set.
func (r *recorder) Balance(ctx context.Context) (float64, error) {
	r.mu.Lock()
	balance := r.balance
	r.mu.Unlock()
	if balance != nil {
		return 0, balance()
	}
	bc, ok := r.Provider.(captchaq.BalanceChecker)
	if !ok {
		return 0, provider.ErrNetwork
	}
	return bc.Balance(ctx)
}

func (r *recorder) Submit(ctx context.Context, t provider.Task, pingback string) (string, error) {
	r.mu.Lock()
	r.n++
	n := r.n
	inject := r.inject
	r.mu.Unlock()
	if inject != nil {
		if err := inject(n); err != nil {
			return "", err
		}
	}
	id, err := r.Provider.Submit(ctx, t, pingback)
	if err == nil {
		r.mu.Lock()
		r.submitted = append(r.submitted, t.Params["pageurl"])
		r.mu.Unlock()
	}
	return id, err
}

func (r *recorder) Requests() int64 {
	return r.Provider.(interface{ Requests() int64 }).Requests()
}

func (r *recorder) order() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, len(r.submitted))
	for i, u := range r.submitted {
		out[i] = u[len("https://example.com/"):]
	}
	return out
}

// setup starts a simulator and a queue (not started) on it. Zero fields of
// simCfg and cfg get test-friendly values: 20ms solves, 10ms polls.
func setup(t *testing.T, simCfg sim.Config, cfg captchaq.Config, fleet ...captchaq.Fleet) *bundle {
	t.Helper()
	r := simrig.Start(t, simrig.Options{Sim: simDefaults(simCfg), Timeout: 10 * time.Second})
	return bundleOn(t, r, cfg, fleet...)
}

// setupInProcess is setup with no sockets: the queue's requests are served
// by the simulator's handler in the calling goroutine. Inside a synctest
// bubble (call it there) the clock is fake and moves only when every
// goroutine waits, so what a test counts does not depend on the machine's
// speed.
func setupInProcess(t *testing.T, simCfg sim.Config, cfg captchaq.Config, fleet ...captchaq.Fleet) *bundle {
	t.Helper()
	r := simrig.Start(t, simrig.Options{Sim: simDefaults(simCfg), InProcess: true, Timeout: 10 * time.Second})
	return bundleOn(t, r, cfg, fleet...)
}

// simDefaults gives the zero fields of simCfg test-friendly values.
func simDefaults(simCfg sim.Config) sim.Config {
	if simCfg.Latency == nil && !simCfg.Instant && simCfg.LatencyScale == 0 {
		simCfg.Latency = fastLatency(20 * time.Millisecond)
	}
	simCfg.Seed = 1
	// Tests poll every 10ms; the ban is tested where it matters.
	simCfg.PollBan.Disabled = true
	return simCfg
}

// newBundle builds a queue (not started) on srv, reached at base with hc;
// in the fleet when one is given (captchaq.NewFleetQueue).
func newBundle(t *testing.T, srv *sim.Server, base string, hc *http.Client, cfg captchaq.Config, fleet ...captchaq.Fleet) *bundle {
	t.Helper()
	return bundleOn(t, simrig.On(t, srv, base, hc, simrig.Options{}), cfg, fleet...)
}

// bundleOn builds a queue (not started) on r's client, through a recorder.
func bundleOn(t *testing.T, r *simrig.Rig, cfg captchaq.Config, fleet ...captchaq.Fleet) *bundle {
	t.Helper()
	b := &bundle{srv: r.Sim, client: r.Client, prov: &recorder{Provider: r.Client}}
	cfg.Provider = b.prov
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 10 * time.Millisecond
	}
	if cfg.RetryBackoff == 0 {
		cfg.RetryBackoff, cfg.RetryBackoffMax = 5*time.Millisecond, 20*time.Millisecond
	}
	b.q = r.Queue(t, cfg, fleet...)
	b.store = r.Store
	return b
}

func (b *bundle) start(t *testing.T) {
	t.Helper()
	simrig.Run(t, b.q)
}

// task is a valid Turnstile task whose pageurl carries its id, so the
// simulator's fingerprints and the recorder tell tasks apart.
func task(id string, priority int) captchaq.Task {
	return captchaq.Task{ID: id, Method: "turnstile", Priority: priority, Params: map[string]string{
		"sitekey": "0x4AAAAAAAB", "pageurl": "https://example.com/" + id,
	}}
}

func submitAll(t *testing.T, q *captchaq.Queue, tasks ...captchaq.Task) []*captchaq.Future {
	t.Helper()
	var fs []*captchaq.Future
	ctx := testbound.Context(t)
	for _, tk := range tasks {
		f, err := q.Submit(ctx, tk)
		if err != nil {
			t.Fatalf("Submit %s: %v", tk.ID, err)
		}
		fs = append(fs, f)
	}
	return fs
}

func waitAll(t *testing.T, fs []*captchaq.Future) []captchaq.Result {
	t.Helper()
	ctx := testbound.Context(t)
	out := make([]captchaq.Result, len(fs))
	for i, f := range fs {
		r, err := f.Wait(ctx)
		if err != nil {
			t.Fatalf("Wait %s: %v (hung if the deadline passed: %v)", f.ID(), err, testbound.Bound)
		}
		out[i] = r
	}
	return out
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%02d", prefix, i)
	}
	return out
}

func statuses(rs []captchaq.Result) map[captchaq.Status]int {
	m := map[captchaq.Status]int{}
	for _, r := range rs {
		m[r.Status]++
	}
	return m
}

var _ = slices.Equal[[]string]

// newQueue is captchaq.New, or captchaq.NewFleetQueue in the fleet given.
var newQueue = simrig.New

// testFleet is a captchaq.Fleet: admit decides (nil: every task), pools
// are the providers' thread pools by name ("" for Config.Provider), and
// journal takes the steps.
type testFleet struct {
	admit   func(id string) bool
	pools   map[string]captchaq.ThreadPool
	journal captchaq.Journal // nil: the Store's steps
}

func (f testFleet) Admit(id string) bool { return f.admit == nil || f.admit(id) }

func (f testFleet) Threads(name string) captchaq.ThreadPool { return f.pools[name] }

func (f testFleet) Journal() captchaq.Journal { return f.journal }
