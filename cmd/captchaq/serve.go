package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/server"
)

func init() {
	commands["serve"] = command{summary: "serve the in.php/res.php front, the JSON API, /metrics and the dashboard", run: runServe}
}

// serveShutdownDefault bounds the wait for accepted tasks on SIGTERM.
const serveShutdownDefault = 30 * time.Second

func runServe(ctx context.Context, env *environment, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	listen := fs.String("listen", "127.0.0.1:8080", "address to listen on (loopback by default; give e.g. 0.0.0.0:8080 to serve other machines)")
	clientsPath := fs.String("clients", "", `clients file (required): JSON [{"name":"qa","key":"…","weight":2,"max_inflight":50,"rate":20},{"name":"ops","key":"…","admin":true}]`)
	apiURL := addAPIURLFlag(fs)
	storePath := fs.String("store", "", "task store: a SQLite file `PATH`, or \"memory\" (lost on exit) (default: captchaq-serve.db in the user's data directory)")
	amqpURL := fs.String("amqp", "", "not supported by serve yet: use --store; the RabbitMQ fleet is 'captchaq worker'/'enqueue'")
	publicURL := fs.String("public-url", "", "this server's URL as the provider can reach it; enables provider pingbacks at URL/pingback/<secret>")
	threads := fs.Int("threads", 0, "plan threads (default: from --plan, else 5)")
	plan := fs.String("plan", "", "plan name (BASIC … VIP-3) when --threads is not given")
	pollInterval := fs.Duration("poll-interval", captchaq.PollIntervalDefault, "shortest time between two polls of a task")
	maxBody := fs.Int64("max-body", server.MaxBodyBytesDefault, "largest request body in bytes (images are sent in the body)")
	shutdown := fs.Duration("shutdown-timeout", serveShutdownDefault, "on SIGTERM, how long to wait for accepted tasks")
	fs.Usage = func() {
		fmt.Fprintln(env.stderr, "usage: captchaq serve --clients FILE [flags]\n\n"+
			"Serves /in.php and /res.php (the provider's protocol, with the clients' own keys), the JSON API\n"+
			"under /v1/ (Authorization: Bearer KEY), /metrics, /healthz, /readyz and the dashboard at /\n"+
			"(open it with an admin client's key: /?key=KEY or type it once).\n"+
			"The provider key comes from "+envKey+" or the file named by "+envKeyFile+" and never leaves the server.\n"+
			"--amqp is not supported here yet: serve runs on memory or --store.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &exitError{code: 2, err: err}
	}
	if *amqpURL != "" {
		return &exitError{code: 2, err: errors.New("--amqp: serve does not run on RabbitMQ yet; use --store PATH (SQLite) or memory")}
	}
	if *clientsPath == "" {
		return &exitError{code: 2, err: errors.New("--clients: required: a JSON file of the clients' names and keys")}
	}
	clients, err := server.LoadClients(*clientsPath)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	pc, err := newProviderClient(env, *apiURL)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	log := slog.New(slog.NewTextHandler(env.stderr, nil))
	store, err := openStore(ctx, *storePath, "captchaq-serve.db")
	if err != nil {
		return err
	}
	defer store.Close()
	srv, err := server.New(server.Config{
		Queue: captchaq.Config{
			Provider: pc, Store: store, Threads: *threads, Plan: *plan, PollInterval: *pollInterval, Logger: log,
		},
		Clients: clients, PublicURL: *publicURL, MaxBodyBytes: *maxBody,
		Balance: pc.Balance,
	})
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if err := srv.Start(ctx); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		srv.Shutdown(context.Background())
		return fmt.Errorf("--listen %s: %w", *listen, err)
	}
	hs := newHTTPServer(srv.Handler())
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	log.Info("serving", "addr", ln.Addr().String(), "clients", len(clients), "store", cmpOr(*storePath, "default"))
	select {
	case err := <-errc:
		srv.Shutdown(context.Background())
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down", "deadline", *shutdown)
	sctx, cancel := context.WithTimeout(context.Background(), *shutdown)
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

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
