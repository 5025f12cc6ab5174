package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/captchaq/captchaq/bench"
)

func init() {
	commands["bench"] = command{summary: "measure the engine against the seed model on the simulator; prints Markdown", run: runBench}
}

// runBench runs the benchmark scenarios and prints a Markdown report to
// stdout; progress goes to stderr.
func runBench(ctx context.Context, env *environment, args []string) error {
	p, err := parseBench(env, args)
	if err != nil {
		return err
	}
	if p.cpuProfile != "" {
		f, err := os.Create(p.cpuProfile)
		if err != nil {
			return &exitError{code: 2, err: fmt.Errorf("--cpuprofile: %w", err)}
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	host, _ := os.Hostname()
	out := env.stdout
	fmt.Fprintf(out, "# captchaq bench report\n\n`captchaq bench %s`\n\n%s, %s %s/%s, %d CPUs, %s, host %s\n\n",
		strings.Join(args, " "), time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), cpuModel(), host)
	return p.runScenarios(ctx, env, out)
}

// benchPlan is what a bench command line asks for.
type benchPlan struct {
	run        map[string]bool // the scenarios
	mixed      bench.MixedConfig
	mixes      []string
	seeds      int
	scale      bench.ScaleConfig
	amqpURL    string
	faults     []string
	runs       int
	cpuProfile string
	soak       bench.SoakConfig
	reservoir  bench.ReservoirConfig
}

// parseBench reads bench's flags; a bad one is a usage error naming it.
func parseBench(env *environment, args []string) (*benchPlan, error) {
	fs := env.flagSet("bench")
	var (
		scenario = fs.String("scenario", "mixed", "what to run: mixed, scale, store, all (those three), fleet, soak, or reservoir")
		tasks    = fs.Int("tasks", bench.MixedTasksDefault, "tasks of the mixed and store scenarios")
		threads  = fs.Int("threads", bench.MixedThreadsDefault, "plan threads of the mixed and store scenarios")
		scale    = fs.Float64("scale", 1, "multiply every latency, the poll ban window, the seed's 5 s poll and the engine's PollInterval by this `factor`")
		seed     = fs.Uint64("seed", 1, "simulator and task-order seed")
		seeds    = fs.Int("seeds", 1, "run the mixed scenario with this many seeds (--seed, --seed+1, …): full tables for the first, makespan ratios for all")
		polls    = fs.String("poll-intervals", "500ms,1s,2s", "engine PollInterval values of the mixed scenario, at scale 1")
		noPB     = fs.Bool("no-pingback", false, "leave the pingback rows out of the mixed scenario")
		mixes    = fs.String("mix", "", "task mixes of the mixed scenario, comma-separated: "+strings.Join(bench.MixNames(), ", ")+" (default: realistic, or every mix with --scenario all)")
		sTasks   = fs.Int("scale-tasks", 100_000, "tasks of the scale scenario")
		sThreads = fs.Int("scale-threads", 5000, "threads of the scale scenario")
		sLat     = fs.Float64("scale-latency", 0.01, "latency scale of the scale scenario")
		cpuProf  = fs.String("cpuprofile", "", "write a CPU profile of the whole run to `file` (read it with go tool pprof)")
		amqpURL  = fs.String("amqp", env.getenv("CAPTCHAQ_AMQP_URL"), "fleet scenario: the RabbitMQ broker its worker processes use (env CAPTCHAQ_AMQP_URL)")
		faults   = fs.String("faults", "none,sigkill,partition,close,sigstop", "fleet scenario: the faults to run, comma-separated, from "+strings.Join(bench.FleetFaults, ", ")+" (restart restarts the broker with rabbitmqctl: every user of it is cut off for a moment)")
		runs     = fs.Int("runs", 1, "fleet scenario: runs of each fault")
		duration = fs.Duration("duration", bench.SoakDurationDefault, "soak scenario: how long the client submits (the run goes on until every fault kind struck once); reservoir scenario: how long the demand lasts (default 2m)")
		rThreads = fs.String("reservoir-threads", "5,20", "reservoir scenario: the plans' threads, comma-separated")
		rShare   = fs.Float64("reservoir-share", 0.25, "reservoir scenario: the share of the plan's threads refills may take")
		rRate    = fs.Float64("rate", bench.ReservoirRateDefault, "reservoir scenario: the demand's mean rate, tasks a second")
		rFront   = fs.String("front", bench.FrontQueue, "reservoir scenario: what the client talks to: queue (in the bench process) or serve (`captchaq sim` and `captchaq serve` processes, in.php and res.php over HTTP, every token verified at the demo site)")
		rCaptcha = fs.String("captcha", "turnstile", "reservoir scenario: what the client asks for: turnstile, or recaptcha with --front serve")
		rDemands = fs.String("demands", strings.Join(bench.DemandNames, ","), "reservoir scenario: the demand patterns, comma-separated")
		postgres = fs.String("postgres", cmp.Or(env.getenv("CAPTCHAQ_PG_URL"), bench.SoakPostgresDefault), "soak scenario: a PostgreSQL server's URL as a user that creates databases (env CAPTCHAQ_PG_URL)")
		hapCfg   = fs.String("haproxy-config", bench.SoakHAProxyDefault, "soak scenario: the HAProxy config the balancer runs on")
		gap      = fs.String("fault-gap", fmt.Sprintf("%v-%v", bench.SoakGapMinDefault, bench.SoakGapMaxDefault), "soak scenario: the pause between faults, drawn from `MIN-MAX`")
	)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: captchaq bench [--scenario mixed|scale|store|all|reservoir] [--mix M,...] [--scale F] [flags]\n\nRuns scenarios against in-process simulators and prints a Markdown report. Flags:")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, &exitError{code: 2, err: fmt.Errorf("unexpected argument %q: bench takes only flags", fs.Arg(0))}
	}
	switch {
	case *tasks <= 0:
		return nil, &exitError{code: 2, err: fmt.Errorf("--tasks is %d: give a positive count", *tasks)}
	case *threads <= 0:
		return nil, &exitError{code: 2, err: fmt.Errorf("--threads is %d: give a positive count", *threads)}
	case *scale <= 0:
		return nil, &exitError{code: 2, err: fmt.Errorf("--scale is %v: give a positive factor (1 is realistic, 0.2 five times faster)", *scale)}
	case *seeds <= 0:
		return nil, &exitError{code: 2, err: fmt.Errorf("--seeds is %d: give a positive count", *seeds)}
	case *sTasks <= 0 || *sThreads <= 0 || *sLat <= 0:
		return nil, &exitError{code: 2, err: fmt.Errorf("--scale-tasks, --scale-threads and --scale-latency must be positive")}
	}
	gapMin, gapMax, err := parseGap(*gap)
	if err != nil {
		return nil, err
	}
	p := &benchPlan{
		mixed: bench.MixedConfig{Tasks: *tasks, Threads: *threads, Scale: *scale, Seed: *seed, NoPingback: *noPB, Log: env.stderr},
		seeds: *seeds, amqpURL: *amqpURL, runs: *runs, cpuProfile: *cpuProf,
		soak: bench.SoakConfig{AMQP: *amqpURL, Postgres: *postgres, HAProxy: *hapCfg, Duration: *duration, Seed: *seed,
			GapMin: gapMin, GapMax: gapMax, Log: env.stderr},
		scale: bench.ScaleConfig{Threads: *sThreads, Tasks: *sTasks, LatencyScale: *sLat, Seed: *seed},
	}
	if err := p.lists(*scenario, *polls, *mixes, *faults); err != nil {
		return nil, err
	}
	if p.run["reservoir"] {
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "duration" {
				p.reservoir.Duration = *duration
			}
		})
		if err := p.reservoirPlan(*rThreads, *rShare, *rRate, *seed); err != nil {
			return nil, err
		}
		switch {
		case *rFront != bench.FrontQueue && *rFront != bench.FrontServe:
			return nil, &exitError{code: 2, err: fmt.Errorf("--front %q: use queue or serve", *rFront)}
		case *rCaptcha != "turnstile" && (*rCaptcha != "recaptcha" || *rFront != bench.FrontServe):
			return nil, &exitError{code: 2, err: fmt.Errorf("--captcha %q: use turnstile, or recaptcha with --front serve", *rCaptcha)}
		}
		p.reservoir.Front, p.reservoir.Captcha = *rFront, *rCaptcha
		for _, d := range strings.Split(*rDemands, ",") {
			if bench.Demands[d] == nil {
				return nil, &exitError{code: 2, err: fmt.Errorf("--demands: %q is not a demand; use %s", d, strings.Join(bench.DemandNames, ", "))}
			}
			p.reservoir.Demands = append(p.reservoir.Demands, d)
		}
		p.reservoir.Log = env.stderr
	}
	return p, nil
}

