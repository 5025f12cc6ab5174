package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/sim"
	"github.com/captchaq/captchaq/store/postgres"
	"github.com/captchaq/captchaq/store/sqlite"
)

// queueFlags are the flags every command that runs the engine shares.
type queueFlags struct {
	threads      *int
	plan         *string
	apiURL       *string
	useSim       *bool
	store        *string
	pollInterval *time.Duration
	maxAttempts  *int
	providers    *providersFlag
	patient      *bool
	// defaultStore names the store file used without --store, given whether
	// the run is on the simulator; "" means a memory store.
	defaultStore func(useSim bool) (string, error)
}

func addQueueFlags(fs *flag.FlagSet) *queueFlags {
	return &queueFlags{
		threads:      fs.Int("threads", 0, fmt.Sprintf("plan threads: tasks in progress at the provider at once (default: from --plan, else %d; %d with the built-in simulator)", captchaq.ThreadsDefault, simThreadsDefault)),
		plan:         fs.String("plan", "", "plan `NAME` (BASIC, STANDARD, ADVANCE, PREMIUM, CORPORATE, ENTERPRISE, VIP-1, VIP-2, VIP-3) to take the thread count from"),
		apiURL:       addAPIURLFlag(fs),
		useSim:       fs.Bool("sim", false, "solve against the built-in simulator, started in-process (no key needed)"),
		store:        fs.String("store", "", "task store: a SQLite file `PATH` (share one on purpose), a PostgreSQL database postgres://USER@HOST/DB, or \"memory\" (default: "+sqliteDefaultHint()+")"),
		pollInterval: addPollIntervalFlag(fs),
		maxAttempts:  fs.Int("max-attempts", 0, fmt.Sprintf("submissions per task before it fails for good (default %d)", captchaq.MaxAttemptsDefault)),
		providers:    addProvidersFlag(fs, "api-url", "threads", "plan", "sim"),
		patient:      fs.Bool("patient", false, fmt.Sprintf("keep retrying a provider that never answered (default: stop with exit 1 after %d failures in a row)", unreachableStop)),
	}
}

// addPollIntervalFlag is --poll-interval of every command that runs a
// queue: left 0, the queue's default poll scheduler decides each poll.
func addPollIntervalFlag(fs *flag.FlagSet) *time.Duration {
	return fs.Duration("poll-interval", 0, "poll on this fixed cadence: lower fetches answers sooner, higher makes fewer requests (default: each poll decided from the learned solve times)")
}

func sqliteDefaultHint() string {
	return "a file of this input's own in the user's data directory"
}

// simThreadsDefault is the plan the built-in simulator plays when no
// --threads or --plan says otherwise: a STANDARD-sized plan, so a demo batch
// shows threads working in parallel.
const simThreadsDefault = 20

// queueRuntime is a started queue and what it stands on.
type queueRuntime struct {
	queue *captchaq.Queue
	// fatal receives an error when the queue cannot go on by itself (a bad
	// key, a provider that never answered: *unreachableError): the
	// command should stop and say why.
	fatal   chan error
	closers []func()
	// storePath is the SQLite store's file; "" for a memory store.
	storePath string
	store     captchaq.Store
}

func (rt *queueRuntime) close() {
	for i := len(rt.closers) - 1; i >= 0; i-- {
		rt.closers[i]()
	}
}

