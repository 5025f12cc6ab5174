package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/amqp"
	"github.com/captchaq/captchaq/internal/reportfwd"
	"github.com/captchaq/captchaq/server"
	"github.com/captchaq/captchaq/store/postgres"
)

// localBackend opens the store and the provider client for a server that
// solves tasks itself.
func (f *serveFlags) localBackend(ctx context.Context, env *environment, log *slog.Logger) (server.Config, []any, func(), error) {
	qc := captchaq.Config{Threads: *f.threads, Plan: *f.plan, PollInterval: *f.pollInterval, Logger: log}
	var pc captchaq.BalanceChecker // getbalance's account
	if f.providers.path != "" {
		lanes, err := loadProviders(env, f.providers.path)
		if err != nil {
			return server.Config{}, nil, nil, err
		}
		if err := checkAccounts(ctx, lanes, log); err != nil {
			return server.Config{}, nil, nil, err
		}
		qc.Providers, qc.Threads = lanes, 0
		// getbalance answers the first (preferred) provider's balance.
		pc, _ = lanes[0].Provider.(captchaq.BalanceChecker)
	}
	// Without a key, --api-url or CAPTCHAAI_URL, serve solves against the
	// built-in simulator, as batch does, in a store of its own, so
	// simulated tokens never mix with real ones.
	useSim := f.providers.path == "" && offline(env, *f.apiURL)
	storeDefault := serveStoreDefault
	if useSim {
		storeDefault = serveSimStoreDefault
	}
	path, err := storePath(*f.store, storeDefault)
	if err != nil {
		return server.Config{}, nil, nil, err
	}
	store, err := openStore(ctx, path, storeDefault, "serve")
	if err != nil {
		return server.Config{}, nil, nil, err
	}
	stopSim := func() {}
	if f.providers.path == "" {
		apiURL, clientEnv := *f.apiURL, env
		if useSim {
			if qc.Threads, err = planThreads(*f.threads, *f.plan, true); err != nil {
				store.Close()
				return server.Config{}, nil, nil, err
			}
			if apiURL, stopSim, err = startBuiltinSim(env, qc.Threads, storeFile(store)); err != nil {
				store.Close()
				return server.Config{}, nil, nil, err
			}
			clientEnv = simEnv(env)
			log.Warn("no " + envKey + " set: solving against the built-in simulator (set " + envKey + " to use CaptchaAI, or --api-url for another provider)")
		}
		client, err := newProviderClient(clientEnv, apiURL)
		if err != nil {
			store.Close()
			stopSim()
			return server.Config{}, nil, nil, &exitError{code: 2, err: err}
		}
		if err := checkAccount(ctx, client, func(err error) {
			log.Warn("cannot check the provider account now; starting anyway", "err", err)
		}); err != nil {
			store.Close()
			stopSim()
			return server.Config{}, nil, nil, err
		}
		qc.Provider, pc = client, client
	}
	release := func() {}
	if pg, ok := store.(*postgres.Store); ok {
		// One active queue per database: the plan's threads are one.
		if *f.standby {
			log.Info("standby: waiting for the active queue of the database to stop", "store", pg.Name())
		}
		active, err := pg.Activate(ctx, *f.standby)
		if err != nil {
			store.Close()
			stopSim()
			return server.Config{}, nil, nil, fmt.Errorf("--store: %w", err)
		}
		f.lost, release = active.Lost(), active.Release
	} else if *f.standby {
		store.Close()
		stopSim()
		return server.Config{}, nil, nil, &exitError{code: 2, err: errors.New("--standby: applies to a PostgreSQL --store (postgres://…), which several servers can reach")}
	}
	qc.Store = store
	cfg := server.Config{Queue: qc, PublicURL: *f.publicURL, Report: reportfwd.New(qc).ForwardResult}
	if pc != nil {
		cfg.Balance = pc.Balance
	}
	attrs := []any{"store", storeLabel(path)}
	if useSim {
		attrs = append(attrs, "provider", "built-in simulator")
	}
	return cfg, attrs, func() { release(); store.Close(); stopSim() }, nil
}

// checkAccounts checks each provider's account at start: the service
// stops (exit code 3) only when every provider refuses its key; one that
// refuses is reported and stays out of routing until a probe answers.
func checkAccounts(ctx context.Context, lanes []captchaq.ProviderConfig, log *slog.Logger) error {
	var refused []error
	for _, l := range lanes {
		pc, ok := l.Provider.(captchaq.BalanceChecker)
		if !ok {
			continue
		}
		err := checkAccount(ctx, pc, func(err error) {
			log.Warn("cannot check a provider's account now; starting anyway", "provider", l.Name, "err", err)
		})
		if err != nil {
			log.Error("a provider refused the account; its tasks go to the others", "provider", l.Name, "err", err)
			refused = append(refused, err)
		}
	}
	if len(refused) == len(lanes) {
		return refused[0]
	}
	return nil
}