// lists reads the flags that list things: the scenarios, the poll
// intervals, the mixes and the fleet's faults.
func (p *benchPlan) lists(scenario, polls, mixes, faults string) error {
	for _, s := range strings.Split(polls, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil || d <= 0 {
			return &exitError{code: 2, err: fmt.Errorf("--poll-intervals: %q is not a positive duration; use e.g. 500ms,1s,2s", s)}
		}
		p.mixed.PollIntervals = append(p.mixed.PollIntervals, d)
	}
	p.mixes = bench.MixNames()
	if mixes != "" {
		p.mixes = strings.Split(mixes, ",")
		for _, m := range p.mixes {
			if _, ok := bench.Mixes[m]; !ok {
				return &exitError{code: 2, err: fmt.Errorf("--mix: %q is not a mix; use %s", m, strings.Join(bench.MixNames(), ", "))}
			}
		}
	} else if scenario != "all" {
		p.mixes = []string{"realistic"}
	}
	p.run = map[string]bool{}
	switch scenario {
	case "mixed", "scale", "store", "fleet", "soak", "reservoir":
		p.run[scenario] = true
	case "all":
		p.run["mixed"], p.run["scale"], p.run["store"] = true, true, true
	default:
		return &exitError{code: 2, err: fmt.Errorf("--scenario %q: use mixed, scale, store, all, fleet, soak or reservoir", scenario)}
	}
	if p.run["soak"] {
		p.soak.AMQP = cmp.Or(p.amqpURL, bench.SoakAMQPDefault)
		return nil
	}
	if !p.run["fleet"] {
		return nil
	}
	if p.amqpURL == "" {
		return &exitError{code: 2, err: fmt.Errorf("--scenario fleet: give the broker with --amqp amqp://guest:guest@127.0.0.1:5672/")}
	}
	if p.runs <= 0 {
		return &exitError{code: 2, err: fmt.Errorf("--runs is %d: give a positive count", p.runs)}
	}
	for _, f := range strings.Split(faults, ",") {
		if !slices.Contains(bench.FleetFaults, f) {
			return &exitError{code: 2, err: fmt.Errorf("--faults: %q is not a fault; use %s", f, strings.Join(bench.FleetFaults, ", "))}
		}
		p.faults = append(p.faults, f)
	}
	return nil
}

