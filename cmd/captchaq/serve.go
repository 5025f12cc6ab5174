package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/amqp"
	"github.com/captchaq/captchaq/server"
	"github.com/captchaq/captchaq/store/postgres"
)

func init() {
	commands["serve"] = command{summary: "serve the in.php/res.php front, the JSON API, /metrics and the dashboard", run: runServe}
}

// serveShutdownDefault bounds the wait for accepted tasks on SIGTERM.
const serveShutdownDefault = 30 * time.Second

// The default store files of the two modes: a gateway's records are not a
// local queue's, and each refuses the other's unfinished tasks.
const (
	serveStoreDefault    = "captchaq-serve.db"
	serveSimStoreDefault = "captchaq-serve-sim.db" // against the built-in simulator
	gatewayStoreDefault  = "captchaq-gateway.db"
)

// serveFlags are serve's flags; the local and gateway ones are checked
// against the mode.
type serveFlags struct {
	listen, clients, store, publicURL, plan, apiURL *string
	providers                                       *providersFlag
	threads                                         *int
	pollInterval, shutdown                          *time.Duration
	maxBody                                         *int64
	maxConns, maxConnsPerAddr                       *int

	amqpURL, prefix, gateway, lanes *string
	brokerWait                      *time.Duration
	taskTTL, resyncEvery            *time.Duration
	fairBurst                       *int

	pingbackAllow *string
	pingbackGrace *time.Duration
	metricsListen *string
	metricsTLS    *bool
	replicaName   *string
	maxAttempts   *int
	tls           *tlsFlags
	standby       *bool
	reservoirs    *string

	set  map[string]bool // flags given
	lost <-chan struct{} // closed when the database's active-queue lock is lost
}

// localOnly and gatewayOnly are the flags of one mode.
var (
	localOnly   = []string{"api-url", "threads", "plan", "poll-interval", "public-url", "standby"}
	gatewayOnly = []string{"prefix", "gateway", "lanes", "task-ttl", "fair-burst", "resync-every"}
)

// checkURLs checks serve's URL flags at start, before anything
// connects: --public-url (a scheme-less one made every submit fail),
// --amqp and a PostgreSQL --store.
func (f *serveFlags) checkURLs(gateway bool) error {
	if *f.publicURL != "" {
		if reason := server.CheckPublicURL(*f.publicURL); reason != "" {
			return usageError(fmt.Errorf("--public-url: %s", reason))
		}
	}
	if gateway {
		if err := checkAMQPURL(*f.amqpURL); err != nil {
			return err
		}
	}
	if postgres.IsURL(*f.store) {
		if err := postgres.CheckURL(*f.store); err != nil {
			return usageError(fmt.Errorf("--store: %w", err))
		}
	}
	return nil
}

