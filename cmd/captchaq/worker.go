package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/amqp"
	"github.com/captchaq/captchaq/internal/reportfwd"
)

func init() {
	commands["worker"] = command{summary: "solve tasks from RabbitMQ; many workers share one key's threads", run: runWorker}
}

func runWorker(ctx context.Context, env *environment, args []string) error {
	fs := env.flagSet("worker")
	var af amqpFlags
	af.register(fs, env.getenv)
	apiURL := addAPIURLFlag(fs)
	threads := fs.Int("threads", 0, "the plan's thread count, shared by every worker on the key (default from --plan, else 5)")
	plan := fs.String("plan", "", "the plan's name (BASIC … VIP-3), when --threads is not given")
	poll := addPollIntervalFlag(fs)
	prefetch := fs.Int("prefetch", 0, "task deliveries held at once (default threads + 4)")
	grace := fs.Duration("grace", amqp.GraceDefault, "on SIGTERM, how long tasks at the provider may take to finish")
	metricsAddr := fs.String("metrics-addr", "", "serve Prometheus /metrics on this address, e.g. 127.0.0.1:9464")
	metricsTLS := addTLSFlags(fs, "/metrics (--metrics-addr)")
	lanes := fs.String("lanes", "", "comma-separated task kinds that have their own queue (must match enqueue's)")
	taskTTL := fs.Duration("task-ttl", amqp.TaskTTLDefault, "how long a task may wait in the broker before it is dead-lettered (must match enqueue's)")
	lease := fs.Duration("inflight-lease", amqp.InflightLeaseDefault, "how long a checkpoint may wait unreceived before it goes to the fleet (a dead worker's held checkpoints go at once)")
	owner := fs.String("owner", "", "name of this worker's checkpoint queue (default host-pid-random)")
	shared := fs.Bool("shared-threads", true, "share --threads with every worker on the prefix through a pool of thread tokens on the broker (give every worker the same --threads); false: each worker uses --threads on its own")
	verbose := fs.Bool("v", false, "log every task")
	brokerWait := addBrokerWaitFlag(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: captchaq worker --amqp URL [--threads N | --plan NAME] [--api-url URL | --providers FILE] [flags]")
		fmt.Fprintln(fs.Output(), "\nSolves tasks from RabbitMQ until SIGTERM; run one per machine. The workers on a prefix share the\nplan's --threads (or each provider's, with --providers) through the broker. The key comes from\n"+envKey+" or the file named by "+envKeyFile+".\n\nflags:")
		fs.PrintDefaults()
	}
	providers := addProvidersFlag(fs, "api-url", "threads", "plan")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := providers.alone(); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return &exitError{code: 2, err: fmt.Errorf("unexpected argument %q; the worker takes only flags", fs.Arg(0))}
	}
	cfg, err := af.config()
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	cfg.StartWait = *brokerWait
	if *lanes != "" {
		cfg.Lanes = strings.Split(*lanes, ",")
	}
	cfg.TaskTTL, cfg.InflightLease = *taskTTL, *lease
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(env.stderr, &slog.HandlerOptions{Level: level}))
	cfg.Logger = log
	qc := captchaq.Config{Threads: *threads, Plan: *plan, PollInterval: *poll, Logger: log}
	var client captchaq.BalanceChecker // the one whose balance the beats carry
	if providers.path != "" {
		lanes, err := loadProviders(env, providers.path)
		if err != nil {
			return err
		}
		if err := checkAccounts(ctx, lanes, log); err != nil {
			return err
		}
		qc.Providers = lanes
		// getbalance through a gateway answers the first (preferred)
		// provider's balance, as serve does.
		client, _ = lanes[0].Provider.(captchaq.BalanceChecker)
	} else {
		pc, err := newProviderClient(env, *apiURL)
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		if err := checkAccount(ctx, pc, func(err error) {
			log.Warn("cannot check the provider account now; starting anyway", "err", err)
		}); err != nil {
			return err
		}
		qc.Provider, client = pc, pc
	}
	var balance func(context.Context) (float64, error)
	if client != nil {
		balance = client.Balance
	}
	c, err := amqp.Dial(ctx, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	w, err := amqp.NewWorker(c, amqp.WorkerConfig{
		Queue: qc, Owner: *owner, Prefetch: *prefetch, Grace: *grace, Logger: log,
		Balance: balance, Report: reportfwd.New(qc).Forward, SharedThreads: *shared,
	})
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if *metricsAddr == "" && metricsTLS.on() {
		return &exitError{code: 2, err: errors.New("--tls-cert, --tls-key, --tls-self-signed: they serve --metrics-addr: give that too")}
	}
	if *metricsAddr != "" {
		ln, err := net.Listen("tcp", *metricsAddr)
		if err != nil {
			return fmt.Errorf("--metrics-addr %s: %w", *metricsAddr, err)
		}
		if !onLoopback(ln.Addr()) {
			log.Warn(workerMetricsExposed, "addr", ln.Addr().String())
		}
		tlsCfg, err := metricsTLS.config(ctx, env, *metricsAddr, log)
		if err != nil {
			ln.Close()
			return err
		}
		srv := &http.Server{Handler: metricsHandler(w), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := serveHTTP(srv, ln, tlsCfg); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics server", "err", err)
			}
		}()
		log.Info("serving metrics", "addr", ln.Addr().String(), "url", listenURL(ln, tlsCfg)+"/metrics")
		defer srv.Close()
	}
	if err := w.Run(ctx); err != nil {
		// Its --providers (or their absence) disagree with the fleet's.
		var rc *amqp.RoutingConflictError
		if errors.As(err, &rc) {
			return usageError(err)
		}
		return err
	}
	return nil
}