// reservoirPlan reads the reservoir scenario's flags.
func (p *benchPlan) reservoirPlan(threads string, share, rate float64, seed uint64) error {
	switch {
	case share <= 0 || share > 1:
		return &exitError{code: 2, err: fmt.Errorf("--reservoir-share is %v: give a share above 0 and at most 1", share)}
	case rate <= 0:
		return &exitError{code: 2, err: fmt.Errorf("--rate is %v: give a positive rate, tasks a second", rate)}
	case p.reservoir.Duration < 0:
		return &exitError{code: 2, err: fmt.Errorf("--duration is %v: give a positive duration", p.reservoir.Duration)}
	}
	for _, s := range strings.Split(threads, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return &exitError{code: 2, err: fmt.Errorf("--reservoir-threads: %q is not a positive count; use e.g. 5,20", s)}
		}
		if int(share*float64(n)+1e-9) < 1 {
			return &exitError{code: 2, err: fmt.Errorf("--reservoir-share %v of %d threads leaves no thread for refills; raise it or the threads", share, n)}
		}
		p.reservoir.Threads = append(p.reservoir.Threads, n)
	}
	p.reservoir.Share, p.reservoir.Rate, p.reservoir.Seed = share, rate, seed
	return nil
}

// runScenarios runs the scenarios of p in order, each printing its
// Markdown to out.
func (p *benchPlan) runScenarios(ctx context.Context, env *environment, out io.Writer) error {
	if p.run["mixed"] {
		for _, m := range p.mixes {
			var reps []bench.MixedReport
			for i := range p.seeds {
				c := p.mixed
				c.Mix, c.Seed = m, p.mixed.Seed+uint64(i)
				rep, err := bench.Mixed(ctx, c)
				if err != nil {
					return err
				}
				if i == 0 {
					rep.Markdown(out)
				}
				reps = append(reps, rep)
			}
			if p.seeds > 1 {
				bench.SeedsMarkdown(out, reps)
			}
		}
	}
	if p.run["scale"] {
		rep, err := bench.Scale(ctx, p.scale)
		if err != nil {
			return err
		}
		rep.Markdown(out)
	}
	if p.run["reservoir"] {
		if p.reservoir.Front == bench.FrontServe {
			self, err := os.Executable()
			if err != nil {
				return err
			}
			p.reservoir.Binary = self
		}
		rows, err := bench.Reservoir(ctx, p.reservoir)
		if err != nil {
			return err
		}
		bench.ReservoirMarkdown(out, p.reservoir, rows)
	}
	if p.run["soak"] {
		if err := runSoak(ctx, env, p.soak, out); err != nil {
			return err
		}
	}
	if p.run["fleet"] {
		if err := runFleetBench(ctx, env, p.amqpURL, p.faults, p.runs, p.mixed.Seed, out); err != nil {
			return err
		}
	}
	if p.run["store"] {
		rep, err := bench.Store(ctx, bench.StoreConfig{Mixed: p.mixed, Log: env.stderr})
		if err != nil {
			return err
		}
		rep.Markdown(out)
	}
	return nil
}

