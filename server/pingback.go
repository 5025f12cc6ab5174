package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/startstop"
	"github.com/captchaq/captchaq/provider"
)

// pingbackSender POSTs results to the pingback URLs clients gave with
// their tasks: urlencoded id=…&code=… (as 2captcha does, and the token's
// bindings: formPingbackBody) for tasks from in.php, getTaskResult's JSON
// with the taskId for a createTask callbackUrl, JSON (the Result and its
// "bindings") for tasks from the API. Each call has a
// timeout and a few attempts with backoff. Each client has its own queue
// and senders (at most parallel calls at once), so a slow receiver of one
// client delays only that client's pingbacks; results past a client's
// bounded backlog are dropped (and counted). Connections go through the
// egress guard: no internal addresses, no redirects.
//
// A pingback is sent after its result is recorded (on a gateway, after
// the result message is acked): sending before the ack would let one
// client's slow receiver hold the fleet's reply queue for every client.
// With a ledger (captchaq.PingbackLedger, the Store) the pingback owed is
// durable: the sender takes its lease before the first attempt (none
// when another holds it or it was sent) and marks it done after the last
// (sent, failed, or abandoned at shutdown); one dropped past a client's
// backlog is marked done too. The sweeper (pingbacksweep.go) claims those
// owed past the grace period (their recorder died, or its store calls
// failed) and sends them here. So a process killed before its send leaves the pingback to
// another replica or its own next start, sent once; one killed between a
// receiver's answer and the mark (one store round trip, a few ms) has it
// sent twice. A lease lasts lease() (every attempt and backoff, plus the
// grace period); a claimed pingback still queued when only its attempts
// are left is not sent, and waits for the next claim. Without a ledger, a
// process that dies loses its queued pingbacks.
//
// close lets the queued and in-progress calls finish until its context
// ends and abandons the rest; every pingback not sent is counted by
// outcome (failed, dropped, abandoned) and logged with its task id. One
// not begun when the server stops (dropped then, or abandoned) stays
// owed in the ledger, for another replica or the next start.
// The result itself stays in the Store, where res.php and
// GET /v1/tasks/{id} answer it.
type pingbackSender struct {
	p       pingbackParams
	client  *http.Client
	mu      sync.Mutex
	queues  map[string]chan pingbackJob // by client name; closed by close
	closed  bool
	wg      sync.WaitGroup
	closing chan struct{} // closed when close begins
	// abandon ends the calls still running when close's context ends.
	abandon       context.Context
	cancelAbandon context.CancelFunc
	once          sync.Once
	metrics       *prometheus.CounterVec
	sweeper       *startstop.Loop // with a ledger
}

type pingbackParams struct {
	timeout  time.Duration
	attempts int
	parallel int
	allow    []netip.Prefix // internal addresses let through (tests, operators' own receivers)
	log      *slog.Logger
	ledger   captchaq.PingbackLedger // nil: pingbacks in memory only
	grace    time.Duration           // before the sweeper claims a pingback owed
	store    recordGetter            // what the sweeper's jobs read
}

// recordGetter reads a task's record (a Backend).
type recordGetter interface {
	Get(ctx context.Context, id string) (captchaq.Record, error)
}

type pingbackJob struct {
	store recordGetter
	res   captchaq.Result
	local string
	// claimed is the record of a pingback the sweeper leased, and sendBy
	// the time past which its send might outlast the lease.
	claimed *captchaq.Record
	sendBy  time.Time
}

// pingbackBacklog bounds one client's queued pingbacks.
const pingbackBacklog = 1024

// Outcomes of captchaq_client_pingbacks_total.
const (
	pingbackSent      = "sent"
	pingbackFailed    = "failed"    // refused URL, record unreadable past pingbackReadWait, or every attempt failed
	pingbackDropped   = "dropped"   // past the client's backlog, or after close
	pingbackAbandoned = "abandoned" // still queued or being sent when close's context ended
)

func newPingbackSender(p pingbackParams) *pingbackSender {
	abandon, cancel := context.WithCancel(context.Background())
	ps := &pingbackSender{
		p:       p,
		client:  newEgressClient(p.timeout, p.allow),
		queues:  map[string]chan pingbackJob{},
		closing: make(chan struct{}),
		abandon: abandon, cancelAbandon: cancel,
		metrics: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "captchaq_client_pingbacks_total", Help: "Calls to clients' pingback URLs by outcome (sent, failed, dropped, abandoned at shutdown).",
		}, []string{"outcome"}),
	}
	if p.ledger != nil {
		ps.sweeper = startstop.New(ps.sweep)
	}
	return ps
}