// gatewayBackend opens the store, connects to the broker and builds the
// gateway; it needs no provider key.
func (f *serveFlags) gatewayBackend(ctx context.Context, log *slog.Logger) (server.Config, []any, func(), error) {
	acfg := amqp.Config{URL: *f.amqpURL, Prefix: *f.prefix, TaskTTL: *f.taskTTL, StartWait: *f.brokerWait, Logger: log}
	if *f.lanes != "" {
		acfg.Lanes = strings.Split(*f.lanes, ",")
	}
	path, err := storePath(*f.store, gatewayStoreDefault)
	if err != nil {
		return server.Config{}, nil, nil, err
	}
	name := *f.gateway
	if name == "" && path != "memory" {
		if name, err = amqp.GatewayNameFor(storeLabel(path)); err != nil {
			return server.Config{}, nil, nil, err
		}
	}
	var store captchaq.Store
	var front *postgres.Store
	if postgres.IsURL(path) {
		// Replicas of one front: every gateway on the database is one,
		// under the name the first recorded.
		front, name, err = openFront(ctx, path, name, *f.gateway != "")
		store = front
	} else {
		store, err = openStore(ctx, path, gatewayStoreDefault, "gateway "+name)
	}
	if err != nil {
		return server.Config{}, nil, nil, err
	}
	c, err := amqp.Dial(ctx, acfg)
	if err != nil {
		store.Close()
		return server.Config{}, nil, nil, err
	}
	stop := func() {
		c.Close()
		store.Close()
	}
	var providers []captchaq.ProviderConfig
	if f.providers.path != "" {
		// The workers' file: the gateway takes the types any of its
		// providers solves, and reads no key.
		if providers, err = loadProvidersWithoutKeys(f.providers.path); err != nil {
			stop()
			return server.Config{}, nil, nil, err
		}
	}
	gw, err := amqp.NewGateway(c, amqp.GatewayConfig{Store: store, Name: name, FairBurst: *f.fairBurst, ResyncEvery: *f.resyncEvery, Providers: providers, Logger: log})
	if err != nil {
		stop()
		return server.Config{}, nil, nil, &exitError{code: 2, err: fmt.Errorf("--gateway: %w", err)}
	}
	if front != nil {
		// The other replicas' tasks and results, as they store them.
		err := front.Watch(func(e postgres.Event) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			switch e.Kind {
			case postgres.EventAccepted:
				gw.OtherAccepted(ctx, e.ID)
			case postgres.EventFinished:
				gw.OtherFinished(ctx, e.ID)
			case postgres.EventResync:
				if err := gw.Resync(ctx); err != nil {
					log.Warn("reading the front's unfinished tasks again failed", "err", err)
				}
			}
		})
		if err != nil {
			stop()
			return server.Config{}, nil, nil, err
		}
	}
	attrs := []any{"mode", "gateway", "gateway", gw.Name(), "reply_queue", gw.ReplyQueue(), "store", storeLabel(path)}
	// getbalance: the freshest balance a worker read (at most about a
	// minute old; see amqp.BalanceEveryDefault).
	ledger, _ := store.(captchaq.PingbackLedger)
	return server.Config{Backend: gw, Balance: gw.Balance, Report: gw.Report, PingbackLedger: ledger}, attrs, stop, nil
}

// replicaName is a replica's default name: the host name and the port
// it listens on.
func replicaName(addr net.Addr) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	port := ""
	if ta, ok := addr.(*net.TCPAddr); ok {
		port = strconv.Itoa(ta.Port)
	}
	return net.JoinHostPort(host, port)
}

// openFront opens a gateway's PostgreSQL store, shared with the other
// replicas of the front, and returns it with the front's name: the one
// the database records ("gateway NAME"), recorded now as name when none
// is. A name given with --gateway (explicit) must be the recorded one.
func openFront(ctx context.Context, url, name string, explicit bool) (*postgres.Store, string, error) {
	st, err := postgres.Open(ctx, url, postgres.Config{Notify: true, Logger: slog.Default()})
	if err != nil {
		return nil, "", fmt.Errorf("--store: %w", err)
	}
	have, err := st.ClaimOwner(ctx, "gateway "+name)
	if err != nil {
		st.Close()
		return nil, "", fmt.Errorf("--store: %w", err)
	}
	recorded, ok := strings.CutPrefix(have, "gateway ")
	switch {
	case !ok:
		st.Close()
		return nil, "", fmt.Errorf("--store: %w", &postgres.OwnerError{Name: st.Name(), Owner: have, Want: "gateway " + name})
	case explicit && recorded != name:
		st.Close()
		return nil, "", fmt.Errorf("--gateway %s: the database %s is the store of the front %q: give --gateway %s, or leave --gateway out", name, st.Name(), recorded, recorded)
	}
	return st, recorded, nil
}
