package server

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"golang.org/x/sync/singleflight"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/promq"
)

// Server serves the front, the API, metrics and the dashboard for one
// Backend: a Queue it builds and owns, or Config.Backend. Create it with
// New, call Start, serve Handler, end with Shutdown.
type Server struct {
	cfg     Config
	log     *slog.Logger
	backend Backend
	local   *localBackend           // nil with Config.Backend
	clients map[string]*clientState // by key
	byName  map[string]*clientState
	// budget bounds the request bodies being read; streams and waits
	// count open event streams and long polls, against the Config caps.
	budget         *bodyBudget
	conns          *connMetrics
	streams, waits gauge

	ids      atomic.Uint64 // the last counter of a numeric id handed out
	idMu     sync.Mutex
	idSource IDSource     // nil: ids from the clock (ids); guarded by idMu
	front    FrontLimiter // nil: max_inflight and rate are counted here alone
	// newIDs are the store ids of front tasks whose ids came from the
	// IDSource, from newFrontTask to acceptFront (NewSubmitter).
	newIDs    sync.Map
	idNext    uint64  // with idSource: the next id of the block taken
	idEnd     uint64  // and the end of that block
	localIDs  *idPerm // the clock counter's permutation (idperm.go)
	sharedIDs *idPerm // the IDSource's, with its key; guarded by idMu
	events    *broker
	pingbacks *pingbackSender
	metrics   *httpMetrics
	reports   *reportTally // what came of clients' reports
	// reportsLater: the Backend answers reports' outcomes (ReportOutcomer).
	reportsLater bool
	registry     *prometheus.Registry
	pbPath       string // the provider pingback's secret path
	history      *history
	// reservoirs are the local queue's, as last set (GET /v1/reservoirs).
	reservoirs atomic.Pointer[[]captchaq.ReservoirConfig]

	started atomic.Bool
	paused  atomic.Bool // a permanent account error

	balMu    sync.Mutex
	balReads singleflight.Group
	balAt    time.Time
	balVal   float64
	handler  http.Handler
}

// clientState is one client with its limits and live counts.
type clientState struct {
	Client
	limiter *rate.Limiter

	streams, waits gauge // open event streams and long polls
	// bodyShare is the client's own share of the bodies being read
	// (Config.MaxBodyPerClient): no other client's bytes take it.
	bodyShare gauge
	// replays is the replay running (at most one); replayRate spaces
	// their starts by Config.ReplayEvery.
	replays    gauge
	replayRate *rate.Limiter

	mu       sync.Mutex
	inflight map[string]struct{} // unfinished task ids (store ids)
	solved   int64
	failed   int64
	accepted int64
}