func runServe(ctx context.Context, env *environment, args []string) error {
	fs := env.flagSet("serve")
	f := serveFlags{
		listen:          fs.String("listen", "127.0.0.1:8080", "address to listen on (loopback by default; give e.g. 0.0.0.0:8080 to serve other machines)"),
		clients:         fs.String("clients", "", `clients file (required): JSON [{"name":"qa","key":"…","weight":2,"max_inflight":50,"rate":20},{"name":"ops","key":"…","admin":true}]`),
		apiURL:          addAPIURLFlag(fs),
		providers:       addProvidersFlag(fs, "api-url", "threads", "plan"),
		store:           fs.String("store", "", "task store: a SQLite file `PATH`, a PostgreSQL database postgres://USER@HOST/DB (password from PGPASSWORD or ~/.pgpass), or \"memory\" (lost on exit) (default: "+serveStoreDefault+", or "+gatewayStoreDefault+" with --amqp, in the user's data directory)"),
		publicURL:       fs.String("public-url", "", "this server's URL as the provider can reach it; enables provider pingbacks at URL/pingback/<secret>"),
		threads:         fs.Int("threads", 0, "plan threads (default: from --plan, else 5)"),
		standby:         fs.Bool("standby", false, "with a PostgreSQL --store that another serve has active: wait, and take over when it stops (one queue solves the tasks of a database)"),
		plan:            fs.String("plan", "", "plan name (BASIC … VIP-3) when --threads is not given"),
		pollInterval:    addPollIntervalFlag(fs),
		maxBody:         fs.Int64("max-body", server.MaxBodyBytesDefault, "largest request body in bytes (images are sent in the body)"),
		maxConns:        fs.Int("max-conns", server.MaxConnsDefault, "connections open at once on --listen; past it a new one is closed at once"),
		maxConnsPerAddr: fs.Int("max-conns-per-address", server.MaxConnsPerAddressDefault, "connections open at once on --listen from one source address (IPv6 by /64); behind a proxy or balancer every connection comes from its address: raise it to what the proxy opens"),
		shutdown:        fs.Duration("shutdown-timeout", serveShutdownDefault, "on SIGTERM, how long to wait for accepted tasks (with --amqp: for results being recorded)"),
		amqpURL:         fs.String("amqp", "", "run as a gateway to the RabbitMQ fleet at `URL` (amqp://user:pass@host:5672/): tasks go to 'captchaq worker' processes, which hold the provider key (default: $"+envAMQPURL+", which keeps the password out of ps; --amqp '' serves locally although it is set)"),
		prefix:          fs.String("prefix", amqp.PrefixDefault, "with --amqp: name prefix of the fleet's queues and exchanges"),
		gateway:         fs.String("gateway", "", "with --amqp: this gateway's `NAME`; results come to PREFIX.replies.NAME, so keep it with the store (default: host name and a hash of the store's path)"),
		brokerWait:      addBrokerWaitFlag(fs),
		lanes:           fs.String("lanes", "", "with --amqp: comma-separated task kinds that have their own queue (as the workers' --lanes)"),
		taskTTL:         fs.Duration("task-ttl", amqp.TaskTTLDefault, "with --amqp: how long a task may wait for a worker before it fails EXPIRED (as the workers' --task-ttl)"),
		fairBurst:       fs.Int("fair-burst", amqp.FairBurstDefault, "with --amqp: unfinished tasks per unit of weight a client may have before its next ones are published one priority level lower (-1: off)"),
		resyncEvery:     fs.Duration("resync-every", amqp.ResyncEveryDefault, "with --amqp and a PostgreSQL --store: how often this replica reads the front's unfinished tasks again, for what a replica that died did not announce (a result it stored, a task it took)"),
		pingbackAllow:   fs.String("pingback-allow", "", "comma-separated `CIDRs` clients' pingbacks may reach although internal (loopback, private, link-local and metadata addresses are refused otherwise), e.g. 10.1.2.0/24 for your own receivers"),
		pingbackGrace:   fs.Duration("pingback-grace", server.PingbackGraceDefault, "how long a client's pingback owed stays with the server that recorded its result before any server on the store sends it (that one died): with a SQLite or PostgreSQL --store"),
		maxAttempts:     fs.Int("max-attempts", 0, fmt.Sprintf("submissions per task before it fails for good, and the most a client's max_attempts may ask for (default %d)", captchaq.MaxAttemptsDefault)),
		metricsListen:   fs.String("metrics-listen", "", "also serve /metrics, without a key, on this operator-only `ADDR` (e.g. 127.0.0.1:9090); on --listen /metrics needs an admin key as Authorization: Bearer"),
		replicaName:     fs.String("replica-name", "", "this server's `NAME` among the replicas of a front: every series of /metrics is labelled replica=NAME (default with --amqp and a PostgreSQL --store: the host name and --listen's port, host:port)"),
		metricsTLS:      fs.Bool("metrics-tls", false, "serve --metrics-listen over TLS too, with the front's certificate (--tls-cert or --tls-self-signed)"),
		tls:             addTLSFlags(fs, "the front (in.php, res.php, the API, the dashboard)"),
		reservoirs:      fs.String("reservoirs", "", `reservoirs file: JSON [{"name":"shop","method":"turnstile","params":{"sitekey":"…","pageurl":"…"},"size":"auto","max":50,"min_life":"75s","clients":["qa"]}]: tokens solved ahead, handed to matching submits at once (docs/reservoirs.md); read again on SIGHUP`),
		set:             map[string]bool{},
	}
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: captchaq serve --clients FILE [--store PATH | --amqp URL] [flags]\n\n"+
			"Serves /in.php and /res.php (the provider's protocol, with the clients' own keys), the JSON API\n"+
			"under /v1/ (Authorization: Bearer KEY), /metrics, /healthz, /readyz and the dashboard at /\n"+
			"(open it and type an admin client's key into its form; a key in the address is refused).\n\n"+
			"Without --amqp the server solves the tasks itself: the provider key comes from "+envKey+" or\n"+
			"the file named by "+envKeyFile+" and never leaves the server.\n"+
			"With --amqp URL it is a gateway to the fleet: each task is published to PREFIX.tasks\n"+
			"(confirmed) before its client hears OK, 'captchaq worker' processes solve it, and the answers\n"+
			"come back to this gateway's own queue PREFIX.replies.NAME; the gateway needs no provider key.\n"+
			"With --tls-cert and --tls-key (or --tls-self-signed) the front speaks https: TLS 1.2 or newer,\n"+
			"HTTP/2 and HTTP/1.1; the certificate is read again on SIGHUP and when its files change.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	if fs.NArg() > 0 {
		return &exitError{code: 2, err: fmt.Errorf("unexpected argument %q; serve takes only flags", fs.Arg(0))}
	}
	// The broker URL holds its password: from the environment it stays
	// out of ps, as for worker and enqueue.
	withAMQP := "with --amqp"
	if !f.set["amqp"] && env.getenv(envAMQPURL) != "" {
		*f.amqpURL = env.getenv(envAMQPURL)
		withAMQP = "with " + envAMQPURL + " set (serve is a gateway then; --amqp '' serves locally)"
	}
	gateway := *f.amqpURL != ""
	for _, name := range localOnly {
		if gateway && f.set[name] {
			return &exitError{code: 2, err: fmt.Errorf("--%s: applies to the local queue; %s the workers solve the tasks (give it to captchaq worker)", name, withAMQP)}
		}
	}
	for _, name := range gatewayOnly {
		if !gateway && f.set[name] {
			return &exitError{code: 2, err: fmt.Errorf("--%s: applies with --amqp only (serve as a gateway to a RabbitMQ fleet)", name)}
		}
	}
	if gateway && *f.reservoirs != "" {
		return &exitError{code: 2, err: fmt.Errorf("--reservoirs: applies to the local queue; %s the gateway has no queue to keep tokens in (serve without --amqp to use reservoirs)", withAMQP)}
	}
	if err := f.checkURLs(gateway); err != nil {
		return err
	}
	// With --amqp the flags --providers replaces are refused above already.
	if err := f.providers.alone(); err != nil {
		return err
	}
	if gateway && *f.fairBurst == 0 {
		return &exitError{code: 2, err: errors.New("--fair-burst 0: give a positive number of tasks per unit of weight, or -1 to turn demotion off")}
	}
	if *f.clients == "" {
		return &exitError{code: 2, err: errors.New("--clients: required: a JSON file of the clients' names and keys")}
	}
	clients, err := server.LoadClients(*f.clients)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	warnShared(env, "--clients file", *f.clients, "it holds every client's key, the admin's too")
	allow, err := parsePrefixes(*f.pingbackAllow)
	if err != nil {
		return &exitError{code: 2, err: fmt.Errorf("--pingback-allow: %v", err)}
	}
	var rcs []captchaq.ReservoirConfig
	if *f.reservoirs != "" {
		if rcs, err = server.LoadReservoirs(*f.reservoirs, clients); err != nil {
			return &exitError{code: 2, err: fmt.Errorf("--reservoirs: %w", err)}
		}
	}
	log := slog.New(slog.NewTextHandler(env.stderr, nil))
	if *f.metricsTLS && (*f.metricsListen == "" || !f.tls.on()) {
		return &exitError{code: 2, err: errors.New("--metrics-tls: give it with --metrics-listen and the front's TLS (--tls-cert and --tls-key, or --tls-self-signed)")}
	}
	tlsCfg, err := f.tls.config(ctx, env, *f.listen, log)
	if err != nil {
		return err
	}
	var (
		cfg   server.Config
		attrs []any
		stop  func()
	)
	if gateway {
		cfg, attrs, stop, err = f.gatewayBackend(ctx, log)
	} else {
		cfg, attrs, stop, err = f.localBackend(ctx, env, log)
	}
	if err != nil {
		return err
	}
	defer stop()
	cfg.Clients, cfg.MaxBodyBytes, cfg.Logger = clients, *f.maxBody, log
	cfg.MaxConns, cfg.MaxConnsPerAddress = *f.maxConns, *f.maxConnsPerAddr
	cfg.PingbackAllow, cfg.PingbackGrace = allow, *f.pingbackGrace
	cfg.MaxAttempts, cfg.Queue.MaxAttempts = *f.maxAttempts, *f.maxAttempts
	cfg.Queue.Reservoirs = rcs
	if cfg.Backend != nil {
		cfg.Queue.MaxAttempts = 0 // the workers' business
	}
	// Listening first: a replica's default name holds its port.
	ln, err := net.Listen("tcp", *f.listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", *f.listen, err)
	}
	defer ln.Close()
	cfg.Replica = *f.replicaName
	if cfg.Replica == "" && gateway && postgres.IsURL(*f.store) {
		cfg.Replica = replicaName(ln.Addr())
	}
	if cfg.Replica != "" {
		attrs = append(attrs, "replica", cfg.Replica)
	}
	srv, err := server.New(cfg)
	if err != nil {
		if len(rcs) > 0 && strings.Contains(err.Error(), "Reservoirs[") {
			err = fmt.Errorf("%w (Reservoirs[N] is entry [N] of --reservoirs %s)", err, *f.reservoirs)
		}
		return &exitError{code: 2, err: err}
	}
	if err := srv.Start(ctx); err != nil {
		return err
	}
	if *f.reservoirs != "" {
		reloadReservoirsOnHangup(ctx, srv, *f.reservoirs, clients, log)
	}
	ln = srv.Listener(ln) // the connection caps
	hs := newHTTPServer(srv.Handler())
	errc := make(chan error, 2)
	go func() { errc <- serveHTTP(hs, ln, tlsCfg) }()
	if *f.metricsListen != "" {
		mln, err := net.Listen("tcp", *f.metricsListen)
		if err != nil {
			hs.Close()
			srv.Shutdown(context.Background())
			return fmt.Errorf("--metrics-listen %s: %w", *f.metricsListen, err)
		}
		if !onLoopback(mln.Addr()) {
			log.Warn(metricsExposed, "addr", mln.Addr().String())
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", srv.MetricsHandler())
		ms := newHTTPServer(mux)
		mtls := tlsCfg
		if !*f.metricsTLS {
			mtls = nil
		}
		go func() { errc <- serveHTTP(ms, mln, mtls) }()
		defer ms.Close()
		log.Info("serving metrics", "addr", mln.Addr().String(), "url", listenURL(mln, mtls)+"/metrics")
	}
	log.Info("serving", append([]any{"addr", ln.Addr().String(), "url", listenURL(ln, tlsCfg), "clients", len(clients)}, attrs...)...)
	select {
	case err := <-errc:
		srv.Shutdown(context.Background())
		return err
	case <-f.lost:
		// A standby may be the active queue now: stop at once, the tasks
		// stay in the database for it.
		log.Error("lost the database's active-queue lock (its connection failed); stopping so that one queue stays active: start this server again, with --standby to wait for its turn")
		hs.Close()
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(sctx)
		return &exitError{code: 1, err: errors.New("lost the database's active-queue lock")}
	case <-ctx.Done():
	}
	log.Info("shutting down", "deadline", *f.shutdown)
	sctx, cancel := context.WithTimeout(context.Background(), *f.shutdown)
	defer cancel()
	herr := hs.Shutdown(sctx)
	qerr := srv.Shutdown(sctx)
	if errors.Is(qerr, context.DeadlineExceeded) {
		log.Warn("shutdown deadline passed: unfinished tasks stay in the store for the next start")
		qerr = nil
	}
	return errors.Join(herr, qerr)
}

