package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/sim"
)

// benchKey is the account key the runners send to their own simulator.
const benchKey = "bench-key"

// Sim is the simulator settings of one comparison. Every runner starts its
// own fresh simulator from the same Sim, so rows differ only by client.
type Sim struct {
	// Threads is the plan's thread count.
	Threads int
	// Scale multiplies every solve time and the poll ban's window and
	// duration, so a scaled run keeps the ratios of a run at scale 1.
	Scale float64
	// Instant solves every task at once (Scale is then ignored).
	Instant bool
	// Latency overrides solve time distributions per kind (before Scale).
	Latency map[provider.Kind]sim.Latency
	// PollBanOff turns poll bans off; by default they are on at the
	// simulator's defaults (scaled).
	PollBanOff bool
	// Seed seeds the simulator.
	Seed uint64
	// ForgetFast forgets delivered tasks after a millisecond, for long runs.
	ForgetFast bool
}

func (s Sim) config() sim.Config {
	scale := s.Scale
	if scale <= 0 {
		scale = 1
	}
	c := sim.Config{
		Threads:      s.Threads,
		Key:          benchKey,
		Latency:      s.Latency,
		LatencyScale: scale,
		Instant:      s.Instant,
		Seed:         s.Seed,
		PollBan: sim.PollBan{
			Disabled: s.PollBanOff,
			Window:   time.Duration(float64(sim.PollBanWindowDefault) * scale),
			Duration: time.Duration(float64(sim.PollBanDurationDefault) * scale),
		},
	}
	if s.ForgetFast {
		c.FetchedRetention = time.Millisecond
	}
	return c
}

// Row is one runner's measurements. Everything but Makespan, Solved,
// Failed and CPU comes from the simulator's own counters.
type Row struct {
	Name           string
	Solved, Failed int
	// Submits and Polls are in.php and res.php calls; Requests all calls.
	Submits, Polls, Requests int64
	// MaxPollsPerTask is the most polls one task drew, for a provider's
	// poll budget (120 at CapMonster Cloud and CapSolver).
	MaxPollsPerTask int64
	// RequestsPerSolved is Requests / Solved.
	RequestsPerSolved float64
	// Utilization is the simulator's: busy thread-seconds ÷ (threads ×
	// first-to-last accepted submit).
	Utilization float64
	// Window is the simulator's utilization window, first to last
	// accepted submit.
	Window time.Duration
	// ReadyToFetched is the time answers sat ready at the provider.
	ReadyToFetched sim.Quantiles
	// Makespan is from the first submit to the last result.
	Makespan time.Duration
	// Floor is the makespan no client can beat on the solve times the
	// simulator drew for this run: their sum ÷ threads, or the longest
	// one if larger.
	Floor       time.Duration
	PeakThreads int
	NoSlot      int64
	Bans        int64
	Pingbacks   int64
	// CPU is the process's user+system time during the run (the simulator
	// runs in the same process and is included).
	CPU time.Duration
}

func (r *Row) fill(st sim.Stats) {
	r.Submits = st.Calls.Submit
	r.Window = time.Duration(st.WindowSeconds * float64(time.Second))
	r.Polls = st.Calls.PollSingle + st.Calls.PollBulk
	r.MaxPollsPerTask = st.MaxPollsPerTask
	r.Requests = st.Calls.Submit + st.Calls.PollSingle + st.Calls.PollBulk + st.Calls.Balance +
		st.Calls.Report + st.Calls.ThreadsInfo + st.Calls.Other
	if r.Solved > 0 {
		r.RequestsPerSolved = float64(r.Requests) / float64(r.Solved)
	}
	r.Utilization = st.Utilization
	r.ReadyToFetched = st.ReadyToFetched
	r.PeakThreads = st.PeakThreadsInUse
	r.NoSlot = st.NoSlot
	r.Bans = st.Bans
	r.Pingbacks = st.PingbacksSent
	if st.Threads > 0 {
		r.Floor = time.Duration(max(st.SolveSecondsDrawn/float64(st.Threads), st.SolveSecondsLongest) * float64(time.Second))
	}
}

// CPUTime is the process's user plus system CPU time so far.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func httpClient(conns int) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = max(conns, 2)
	t.MaxIdleConns = max(conns, 100)
	t.DialContext = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	return &http.Client{Timeout: time.Minute, Transport: t}
}

// SeedRun configures the seed model's runner.
type SeedRun struct {
	Name      string
	PollEvery time.Duration // the seed's 5 s, scaled
	MaxPolls  int           // default 30, the seed's
}