// lease is how long a pingback's lease lasts: every attempt's timeout and
// the backoffs between them, plus the grace period.
func (ps *pingbackSender) lease() time.Duration {
	backoffs := pingbackBackoff * (1<<max(ps.p.attempts-1, 0) - 1)
	return time.Duration(ps.p.attempts)*ps.p.timeout + backoffs + ps.p.grace
}

// pingbackBackoff is the wait after a pingback's first failed attempt;
// it doubles after each.
const pingbackBackoff = 200 * time.Millisecond

// enqueue hands r's pingback to its client's queue, starting the client's
// senders on first use. It never blocks the caller (a queue's goroutine).
func (ps *pingbackSender) enqueue(store recordGetter, r captchaq.Result, local string) {
	ps.enqueueJob(pingbackJob{store: store, res: r, local: local})
}

func (ps *pingbackSender) enqueueJob(j pingbackJob) {
	client, _ := splitID(j.res.ID)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.closed {
		ps.notSent(pingbackDropped, j.res.ID, "the server is stopping")
		return
	}
	q, ok := ps.queues[client]
	if !ok {
		q = make(chan pingbackJob, pingbackBacklog)
		ps.queues[client] = q
		for range ps.p.parallel {
			ps.wg.Add(1)
			go ps.run(q)
		}
	}
	select {
	case q <- j:
	default:
		ps.notSent(pingbackDropped, j.res.ID, fmt.Sprintf("the client's backlog of %d is full", pingbackBacklog))
		if ps.p.ledger != nil {
			ps.wg.Go(func() { ps.done(j.res.ID) }) // close waits: it has not begun
		}
	}
}

// notSent counts and logs a pingback that was not delivered.
func (ps *pingbackSender) notSent(outcome, id, why string) {
	ps.metrics.WithLabelValues(outcome).Inc()
	ps.p.log.Warn("client pingback not sent", "id", id, "outcome", outcome, "reason", why)
}

// run sends one client's pingbacks until close has closed its queue and
// the queue is empty.
func (ps *pingbackSender) run(jobs chan pingbackJob) {
	defer ps.wg.Done()
	for j := range jobs {
		ps.send(j)
	}
}

func (ps *pingbackSender) send(j pingbackJob) {
	ctx := ps.abandon
	abandoned := func() { ps.notSent(pingbackAbandoned, j.res.ID, "shutdown deadline reached") }
	if ctx.Err() != nil {
		abandoned()
		return
	}
	rec, ok, err := ps.read(ctx, j)
	switch {
	case ctx.Err() != nil:
		abandoned() // not taken: it stays owed
		return
	case err != nil:
		ps.notSent(pingbackFailed, j.res.ID, "read the task: "+err.Error())
		return
	case !ok || rec.Task.Pingback == "":
		return
	}
	if ps.p.ledger != nil {
		defer ps.done(j.res.ID)
	}
	var body []byte
	var ctype string
	target, form := strings.CutPrefix(rec.Task.Pingback, formPingback)
	target, ct := strings.CutPrefix(target, ctPingback)
	if provider.CheckCallbackURL(target) != "" {
		ps.metrics.WithLabelValues(pingbackFailed).Inc()
		return // stored before the checks of today
	}
	switch {
	case ct:
		res := j.res
		rec.Result = &res
		body = ctCallbackBody(rec, j.local)
		ctype = "application/json"
	case form:
		body = formPingbackBody(j.res, j.local, rec.Task.Params)
		ctype = "application/x-www-form-urlencoded"
	default:
		res := j.res
		res.ID = j.local
		body, _ = json.Marshal(resultJSON{Result: res, Bindings: apiBindings(res, rec.Task.Params)})
		ctype = "application/json"
	}
	backoff := pingbackBackoff
	for attempt := 1; attempt <= ps.p.attempts; attempt++ {
		err = ps.post(ctx, target, ctype, body)
		if err == nil {
			ps.metrics.WithLabelValues(pingbackSent).Inc()
			return
		}
		if ctx.Err() != nil {
			abandoned()
			return
		}
		if attempt < ps.p.attempts {
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				abandoned()
				return
			}
			backoff *= 2
		}
	}
	ps.p.log.Warn("client pingback failed", "id", j.res.ID, "pingback", origin(target), "attempts", ps.p.attempts, "err", withoutURL(err))
	ps.metrics.WithLabelValues(pingbackFailed).Inc()
}

