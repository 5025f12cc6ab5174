package server

import (
	"bytes"
	"context"
	"encoding/json"
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
)

// pingbackSender POSTs results to the pingback URLs clients gave with
// their tasks: urlencoded id=…&code=… (as 2captcha does) for tasks from
// in.php, JSON (the Result) for tasks from the API. Each call has a
// timeout and a few attempts with backoff. Each client has its own queue
// and senders (at most parallel calls at once), so a slow receiver of one
// client delays only that client's pingbacks; results past a client's
// bounded backlog are dropped (and counted). Connections go through the
// egress guard: no internal addresses, no redirects.
type pingbackSender struct {
	p       pingbackParams
	client  *http.Client
	mu      sync.Mutex
	queues  map[string]chan pingbackJob // by client name
	wg      sync.WaitGroup
	stop    chan struct{}
	once    sync.Once
	metrics *prometheus.CounterVec
}

type pingbackParams struct {
	timeout  time.Duration
	attempts int
	parallel int
	allow    []netip.Prefix // internal addresses let through (tests, operators' own receivers)
	log      *slog.Logger
}

// recordGetter reads a task's record (a Backend).
type recordGetter interface {
	Get(ctx context.Context, id string) (captchaq.Record, error)
}

type pingbackJob struct {
	store recordGetter
	res   captchaq.Result
	local string
}

// pingbackBacklog bounds one client's queued pingbacks.
const pingbackBacklog = 1024

func newPingbackSender(p pingbackParams) *pingbackSender {
	ps := &pingbackSender{
		p:      p,
		client: newEgressClient(p.timeout, p.allow),
		queues: map[string]chan pingbackJob{},
		stop:   make(chan struct{}),
		metrics: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "captchaq_client_pingbacks_total", Help: "Calls to clients' pingback URLs by outcome (sent, failed, dropped).",
		}, []string{"outcome"}),
	}
	return ps
}

// queue returns client's queue, starting its senders on first use; nil
// once the sender is closed.
func (ps *pingbackSender) queue(client string) chan pingbackJob {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if q, ok := ps.queues[client]; ok {
		return q
	}
	select {
	case <-ps.stop:
		return nil
	default:
	}
	q := make(chan pingbackJob, pingbackBacklog)
	ps.queues[client] = q
	for range ps.p.parallel {
		ps.wg.Add(1)
		go ps.run(q)
	}
	return q
}

// enqueue never blocks the queue's goroutine.
func (ps *pingbackSender) enqueue(store recordGetter, r captchaq.Result, local string) {
	client, _ := splitID(r.ID)
	q := ps.queue(client)
	select {
	case q <- pingbackJob{store: store, res: r, local: local}:
	default:
		ps.metrics.WithLabelValues("dropped").Inc()
	}
}

func (ps *pingbackSender) run(jobs chan pingbackJob) {
	defer ps.wg.Done()
	for {
		select {
		case j := <-jobs:
			ps.send(j)
		case <-ps.stop:
			return
		}
	}
}

func (ps *pingbackSender) send(j pingbackJob) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-ps.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	rec, err := j.store.Get(ctx, j.res.ID)
	if err != nil || rec.Task.Pingback == "" {
		return
	}
	var body []byte
	var ctype string
	target, form := strings.CutPrefix(rec.Task.Pingback, formPingback)
	if checkURL(target) != "" {
		ps.metrics.WithLabelValues("failed").Inc()
		return // stored before the checks of today
	}
	if form {
		code := j.res.Token
		if j.res.Status != captchaq.StatusSolved {
			code, _ = failureCode(j.res)
		}
		body = []byte(url.Values{"id": {j.local}, "code": {code}}.Encode())
		ctype = "application/x-www-form-urlencoded"
	} else {
		res := j.res
		res.ID = j.local
		body, _ = json.Marshal(res)
		ctype = "application/json"
	}
	backoff := 200 * time.Millisecond
	for attempt := 1; attempt <= ps.p.attempts; attempt++ {
		err = ps.post(ctx, target, ctype, body)
		if err == nil {
			ps.metrics.WithLabelValues("sent").Inc()
			return
		}
		if attempt < ps.p.attempts {
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return
			}
			backoff *= 2
		}
	}
	ps.metrics.WithLabelValues("failed").Inc()
	ps.p.log.Warn("client pingback failed", "id", j.res.ID, "attempts", ps.p.attempts, "err", err)
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

// close stops the senders; calls in progress are abandoned when ctx ends.
func (ps *pingbackSender) close(ctx context.Context) {
	ps.once.Do(func() {
		done := make(chan struct{})
		go func() {
			// Let queued jobs finish until ctx ends.
			for ps.backlog() > 0 && ctx.Err() == nil {
				time.Sleep(10 * time.Millisecond)
			}
			ps.mu.Lock()
			close(ps.stop)
			ps.mu.Unlock()
			ps.wg.Wait()
			close(done)
		}()
		<-done
	})
}

func (ps *pingbackSender) backlog() int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	n := 0
	for _, q := range ps.queues {
		n += len(q)
	}
	return n
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