// RunSeed solves tasks with the seed model (a semaphore of the plan's
// threads, each task polled on its own every PollEvery) against a fresh
// simulator.
func RunSeed(ctx context.Context, s Sim, tasks []captchaq.Task, r SeedRun) (Row, error) {
	srv, base, err := sim.Start(s.config(), "127.0.0.1:0")
	if err != nil {
		return Row{}, fmt.Errorf("bench: start simulator: %w", err)
	}
	defer srv.Close()
	return runSeed(ctx, srv, base, httpClient(s.Threads), s.Threads, tasks, r)
}

// runSeed is RunSeed against srv, reached at base with hc.
func runSeed(ctx context.Context, srv *sim.Server, base string, hc *http.Client, threads int, tasks []captchaq.Task, r SeedRun) (Row, error) {
	m := SeedModel{
		BaseURL: base, Key: benchKey, Concurrency: threads,
		PollEvery: r.PollEvery, MaxPolls: r.MaxPolls, HTTPClient: hc,
	}
	if m.MaxPolls == 0 {
		m.MaxPolls = 30
	}
	st := make([]SeedTask, len(tasks))
	for i, t := range tasks {
		st[i] = SeedTask{Method: t.Method, Params: t.Params}
	}
	cpu0 := CPUTime()
	start := time.Now()
	res := m.SolveBatch(ctx, st)
	row := Row{Name: r.Name, Makespan: time.Since(start), CPU: CPUTime() - cpu0}
	if err := ctx.Err(); err != nil {
		return row, err
	}
	for _, x := range res {
		if x.Err == nil {
			row.Solved++
		} else {
			row.Failed++
		}
	}
	row.fill(srv.Stats())
	return row, nil
}

// EngineRun configures the engine's runner.
type EngineRun struct {
	Name string
	// PollInterval is Config.PollInterval: zero polls by the engine's
	// default scheduler, with Config.PollGap set to PollGap.
	PollInterval time.Duration
	PollGap      time.Duration
	// Pingback serves Queue.PingbackHandler on loopback and sets
	// Config.PingbackURL to it, so the simulator calls it.
	Pingback bool
	// LongestFirst feeds the tasks in captchaq.LongestFirst order.
	LongestFirst bool
	// Store is the queue's store; nil is a fresh memory store.
	Store captchaq.Store
	// RetryBackoff is the engine's (scaled); zero keeps its default.
	RetryBackoff time.Duration
	// MaxQueued bounds accepted, unfinished tasks; zero is the default.
	MaxQueued int
	// Progress, when set, is called after each result with the count so far.
	Progress func(done int)
	// SolveBatch hands every task to the engine in one SolveBatch call
	// instead of SubmitFunc from several goroutines.
	SolveBatch bool
	// Reservoirs and ReservoirShare are the queue's.
	Reservoirs     []captchaq.ReservoirConfig
	ReservoirShare float64
}

// RunEngine solves tasks with the queue engine against a fresh simulator.
// Tasks are fed with SubmitFunc (which blocks past MaxQueued); results are
// counted, not kept.
func RunEngine(ctx context.Context, s Sim, tasks []captchaq.Task, e EngineRun) (Row, error) {
	n := len(tasks)
	if e.LongestFirst {
		tasks = slices.Clone(tasks)
		captchaq.LongestFirst(tasks)
	}
	return runEngine(ctx, s, n, func(i int) captchaq.Task { return tasks[i] }, e)
}

func runEngine(ctx context.Context, s Sim, n int, task func(i int) captchaq.Task, e EngineRun) (Row, error) {
	srv, base, err := sim.Start(s.config(), "127.0.0.1:0")
	if err != nil {
		return Row{}, fmt.Errorf("bench: start simulator: %w", err)
	}
	defer srv.Close()
	q, stop, err := startEngine(ctx, s, base, e)
	if err != nil {
		return Row{}, err
	}
	defer stop()

	t := &engineTally{n: n, progress: e.Progress, allDone: make(chan struct{})}
	cpu0 := CPUTime()
	start := time.Now()
	feedErr := feed(ctx, q, n, task, e, t.onResult)
	if n == 0 {
		close(t.allDone)
	}
	for waiting := true; waiting; {
		select {
		case <-t.allDone:
			waiting = false
		case err := <-feedErr:
			if err != nil {
				return Row{Name: e.Name}, err
			}
		case <-ctx.Done():
			row := Row{Name: e.Name}
			row.fill(srv.Stats())
			m := q.Metrics()
			return row, fmt.Errorf("bench: %s: %w (solved %d, failed %d of %d; in flight %d, queued %d, paused %v)",
				e.Name, ctx.Err(), m.Solved, m.Failed, n, m.ThreadsInUse, m.QueueDepth, m.PausedReason)
		}
	}
	cpu := CPUTime() - cpu0
	if err := q.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return Row{Name: e.Name}, err
	}
	t.mu.Lock()
	row := Row{Name: e.Name, Solved: t.solved, Failed: t.failed, Makespan: t.last.Sub(start), CPU: cpu}
	t.mu.Unlock()
	row.fill(settledStats(srv))
	return row, nil
}