// newHTTPServer sets the timeouts; event streams and long polls lift the
// write deadline per request.
func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
}

// serveHTTP serves hs on ln, over TLS with tlsCfg when it is not nil
// (HTTP/2 and HTTP/1.1).
func serveHTTP(hs *http.Server, ln net.Listener, tlsCfg *tls.Config) error {
	if tlsCfg == nil {
		return hs.Serve(ln)
	}
	hs.TLSConfig = tlsCfg
	return hs.ServeTLS(ln, "", "")
}

// listenURL is the base URL of a listener.
func listenURL(ln net.Listener, tlsCfg *tls.Config) string {
	if tlsCfg != nil {
		return "https://" + ln.Addr().String()
	}
	return "http://" + ln.Addr().String()
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// parsePrefixes reads a comma-separated list of CIDRs (a bare address is
// taken as a single-address prefix).
func parsePrefixes(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if a, err := netip.ParseAddr(f); err == nil {
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not an address or CIDR such as 10.1.2.0/24", f)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// workerMetricsExposed warns of a worker's --metrics-addr off loopback.
const workerMetricsExposed = "--metrics-addr is not on loopback: anyone who reaches it reads /metrics, the fleet's threads, providers and spend, without a key; listen on 127.0.0.1 (or ::1), or firewall it"

// metricsExposed warns of a --metrics-listen off loopback.
const metricsExposed = "--metrics-listen is not on loopback: anyone who reaches it reads /metrics, every client's name and numbers, without a key; listen on 127.0.0.1 (or ::1), or firewall it"

// onLoopback says whether a listener's address is a loopback one.
func onLoopback(a net.Addr) bool {
	ap, err := netip.ParseAddrPort(a.String())
	return err == nil && ap.Addr().Unmap().IsLoopback()
}
