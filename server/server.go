package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/promq"
)

// Server serves the front, the API, metrics and the dashboard for one
// Backend: a Queue it builds and owns, or Config.Backend. Create it with
// New, call Start, serve Handler, end with Shutdown.
//
// It is a composition: deps are the wiring every side reads; front
// serves in.php, res.php and createTask, api the /v1 tasks and dead
// letters and events; the clients' limits and counts are the
// clientBook's, the ids the idMaker's, the reservoirs the reservoirBook's.
type Server struct {
	deps
	front   *frontSide
	api     *apiSide
	conns   *connMetrics
	started atomic.Bool
	paused  atomic.Bool // a permanent account error

	pingbacks  *pingbackSender
	metrics    *httpMetrics
	registry   *prometheus.Registry
	pbPath     string // the provider pingback's secret path
	history    *history
	reservoirs *reservoirBook
	handler    http.Handler
}

// deps are what every side of the server reads, set in New.
type deps struct {
	cfg     Config
	log     *slog.Logger
	backend Backend
	local   *localBackend // nil with Config.Backend
	clients *clientBook
	ids     *idMaker
	events  *broker
	reports *reportTally // what came of clients' reports
	// budget bounds the request bodies being read; streams and waits
	// count open event streams and long polls, against the Config caps.
	budget         *bodyBudget
	streams, waits *gauge
	started        *atomic.Bool // Start has returned
}

// New builds the Queue from cfg.Queue (not started), or attaches to
// cfg.Backend, and the server around it.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Server{conns: newConnMetrics(), reservoirs: &reservoirBook{}}
	s.deps = deps{
		cfg: cfg, log: cfg.Logger, clients: newClientBook(cfg), events: newBroker(), budget: newBodyBudget(cfg),
		streams: new(gauge), waits: new(gauge), started: &s.started, reports: newReportTally(),
	}
	if err := s.attach(); err != nil {
		return nil, err
	}
	s.ids = newIDMaker(s.backend, s.idSource())
	_, reportsLater := s.backend.(ReportOutcomer)
	s.front = &frontSide{deps: s.deps, bal: balanceCache{read: cfg.Balance}, reportsLater: reportsLater}
	s.api = &apiSide{deps: s.deps}
	ledger := cfg.PingbackLedger
	if ledger == nil && s.local != nil {
		ledger, _ = s.local.store.(captchaq.PingbackLedger)
	}
	s.pingbacks = newPingbackSender(pingbackParams{
		timeout: cfg.PingbackTimeout, attempts: cfg.PingbackAttempts, parallel: cfg.PingbackParallel, allow: cfg.PingbackAllow, log: s.log,
		ledger: ledger, grace: cfg.PingbackGrace, store: s.backend,
	})
	s.registry = prometheus.NewRegistry()
	var reg prometheus.Registerer = s.registry
	if cfg.Replica != "" {
		reg = prometheus.WrapRegistererWith(prometheus.Labels{"replica": cfg.Replica}, s.registry)
	}
	s.metrics = newHTTPMetrics()
	s.front.metrics = s.metrics
	reg.MustRegister(promq.NewCollector(s.backend), newClientCollector(s), s.metrics, s.pingbacks.metrics, s.metrics.reports, s.reports.outcomes)
	reg.MustRegister(s.budget.collectors()...)
	if s.local != nil {
		reg.MustRegister(newReservoirCollector(s.local.queue))
	}
	reg.MustRegister(s.conns.collectors()...)
	if qd, ok := s.backend.(QueueDepther); ok {
		reg.MustRegister(newBrokerCollector(qd))
	}
	s.history = newHistory(cfg.HistoryEvery, cfg.HistoryWindow, s.readSample)
	s.handler = s.routes()
	return s, nil
}

// attach builds the local queue (cfg.Backend nil) and attaches the
// server's callbacks to the Backend.
func (s *Server) attach() error {
	cfg := s.cfg
	s.backend = cfg.Backend
	if s.backend == nil {
		qc := cfg.Queue
		userPause := qc.OnPause
		qc.OnPause = func(err error, permanent bool) {
			if permanent {
				s.paused.Store(true)
			}
			if userPause != nil {
				userPause(err, permanent)
			}
		}
		if cfg.PublicURL != "" {
			secret := make([]byte, 16)
			rand.Read(secret)
			s.pbPath = "/pingback/" + hex.EncodeToString(secret)
			qc.PingbackURL = strings.TrimRight(cfg.PublicURL, "/") + s.pbPath
		}
		s.local = newLocalBackend(qc, cfg.SubmitWait)
		s.backend = s.local
		s.reservoirs.set.Store(&qc.Reservoirs)
	}
	if err := s.backend.Attach(s.clients.weights(), s.result); err != nil {
		return err
	}
	if s.local != nil {
		s.reservoirs.queue = s.local.queue // built by Attach
	}
	if ro, ok := s.backend.(ReportOutcomer); ok {
		if err := ro.AttachReports(s.reportOutcome); err != nil {
			return err
		}
	}
	if rb, ok := s.backend.(Replicated); ok {
		if err := rb.AttachReplicas(s.clients.otherAccepted, s.otherResult); err != nil {
			return err
		}
	}
	if fl, ok := s.backend.(FrontLimiter); ok && fl.Shared() {
		s.clients.front = fl
	}
	return nil
}