// startEngine starts a queue on the simulator at base as e configures it
// (with a pingback server when e.Pingback); stop closes both.
func startEngine(ctx context.Context, s Sim, base string, e EngineRun) (q *captchaq.Queue, stop func(), err error) {
	client, err := provider.NewClient(provider.ClientConfig{BaseURL: base, Key: benchKey, HTTPClient: httpClient(64)})
	if err != nil {
		return nil, nil, err
	}
	cfg := captchaq.Config{
		Provider: client, Store: e.Store, Threads: s.Threads, PollInterval: e.PollInterval, PollGap: e.PollGap,
		RetryBackoff: e.RetryBackoff, MaxQueued: e.MaxQueued, Reservoirs: e.Reservoirs, ReservoirShare: e.ReservoirShare,
	}
	if cfg.RetryBackoff > 0 {
		cfg.RetryBackoffMax = max(captchaq.RetryBackoffMaxDefault, cfg.RetryBackoff)
	}
	var qp atomic.Pointer[captchaq.Queue]
	closeHook := func() {}
	if e.Pingback {
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if q := qp.Load(); q != nil {
				q.PingbackHandler().ServeHTTP(w, r)
				return
			}
			http.Error(w, "not ready", http.StatusServiceUnavailable)
		}))
		closeHook = hs.Close
		cfg.PingbackURL = hs.URL + "/pingback"
	}
	q, err = captchaq.New(cfg)
	if err != nil {
		closeHook()
		return nil, nil, err
	}
	qp.Store(q)
	if err := q.Start(ctx); err != nil {
		closeHook()
		return nil, nil, err
	}
	return q, func() { q.Close(); closeHook() }, nil
}

// engineTally counts a run's results; allDone is closed at the n-th.
type engineTally struct {
	n        int
	progress func(done int)
	allDone  chan struct{}

	mu             sync.Mutex
	solved, failed int
	last           time.Time
}

func (t *engineTally) onResult(r captchaq.Result) {
	t.mu.Lock()
	if r.Status == captchaq.StatusSolved {
		t.solved++
	} else {
		t.failed++
	}
	t.last = time.Now()
	done := t.solved + t.failed
	t.mu.Unlock()
	if t.progress != nil {
		t.progress(done)
	}
	if done == t.n {
		close(t.allDone)
	}
}

// feed hands the n tasks to q, by SolveBatch or by feeders calling
// SubmitFunc, and returns the channel each feeder reports its end on
// (nil, or why it stopped).
func feed(ctx context.Context, q *captchaq.Queue, n int, task func(i int) captchaq.Task, e EngineRun, onResult func(captchaq.Result)) <-chan error {
	feedErr := make(chan error, feeders)
	if e.SolveBatch {
		go func() {
			tasks := make([]captchaq.Task, n)
			for i := range tasks {
				tasks[i] = task(i)
			}
			rs, err := q.SolveBatch(ctx, tasks)
			if err != nil {
				feedErr <- fmt.Errorf("bench: SolveBatch: %w", err)
				return
			}
			for _, r := range rs {
				onResult(r)
			}
			feedErr <- nil
		}()
		return feedErr
	}
	// Several feeders, as a real producer would: the store then commits
	// many intakes at once. Tasks still go in (nearly) input order.
	// Longest first needs the queue to take the tasks in order: one
	// feeder (with several, one can be descheduled while the others go
	// on).
	nFeeders := feeders
	if e.LongestFirst {
		nFeeders = 1
	}
	var next atomic.Int64
	for range nFeeders {
		go func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					feedErr <- nil
					return
				}
				if err := q.SubmitFunc(ctx, task(i), onResult); err != nil {
					feedErr <- fmt.Errorf("bench: submit task %d: %w", i, err)
					return
				}
			}
		}()
	}
	return feedErr
}

// settledStats waits (a little) for the simulator's pingback calls to
// return: the engine has every answer as soon as a pingback arrives, but
// the simulator counts the call only when its response is back.
func settledStats(srv *sim.Server) sim.Stats {
	st := srv.Stats()
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		if st.PingbacksSent+st.PingbacksFailed+st.Fetched >= st.Solved+st.Unsolvable {
			break
		}
		time.Sleep(10 * time.Millisecond)
		st = srv.Stats()
	}
	return st
}

// feeders is how many goroutines hand tasks to the engine at once.
const feeders = 8