// open builds the provider client (or the simulator), the store and the
// queue, and starts the queue.
func (qf *queueFlags) open(ctx context.Context, env *environment) (_ *queueRuntime, err error) {
	// The error returns give nil, so the deferred close needs its own
	// reference to what was opened so far.
	rt := &queueRuntime{fatal: make(chan error, 1)}
	defer func() {
		if err != nil {
			rt.close()
		}
	}()
	if *qf.threads < 0 {
		return nil, usageError(fmt.Errorf("--threads must be at least 1, got %d", *qf.threads))
	}
	var lanes []captchaq.ProviderConfig
	if qf.providers.path != "" {
		if lanes, err = loadProviders(env, qf.providers.path); err != nil {
			return nil, err
		}
	}

	useSim := *qf.useSim && lanes == nil
	if !useSim && lanes == nil && offline(env, *qf.apiURL) {
		useSim = true
		fmt.Fprintln(env.stderr, "captchaq: no CAPTCHAAI_KEY set: solving against the built-in simulator (set CAPTCHAAI_KEY to use CaptchaAI)")
	}
	threads, err := planThreads(*qf.threads, *qf.plan, useSim)
	if err != nil {
		return nil, err
	}
	st, err := qf.openStore(ctx, env, rt, useSim)
	if err != nil {
		return nil, err
	}
	rt.store = st
	apiURL := *qf.apiURL
	clientEnv := env
	if useSim {
		if apiURL, err = rt.startSim(env, threads); err != nil {
			return nil, err
		}
		clientEnv = simEnv(env)
	}
	cfg := captchaq.Config{
		Providers:    lanes,
		Store:        st,
		Threads:      threads,
		PollInterval: *qf.pollInterval,
		MaxAttempts:  *qf.maxAttempts,
		OnPause:      rt.onPause(env),
	}
	if lanes == nil {
		if cfg.Provider, err = newProviderClient(clientEnv, apiURL); err != nil {
			return nil, err
		}
	}
	q, err := captchaq.New(cfg)
	if err != nil {
		return nil, err
	}
	if err := q.Start(ctx); err != nil {
		return nil, err
	}
	rt.closers = append(rt.closers, func() { q.Close() })
	rt.queue = q
	if !*qf.patient {
		watch, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { rt.watchReach(watch); close(done) }()
		rt.closers = append(rt.closers, func() { stop(); <-done })
	}
	return rt, nil
}

// openStore opens the store of the flags (or the command's default), and
// has rt close it.
func (qf *queueFlags) openStore(ctx context.Context, env *environment, rt *queueRuntime, useSim bool) (captchaq.Store, error) {
	// Runs against the simulator have a default file of their own, so
	// simulated tokens never mix with real ones.
	name := "captchaq.db"
	if useSim {
		name = "captchaq-sim.db"
	}
	spec := *qf.store
	if spec == "" && qf.defaultStore != nil {
		var err error
		if name, err = qf.defaultStore(useSim); err != nil {
			return nil, err
		}
		if name == "" {
			spec = "memory"
			fmt.Fprintln(env.stderr, "captchaq: tasks from stdin with results to stdout: nothing is kept for a rerun (give --out FILE or --store PATH to keep them)")
		}
	}
	st, err := openStore(ctx, spec, name, "batch")
	if err != nil {
		return nil, err
	}
	rt.storePath = storeFile(st)
	rt.closers = append(rt.closers, func() { st.Close() })
	return st, nil
}

// storeFile is the file st keeps its tasks in: a SQLite store's; "" for
// the memory store and PostgreSQL. The built-in simulator keeps its own
// beside it (startBuiltinSim).
func storeFile(st captchaq.Store) string {
	if p, ok := st.(interface{ Path() string }); ok {
		return p.Path()
	}
	return ""
}

// startSim starts the built-in simulator with threads, has rt close it,
// and returns its URL.
func (rt *queueRuntime) startSim(env *environment, threads int) (string, error) {
	base, stop, err := startBuiltinSim(env, threads, rt.storePath)
	if err != nil {
		return "", err
	}
	rt.closers = append(rt.closers, stop)
	return base, nil
}

// planThreads is the threads of --threads, else of --plan, else, against
// the built-in simulator, the plan it plays (simThreadsDefault); 0 leaves
// them to the queue's default.
func planThreads(threads int, plan string, useSim bool) (int, error) {
	switch {
	case threads != 0:
		return threads, nil
	case plan != "":
		n, err := provider.PlanThreads(plan)
		if err != nil {
			return 0, usageError(fmt.Errorf("--plan: %w", err))
		}
		return n, nil
	case useSim:
		return simThreadsDefault, nil
	}
	return 0, nil
}