// Reading a task's record for its pingback is tried again on a store
// error (a PostgreSQL restart ends every connection: SQLSTATE 57P01,
// 57P03 while it starts), from pingbackReadBackoff doubling up to
// pingbackReadBackoffMax, for at most pingbackReadWait in all: the result
// is recorded, so the store will answer once it is back. A task the store
// does not hold is not read again.
const (
	pingbackReadBackoff    = 100 * time.Millisecond
	pingbackReadBackoffMax = 5 * time.Second
	pingbackReadWait       = 2 * time.Minute
)

// read is the record of j's task, and whether its pingback is this
// sender's to send: with a ledger, a claimed job's while its lease
// lasts, any other once its lease is taken; without, once read. The
// store is asked again while it fails (see pingbackReadWait), until it
// answers, the task is not found, or ctx ends.
func (ps *pingbackSender) read(ctx context.Context, j pingbackJob) (rec captchaq.Record, ok bool, err error) {
	if j.claimed != nil {
		if time.Now().After(j.sendBy) {
			ps.p.log.Info("client pingback left for the next claim: its lease may end before its send", "id", j.res.ID)
			return *j.claimed, false, nil
		}
		return *j.claimed, true, nil
	}
	err = ps.retryStore(ctx, j.res.ID, "client pingback waits for the store", func() error {
		if ps.p.ledger != nil {
			rec, ok, err = ps.p.ledger.TakePingback(ctx, j.res.ID, ps.lease())
			return err
		}
		rec, err = j.store.Get(ctx, j.res.ID)
		ok = err == nil
		return err
	})
	return rec, ok, err
}

// retryStore calls fn until it returns nil or captchaq.ErrNotFound, ctx
// ends or pingbackReadWait has passed, from pingbackReadBackoff doubling
// up to pingbackReadBackoffMax, logging msg at each retry.
func (ps *pingbackSender) retryStore(ctx context.Context, id, msg string, fn func() error) error {
	backoff := pingbackReadBackoff
	deadline := time.Now().Add(pingbackReadWait)
	for {
		err := fn()
		if err == nil || errors.Is(err, captchaq.ErrNotFound) || ctx.Err() != nil || time.Now().Add(backoff).After(deadline) {
			return err
		}
		ps.p.log.Info(msg, "id", id, "err", err, "retry_in", backoff)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return ctx.Err()
		}
		backoff = min(2*backoff, pingbackReadBackoffMax)
	}
}

// pingbackDoneWait bounds the marking of one pingback done, past the
// shutdown's context too: one not marked is sent again once its lease
// ends.
const pingbackDoneWait = 10 * time.Second

// done marks id's pingback done in the ledger.
func (ps *pingbackSender) done(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), pingbackDoneWait)
	defer cancel()
	err := ps.retryStore(ctx, id, "client pingback waits for the store to mark it done", func() error {
		return ps.p.ledger.PingbackDone(ctx, id)
	})
	if err != nil {
		ps.p.log.Warn("client pingback not marked done: it is sent again once its lease ends", "id", id, "err", err)
	}
}

// origin is a pingback URL as logs show it: scheme and host. Clients are
// told to put a secret in the path or the query, so the rest is theirs.
func origin(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unreadable URL)"
	}
	return p.Scheme + "://" + p.Host
}

// withoutURL is err without the URL an HTTP call's error repeats.
func withoutURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func (ps *pingbackSender) post(ctx context.Context, u, ctype string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", ctype)
	resp, err := ps.client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		return fmt.Errorf("pingback answered HTTP %d", resp.StatusCode)
	}
	return nil
}

// close stops the sweeper, takes no more pingbacks and waits for the queued and
// in-progress ones until ctx ends; then it abandons the rest (each counted
// and logged) and returns once every sender has stopped.
func (ps *pingbackSender) close(ctx context.Context) {
	ps.once.Do(func() {
		ps.stopSweeper()
		ps.mu.Lock()
		ps.closed = true
		for _, q := range ps.queues {
			close(q)
		}
		ps.mu.Unlock()
		close(ps.closing)
		done := make(chan struct{})
		go func() {
			ps.wg.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-ctx.Done():
			ps.cancelAbandon()
			<-done
		}
		ps.cancelAbandon()
	})
}

// formPingback marks, in the stored Task.Pingback, a URL that gets the
// protocol's urlencoded form (tasks from in.php) instead of JSON. The
// queue itself never calls Task.Pingback; the server does.
const formPingback = "form+"

// failureCode is a failed result's protocol code and text.
func failureCode(r captchaq.Result) (string, string) {
	if strings.HasPrefix(r.ErrorCode, "ERROR_") {
		return r.ErrorCode, r.Error
	}
	return "ERROR_CAPTCHA_UNSOLVABLE", r.ErrorCode + ": " + r.Error
}