// idSource is the Backend's IDSource, or nil.
func (s *Server) idSource() IDSource {
	src, _ := s.backend.(IDSource)
	return src
}

// Queue is the server's own queue; nil when Config.Backend was given.
func (s *Server) Queue() *captchaq.Queue {
	if s.local == nil {
		return nil
	}
	return s.local.queue
}

// Registry is the server's Prometheus registry, served at /metrics.
func (s *Server) Registry() *prometheus.Registry { return s.registry }

// Handler serves every route.
func (s *Server) Handler() http.Handler { return s.handler }

// Start counts the unfinished tasks per client and starts the Backend.
func (s *Server) Start(ctx context.Context) error {
	err := s.backend.Pending(ctx, s.clients.pending)
	if err != nil {
		return fmt.Errorf("server: count pending tasks: %w", err)
	}
	if err := s.backend.Start(ctx); err != nil {
		return err
	}
	s.started.Store(true)
	_ = s.history.Start(context.Background())
	s.pingbacks.start()
	return nil
}

// Shutdown stops the charts' sampling loop (waiting for a sample under
// way) and the pingback sweeper, then the Backend (the local queue waits for accepted tasks
// until ctx is done, see captchaq.Queue.Shutdown; amqp.Gateway stops
// taking results, which wait in its reply queue), then the event streams
// and the pingback calls in progress. Stop the http.Server first.
func (s *Server) Shutdown(ctx context.Context) error {
	s.history.Stop()
	s.pingbacks.stopSweeper()
	err := s.backend.Shutdown(ctx)
	s.events.close()
	s.pingbacks.close(ctx)
	return err
}

// result is the queue's OnResult: counts, events, pingbacks. It runs on
// the queue's goroutines, so the slow parts are handed off.
func (s *Server) result(r captchaq.Result) {
	tenant, local := splitID(r.ID)
	s.clients.finished(tenant, r)
	r = scrubResult(r)
	s.events.publish(tenant, r)
	s.pingbacks.enqueue(s.backend, r, local)
}

// otherResult is a result another replica of the front stored (and sent
// the pingback of): counts and events, no pingback here.
func (s *Server) otherResult(r captchaq.Result) {
	tenant, _ := splitID(r.ID)
	s.clients.finished(tenant, r)
	s.events.publish(tenant, scrubResult(r))
}

// storeID is a client's task id as kept in the Store.
func storeID(client, local string) string { return client + "/" + local }

// splitID parses a Store id into client and the client's own id.
func splitID(id string) (client, local string) {
	c, l, ok := strings.Cut(id, "/")
	if !ok {
		return "", id
	}
	return c, l
}

// submit hands one task to the Backend, waiting at most SubmitWait for
// room.
func (s *deps) submit(ctx context.Context, t captchaq.ValidTask) error {
	return s.submitBatch(ctx, []captchaq.ValidTask{t})[0]
}

// backendSubmitTimeout bounds a submit to a Config.Backend. Its submit is
// work, not a wait for room (a gateway publishes each task, waits for the
// broker's confirm and records it), so SubmitWait does not apply: cut
// short, a task may be published and then refused to its client, its
// result dropped as unknown. This bound fires only on a stuck broker or
// store.
const backendSubmitTimeout = 30 * time.Second

// submitBatch hands tasks to the Backend together (in one call when it is
// a BatchSubmitter), waiting at most SubmitWait for room in the server's
// own queue (backendSubmitTimeout for a Config.Backend), and returns each
// task's error.
func (s *deps) submitBatch(ctx context.Context, tasks []captchaq.ValidTask) []error {
	wait := s.cfg.SubmitWait
	if s.local == nil {
		wait = backendSubmitTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if bs, ok := s.backend.(BatchSubmitter); ok {
		return bs.SubmitBatch(ctx, tasks)
	}
	errs := make([]error, len(tasks))
	for i, t := range tasks {
		errs[i] = s.backend.Submit(ctx, t)
	}
	return errs
}