// New builds the Queue from cfg.Queue (not started), or attaches to
// cfg.Backend, and the server around it.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Server{
		cfg: cfg, log: cfg.Logger,
		clients: map[string]*clientState{}, byName: map[string]*clientState{},
		events: newBroker(), budget: newBodyBudget(cfg), conns: newConnMetrics(),
	}
	weights := map[string]int{}
	for _, c := range cfg.Clients {
		cs := &clientState{Client: c, inflight: map[string]struct{}{}, replayRate: rate.NewLimiter(rate.Every(cfg.ReplayEvery), 1)}
		if c.Rate > 0 {
			cs.limiter = rate.NewLimiter(rate.Limit(c.Rate), max(1, int(c.Rate)))
		}
		s.clients[c.Key] = cs
		s.byName[c.Name] = cs
		weights[c.Name] = max(c.Weight, 1)
	}
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
		s.reservoirs.Store(&qc.Reservoirs)
	}
	if err := s.backend.Attach(weights, s.result); err != nil {
		return nil, err
	}
	s.reports = newReportTally()
	if ro, ok := s.backend.(ReportOutcomer); ok {
		if err := ro.AttachReports(s.reportOutcome); err != nil {
			return nil, err
		}
		s.reportsLater = true
	}
	if rb, ok := s.backend.(Replicated); ok {
		if err := rb.AttachReplicas(s.otherAccepted, s.otherResult); err != nil {
			return nil, err
		}
	}
	s.idSource, _ = s.backend.(IDSource)
	if fl, ok := s.backend.(FrontLimiter); ok && fl.Shared() {
		s.front = fl
	}
	// The numeric ids' counter starts at the clock in microseconds, under a
	// key drawn here; an id that names a stored task is skipped (freshID).
	s.ids.Store(uint64(time.Now().UnixMicro()))
	s.localIDs = randomIDPerm()
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
	err := s.backend.Pending(ctx, func(r captchaq.Record) error {
		if cs := s.byName[r.Task.Tenant]; cs != nil {
			cs.mu.Lock()
			cs.inflight[r.Task.ID] = struct{}{}
			cs.mu.Unlock()
		}
		return nil
	})
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
	cs := s.byName[tenant]
	if cs != nil {
		cs.mu.Lock()
		delete(cs.inflight, r.ID)
		if r.Status == captchaq.StatusSolved {
			cs.solved++
		} else {
			cs.failed++
		}
		cs.mu.Unlock()
	}
	r = scrubResult(r)
	s.events.publish(tenant, r)
	s.pingbacks.enqueue(s.backend, r, local)
}

