package sim

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// pingbackCall is one POST to a task's pingback URL.
type pingbackCall struct {
	url  string
	id   uint64
	code string
	json []byte // a createTask callbackUrl's body: POSTed as JSON instead of id and code
}

// pingbackParams builds a pingbackSender.
type pingbackParams struct {
	parallel int
	timeout  time.Duration
	started  func(id uint64)          // the call is about to be made
	finished func(id uint64, ok bool) // it got a 2xx answer (ok) or failed
}

// pingbackSender POSTs id=<id>&code=<answer> to pingback URLs, as 2captcha
// does, from a fixed number of goroutines fed by an unbounded queue so that
// solving never waits on a slow receiver.
type pingbackSender struct {
	p      pingbackParams
	client *http.Client
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	queue  []pingbackCall
	notify chan struct{}
}

func newPingbackSender(p pingbackParams) *pingbackSender {
	ctx, cancel := context.WithCancel(context.Background())
	return &pingbackSender{
		p: p,
		client: &http.Client{Timeout: p.timeout, Transport: &http.Transport{
			Proxy:               nil, // pingbacks go to loopback receivers, never through a proxy
			MaxIdleConnsPerHost: p.parallel,
			IdleConnTimeout:     30 * time.Second,
		}},
		ctx:    ctx,
		cancel: cancel,
		notify: make(chan struct{}, 1),
	}
}

// enqueue adds a call; it never blocks.
func (ps *pingbackSender) enqueue(c pingbackCall) {
	ps.mu.Lock()
	ps.queue = append(ps.queue, c)
	ps.mu.Unlock()
	select {
	case ps.notify <- struct{}{}:
	default:
	}
}

func (ps *pingbackSender) start(wg *sync.WaitGroup) {
	for range ps.p.parallel {
		wg.Add(1)
		go ps.run(wg)
	}
}

// shutdown drops queued calls and cancels those in flight; the goroutines
// end and mark the WaitGroup given to start.
func (ps *pingbackSender) shutdown() {
	ps.cancel()
	ps.mu.Lock()
	ps.queue = nil
	ps.mu.Unlock()
}

func (ps *pingbackSender) run(wg *sync.WaitGroup) {
	defer wg.Done()
	for {
		ps.mu.Lock()
		var c pingbackCall
		ok := len(ps.queue) > 0
		if ok {
			c = ps.queue[0]
			ps.queue[0] = pingbackCall{}
			ps.queue = ps.queue[1:]
			if len(ps.queue) > 0 {
				select { // let another goroutine take the next one
				case ps.notify <- struct{}{}:
				default:
				}
			}
		}
		ps.mu.Unlock()
		if !ok {
			select {
			case <-ps.ctx.Done():
				return
			case <-ps.notify:
				continue
			}
		}
		if ps.ctx.Err() != nil {
			return
		}
		ps.p.started(c.id)
		ps.p.finished(c.id, ps.send(c))
	}
}

func (ps *pingbackSender) send(c pingbackCall) bool {
	body, ctype := url.Values{"id": {strconv.FormatUint(c.id, 10)}, "code": {c.code}}.Encode(), "application/x-www-form-urlencoded"
	if c.json != nil {
		body, ctype = string(c.json), "application/json"
	}
	req, err := http.NewRequestWithContext(ps.ctx, http.MethodPost, c.url, strings.NewReader(body))
	if err != nil {
		return false
	}
	req.Header.Set("Content-Type", ctype)
	resp, err := ps.client.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return resp.StatusCode >= 200 && resp.StatusCode < 300
}

// pingbackStarted records the delivery of a task's answer by pingback.
func (s *Server) pingbackStarted(id uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.table.tasks[id]; t != nil && t.state != statePending {
		s.table.delivered(t, s.cfg.Now(), false)
	}
}

func (s *Server) pingbackFinished(_ uint64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ok {
		s.st.pingbacksSent++
	} else {
		s.st.pingbacksFailed++
	}
}