// runFleetBench runs the fleet scenario: worker processes of this very
// binary (`captchaq worker` at its defaults), each fault runs times.
func runFleetBench(ctx context.Context, env *environment, url string, faults []string, runs int, seed uint64, out io.Writer) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("fleet: find this binary: %w", err)
	}
	var reps []bench.FleetReport
	for _, f := range faults {
		for i := range runs {
			fmt.Fprintf(env.stderr, "fleet: %s, run %d of %d\n", f, i+1, runs)
			rep, err := bench.Fleet(ctx, bench.FleetConfig{Binary: self, URL: url, Fault: f, Seed: seed + uint64(i), Disrupt: brokerLock(env)})
			if err != nil {
				return err
			}
			reps = append(reps, rep)
		}
	}
	bench.FleetMarkdown(out, reps)
	return nil
}

// parseGap reads --fault-gap, MIN-MAX.
func parseGap(s string) (time.Duration, time.Duration, error) {
	a, b, ok := strings.Cut(s, "-")
	lo, errA := time.ParseDuration(a)
	hi, errB := time.ParseDuration(b)
	if !ok || errA != nil || errB != nil || lo <= 0 || hi < lo {
		return 0, 0, &exitError{code: 2, err: fmt.Errorf("--fault-gap %q: give MIN-MAX, two durations, e.g. 15s-30s", s)}
	}
	return lo, hi, nil
}

// runSoak runs the soak scenario on processes of this very binary and
// prints its report; a broken invariant is an error (exit 1) naming the
// seed that reruns it.
func runSoak(ctx context.Context, env *environment, cfg bench.SoakConfig, out io.Writer) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("soak: find this binary: %w", err)
	}
	cfg.Binary = self
	cfg.DisruptBroker = brokerLock(env)
	cfg.DisruptPostgres = postgresLock(env)
	fmt.Fprintf(env.stderr, "soak: seed %d, %v\n", cfg.Seed, cfg.Duration)
	rep, err := bench.Soak(ctx, cfg)
	if err != nil {
		return fmt.Errorf("%w (seed %d)", err, cfg.Seed)
	}
	bench.SoakMarkdown(out, rep)
	return rep.Err()
}

// postgresLock takes, for a PostgreSQL restart, the lock the project's
// PostgreSQL tests share (internal/pgtest), exclusively: tests on the
// same machine wait instead of failing.
func postgresLock(env *environment) func() (release func()) {
	return func() func() {
		f, err := os.OpenFile(filepath.Join(os.TempDir(), "captchaq-postgres-test.lock"), os.O_CREATE|os.O_RDWR, 0o666)
		if err == nil {
			err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		}
		if err != nil {
			fmt.Fprintf(env.stderr, "soak: no PostgreSQL lock (%v); going on without it\n", err)
			return func() {}
		}
		return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }
	}
}

// brokerLock takes, for a fault that cuts every user of the broker off
// (close, restart), the lock the project's broker tests share
// (internal/brokertest), exclusively: tests on the same machine wait
// instead of failing. As those tests do, it holds the gate in front of
// the lock while it waits, so shared takers that come later wait too.
func brokerLock(env *environment) func() (release func()) {
	return func() func() {
		take := func(name string) *os.File {
			f, err := os.OpenFile(filepath.Join(os.TempDir(), name), os.O_CREATE|os.O_RDWR, 0o666)
			if err != nil {
				fmt.Fprintf(env.stderr, "fleet: no broker lock (%v); going on without it\n", err)
				return nil
			}
			if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
				f.Close()
				fmt.Fprintf(env.stderr, "fleet: no broker lock (%v); going on without it\n", err)
				return nil
			}
			return f
		}
		free := func(f *os.File) {
			if f != nil {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				f.Close()
			}
		}
		gate := take("captchaq-broker-test.gate")
		f := take("captchaq-broker-test.lock")
		free(gate)
		return func() { free(f) }
	}
}

// cpuModel names the CPU from /proc/cpuinfo, or "unknown CPU".
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}