// otherAccepted counts a task another replica of the front accepted among
// its client's unfinished tasks (its max_inflight and rate are the
// front's, FrontLimiter).
func (s *Server) otherAccepted(rec captchaq.Record) {
	cs := s.byName[rec.Task.Tenant]
	if cs == nil {
		return
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if _, known := cs.inflight[rec.Task.ID]; known {
		return
	}
	if !rec.Status.Final() {
		// Not when it is final already: its result was told first, and
		// nothing would take it out again.
		cs.inflight[rec.Task.ID] = struct{}{}
	}
	cs.accepted++
}

// otherResult is a result another replica of the front stored (and sent
// the pingback of): counts and events, no pingback here.
func (s *Server) otherResult(r captchaq.Result) {
	tenant, _ := splitID(r.ID)
	if cs := s.byName[tenant]; cs != nil {
		cs.mu.Lock()
		delete(cs.inflight, r.ID)
		if r.Status == captchaq.StatusSolved {
			cs.solved++
		} else {
			cs.failed++
		}
		cs.mu.Unlock()
	}
	s.events.publish(tenant, scrubResult(r))
}

// newID hands out a numeric id: from the clock, or from the blocks of the
// Backend's IDSource (shared: no process on the front handed it out
// before), each counter permuted (idperm.go says why).
func (s *Server) newID(ctx context.Context) (id string, shared bool, err error) {
	s.idMu.Lock()
	defer s.idMu.Unlock()
	if s.idSource == nil {
		return s.localID(), false, nil
	}
	if s.idNext >= s.idEnd {
		first, n, err := s.idSource.IDBlock(ctx)
		if err != nil {
			return "", false, err
		}
		if n == 0 {
			s.idSource = nil // no shared ids: the clock's
			return s.localID(), false, nil
		}
		if s.sharedIDs == nil {
			key, err := s.idSource.IDKey(ctx)
			if err != nil {
				return "", false, err
			}
			if s.sharedIDs, err = newIDPerm(key); err != nil {
				return "", false, err
			}
		}
		s.idNext, s.idEnd = first, first+uint64(n)
	}
	next := s.idNext
	s.idNext++
	return strconv.FormatUint(s.sharedIDs.id(next), 10), true, nil
}

// localID is the id of the clock counter's next value.
func (s *Server) localID() string {
	return strconv.FormatUint(s.localIDs.id(s.ids.Add(1)), 10)
}

// freshIDTries bounds the stored ids one request skips.
const freshIDTries = 1000

// errNoFreshID: every id tried names a stored task.
var errNoFreshID = errors.New("the ids tried all name stored tasks: try again")

// freshID hands out a numeric id that names no stored task of client.
// The clock's ids are under a key of this process, and the clock may read
// earlier than at the last run's: an id may name a task the store holds,
// and would answer a new task with an old one's result (or refuse it as a
// conflict), so it is looked up and skipped. An id
// of the IDSource's blocks is never handed out twice, and is not looked
// up: one store round trip less a submit on a front's replica (a client
// that chose such an id for a task of its own through the API finds its
// in.php with another task refused as a conflict by the Backend).
// isNew says the id came from the IDSource: no process handed it out
// before (see NewSubmitter).
func (s *Server) freshID(ctx context.Context, client string) (id string, isNew bool, err error) {
	for range freshIDTries {
		id, shared, err := s.newID(ctx)
		if err != nil || shared {
			return id, shared, err
		}
		_, err = s.backend.Get(ctx, storeID(client, id))
		if errors.Is(err, captchaq.ErrNotFound) {
			return id, false, nil
		}
		if err != nil {
			return "", false, err
		}
	}
	return "", false, errNoFreshID
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

// client finds the client with key, in constant time per key.
func (s *Server) client(key string) *clientState {
	if key == "" {
		return nil
	}
	var found *clientState
	for k, c := range s.clients {
		if subtle.ConstantTimeCompare([]byte(k), []byte(key)) == 1 {
			found = c
		}
	}
	return found
}

// reserve takes room for n new tasks of cs against its rate and in-flight
// bound. It returns a non-nil *limitError when refused.
func (cs *clientState) reserve(ids []string) *limitError {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	fresh := 0
	for _, id := range ids {
		if _, ok := cs.inflight[id]; !ok {
			fresh++
		}
	}
	if cs.MaxInflight > 0 && len(cs.inflight)+fresh > cs.MaxInflight {
		return &limitError{inflight: true, msg: fmt.Sprintf("client %q has %d unfinished tasks; its max_inflight is %d", cs.Name, len(cs.inflight), cs.MaxInflight), retry: time.Second}
	}
	if le := cs.takeRate(len(ids)); le != nil {
		return le
	}
	for _, id := range ids {
		cs.inflight[id] = struct{}{}
	}
	return nil
}

// takeRate takes n of cs's rate (its tasks per second: submits, replays
// and reports alike), or returns why not. Called with cs.mu held or not:
// the limiter has its own lock.
func (cs *clientState) takeRate(n int) *limitError {
	if cs.limiter == nil {
		return nil
	}
	now := time.Now()
	r := cs.limiter.ReserveN(now, max(n, 1))
	if !r.OK() {
		return &limitError{msg: fmt.Sprintf("client %q sent %d tasks at once; its rate allows %d per second", cs.Name, n, cs.limiter.Burst()), retry: time.Second}
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return &limitError{msg: fmt.Sprintf("client %q is over its rate of %g tasks per second", cs.Name, cs.Rate), retry: d}
	}
	return nil
}

// reserve takes room for new tasks of cs against its max_inflight and
// rate: counted here (cs.reserve), or, when the Backend keeps them across
// the replicas of a front (FrontLimiter), there, in one round trip for a
// client with either bound (none for a client with neither); the tasks
// then count among the client's unfinished tasks here too.
func (s *Server) reserve(ctx context.Context, cs *clientState, ids []string) *limitError {
	if s.front == nil {
		return cs.reserve(ids)
	}
	if cs.MaxInflight > 0 || cs.limiter != nil {
		burst := 0
		if cs.limiter != nil {
			burst = cs.limiter.Burst()
			if len(ids) > burst {
				return &limitError{msg: fmt.Sprintf("client %q sent %d tasks at once; its rate allows %d per second", cs.Name, len(ids), burst), retry: time.Second}
			}
		}
		ok, held, wait, err := s.front.Admit(ctx, cs.Name, ids, cs.MaxInflight, cs.Rate, burst)
		switch {
		case err != nil:
			s.log.Error("store read failed", "err", err)
			return &limitError{inflight: true, msg: "the store cannot be reached now; try again shortly", retry: time.Second}
		case !ok && wait > 0:
			return &limitError{msg: fmt.Sprintf("client %q is over its rate of %g tasks per second across the front's replicas", cs.Name, cs.Rate), retry: wait}
		case !ok:
			return &limitError{inflight: true, msg: fmt.Sprintf("client %q has %d unfinished tasks on the front's replicas; its max_inflight is %d", cs.Name, held, cs.MaxInflight), retry: time.Second}
		}
	}
	cs.mu.Lock()
	for _, id := range ids {
		cs.inflight[id] = struct{}{}
	}
	cs.mu.Unlock()
	return nil
}

// takeRate takes n of cs's rate (a report's), here or across the front
// (FrontLimiter, under id).
func (s *Server) takeRate(ctx context.Context, cs *clientState, id string) *limitError {
	if s.front == nil || cs.limiter == nil {
		return cs.takeRate(1)
	}
	ok, _, wait, err := s.front.Admit(ctx, cs.Name, []string{id}, 0, cs.Rate, cs.limiter.Burst())
	switch {
	case err != nil:
		s.log.Error("store read failed", "err", err)
		return &limitError{msg: "the store cannot be reached now; try again shortly", retry: time.Second}
	case !ok:
		return &limitError{msg: fmt.Sprintf("client %q is over its rate of %g tasks per second across the front's replicas", cs.Name, cs.Rate), retry: wait}
	}
	return nil
}

// release gives back the room of tasks of cs that were not accepted,
// here and at the front (FrontLimiter).
func (s *Server) release(cs *clientState, ids ...string) {
	for _, id := range ids {
		cs.release(id)
	}
	if s.front == nil || cs.MaxInflight <= 0 || len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.front.FreeSlots(ctx, ids); err != nil {
		// The room comes back by itself a minute after it was taken.
		s.log.Warn("giving back a client's room at the front failed", "client", cs.Name, "err", err)
	}
}

// release gives back the room of a task that was not accepted.
func (cs *clientState) release(id string) {
	cs.mu.Lock()
	delete(cs.inflight, id)
	cs.mu.Unlock()
}

func (cs *clientState) inflightCount() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return len(cs.inflight)
}

// limitError is a refused submit: over the rate or the in-flight bound.
type limitError struct {
	inflight bool
	msg      string
	retry    time.Duration
}

func (e *limitError) Error() string { return e.msg }

// submit hands one task to the Backend, waiting at most SubmitWait for
// room.
func (s *Server) submit(ctx context.Context, t captchaq.ValidTask) error {
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
func (s *Server) submitBatch(ctx context.Context, tasks []captchaq.ValidTask) []error {
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

// balance answers getbalance from a short cache. Requests that find it
// stale share one reading: a reading may wait (a gateway without one
// waits up to amqp.BalanceWait for its workers), and the requests must
// not each wait in turn. The reading is not cancelled by the request
// that started it.
func (s *Server) balance(ctx context.Context) (float64, error) {
	if s.cfg.Balance == nil {
		return 0, errors.New("balance is not available on this server")
	}
	s.balMu.Lock()
	if !s.balAt.IsZero() && time.Since(s.balAt) < BalanceCacheDefault {
		v := s.balVal
		s.balMu.Unlock()
		return v, nil
	}
	s.balMu.Unlock()
	reading := s.balReads.DoChan("", func() (any, error) {
		v, err := s.cfg.Balance(context.WithoutCancel(ctx))
		if err == nil {
			s.balMu.Lock()
			s.balVal, s.balAt = v, time.Now()
			s.balMu.Unlock()
		}
		return v, err
	})
	select {
	case r := <-reading:
		if r.Err != nil {
			return 0, r.Err
		}
		return r.Val.(float64), nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}