// startBuiltinSim starts the built-in simulator with threads on
// loopback and returns its URL and its stop. Beside a store file at
// storePath, the simulator keeps its tasks in a file of its own, so a
// rerun after kill -9 finds at the simulator the ids the store kept, and
// pays for nothing twice.
func startBuiltinSim(env *environment, threads int, storePath string) (string, func(), error) {
	simCfg := sim.Config{Threads: threads, Seed: rand.Uint64()}
	if storePath != "" {
		simCfg.StateFile = storePath + ".sim"
	}
	s, base, err := sim.Start(simCfg, "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("starting the built-in simulator: %w", err)
	}
	return base, func() {
		if err := s.Close(); err != nil {
			fmt.Fprintf(env.stderr, "captchaq: the built-in simulator: %v\n", err)
		}
	}, nil
}

// simEnv is env as a provider client of the built-in simulator sees it:
// its key, and nothing else.
func simEnv(env *environment) *environment {
	return &environment{stdin: env.stdin, stdout: env.stdout, stderr: env.stderr, getenv: func(k string) string {
		if k == envKey {
			return "simulator"
		}
		return ""
	}}
}

// offline reports whether a command that talks to the provider has
// nothing to reach one with: no key, no --api-url, no CAPTCHAAI_URL. It
// then solves against the built-in simulator.
func offline(env *environment, apiURL string) bool {
	return apiURL == "" && env.getenv(envURL) == "" && !haveKey(env)
}

// onPause is the queue's OnPause: a pause that lifts by itself is
// printed; one that does not goes to rt.fatal, for the command to stop
// and say why.
func (rt *queueRuntime) onPause(env *environment) func(err error, permanent bool) {
	return func(err error, permanent bool) {
		if !permanent {
			fmt.Fprintf(env.stderr, "%v\n", err)
			return
		}
		// The command stops and says why; no line here to repeat it.
		select {
		case rt.fatal <- err:
		default:
		}
	}
}

func haveKey(env *environment) bool {
	return env.getenv(envKey) != "" || env.getenv(envKeyFile) != ""
}

// openStore opens the store a flag names: "memory", a PostgreSQL URL
// (postgres://…), a path, or the file defaultName in the default store
// directory.
// owner is recorded in the store, which then refuses other owners.
func openStore(ctx context.Context, spec, defaultName, owner string) (captchaq.Store, error) {
	path, err := storePath(spec, defaultName)
	if err != nil {
		return nil, err
	}
	switch {
	case path == "memory":
		return captchaq.NewMemoryStore(captchaq.MemoryStoreConfig{}), nil
	case postgres.IsURL(path):
		if err := postgres.CheckURL(path); err != nil {
			return nil, usageError(fmt.Errorf("--store: %w", err))
		}
		st, err := postgres.Open(ctx, path, postgres.Config{Owner: owner, Logger: slog.Default()})
		if err != nil {
			return nil, fmt.Errorf("--store: %w", err)
		}
		return st, nil
	}
	st, err := sqlite.Open(ctx, path, sqlite.Config{Owner: owner, Logger: slog.Default()})
	if err != nil {
		return nil, fmt.Errorf("--store: %w", err)
	}
	return st, nil
}

// storePath is the file a --store flag names ("memory" and PostgreSQL
// URLs stay as they are).
func storePath(spec, defaultName string) (string, error) {
	if spec != "" {
		return spec, nil
	}
	path, err := sqlite.DefaultPath()
	if err != nil {
		return "", fmt.Errorf("--store: no default location (%v); name a file with --store PATH", err)
	}
	return filepath.Join(filepath.Dir(path), defaultName), nil
}

// parseInterspersed parses flags that may come before, between or after
// positional arguments, as users of `captchaq batch tasks.jsonl --out r.jsonl`
// expect. Everything after "--" is positional.
func parseInterspersed(fs *flag.FlagSet, args []string) error {
	var positional []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	// Reparse with only the positional arguments left, so fs.Args() is right.
	return parseFlags(fs, append([]string{"--"}, positional...))
}

// storeLabel names a store for logs and messages: a PostgreSQL URL
// without its password, a path as it is.
func storeLabel(spec string) string {
	if postgres.IsURL(spec) {
		return postgres.Redact(spec)
	}
	return spec
}
