package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
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
// timeout and a few attempts with backoff; at most parallel calls run at
// once, and results past a bounded backlog are dropped (and counted).
type pingbackSender struct {
	p       pingbackParams
	client  *http.Client
	jobs    chan pingbackJob
	wg      sync.WaitGroup
	stop    chan struct{}
	once    sync.Once
	metrics *prometheus.CounterVec
}

type pingbackParams struct {
	timeout  time.Duration
	attempts int
	parallel int
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

const pingbackBacklog = 4096

func newPingbackSender(p pingbackParams) *pingbackSender {
	ps := &pingbackSender{
		p:      p,
		client: &http.Client{Timeout: p.timeout},
		jobs:   make(chan pingbackJob, pingbackBacklog),
		stop:   make(chan struct{}),
		metrics: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "captchaq_client_pingbacks_total", Help: "Calls to clients' pingback URLs by outcome (sent, failed, dropped).",
		}, []string{"outcome"}),
	}
	for range p.parallel {
		ps.wg.Add(1)
		go ps.run()
	}
	return ps
}

// enqueue never blocks the queue's goroutine.
func (ps *pingbackSender) enqueue(store recordGetter, r captchaq.Result, local string) {
	select {
	case ps.jobs <- pingbackJob{store: store, res: r, local: local}:
	default:
		ps.metrics.WithLabelValues("dropped").Inc()
	}
}

func (ps *pingbackSender) run() {
	defer ps.wg.Done()
	for {
		select {
		case j := <-ps.jobs:
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
			for len(ps.jobs) > 0 && ctx.Err() == nil {
				time.Sleep(10 * time.Millisecond)
			}
			close(ps.stop)
			ps.wg.Wait()
			close(done)
		}()
		<-done
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
