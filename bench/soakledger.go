package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/captchaq/captchaq/sim"
)

// soakHTTP is the soak client's: a request the balancer holds longer than
// this counts as no answer, and the client tries again.
var soakHTTP = &http.Client{Timeout: 30 * time.Second}

// soakPoll is the client's pause between polls of one id.
const soakPoll = 500 * time.Millisecond

// soakTask is one task of the ledger.
type soakTask struct {
	host     string // its page's, which siteverify names for its tokens
	id       string // what in.php answered
	accepted time.Time
	answered time.Time
	tokens   []string // distinct tokens res.php gave for id
	wrong    int      // tokens siteverify did not give host
	// resent counts in.php calls sent again after no answer (a timeout, a
	// balancer's 502 or 504): one may have been taken, and the task
	// published twice.
	resent int
}

// soakLedger is the client: it submits tasks through the balancer, polls
// each to its answer, and keeps every accepted task and every answer.
type soakLedger struct {
	base, simURL, pingback string
	start                  time.Time

	mu      sync.Mutex
	tasks   []*soakTask
	answers map[string]int // other answers, by text
	wg      sync.WaitGroup
}

func newSoakLedger(base, simURL, pingback string, start time.Time) *soakLedger {
	return &soakLedger{base: base, simURL: simURL, pingback: pingback, start: start, answers: map[string]int{}}
}

// drive submits rate tasks a second until driveCtx ends; each is polled
// until it is answered or pollCtx ends.
func (l *soakLedger) drive(driveCtx, pollCtx context.Context, rate float64) {
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	for {
		select {
		case <-driveCtx.Done():
			return
		case <-tick.C:
		}
		l.mu.Lock()
		t := &soakTask{host: fmt.Sprintf("t%d.soak.example", len(l.tasks))}
		l.tasks = append(l.tasks, t)
		l.mu.Unlock()
		l.wg.Go(func() { l.solve(driveCtx, pollCtx, t) })
	}
}

// other counts an answer other than OK and CAPCHA_NOT_READY.
func (l *soakLedger) other(door string, status int, body string, err error) {
	key := fmt.Sprintf("%s %d %s", door, status, strings.Join(strings.Fields(body), " "))
	if err != nil {
		key = door + " no answer"
	}
	if len(key) > 80 {
		key = key[:80]
	}
	l.mu.Lock()
	l.answers[key]++
	l.mu.Unlock()
}

// solve submits t until in.php takes it (while driveCtx lasts), then
// polls its id until the answer, and twice more after it.
func (l *soakLedger) solve(driveCtx, pollCtx context.Context, t *soakTask) {
	form := url.Values{"key": {soakClientKey}, "method": {"turnstile"}, "sitekey": {sim.DemoTurnstile.SiteKey},
		"pageurl": {"https://" + t.host + "/login"}, "pingback": {l.pingback}}
	for {
		status, body, err := soakCall(driveCtx, "POST", l.base+"/in.php", form)
		if id, ok := strings.CutPrefix(body, "OK|"); ok && status == 200 {
			l.mu.Lock()
			t.id, t.accepted = id, time.Now()
			l.mu.Unlock()
			break
		}
		if driveCtx.Err() != nil {
			return
		}
		l.other("in.php", status, body, err)
		if err != nil || status == 502 || status == 504 {
			l.mu.Lock()
			t.resent++
			l.mu.Unlock()
		}
		sleepCtx(driveCtx, soakPoll)
	}
	for extra := 0; extra < 3 && pollCtx.Err() == nil; {
		sleepCtx(pollCtx, soakPoll)
		if l.poll(pollCtx, l.base, t) {
			extra++
		}
	}
}

// poll asks base's res.php for t's answer once and records a token; it
// reports whether one came.
func (l *soakLedger) poll(ctx context.Context, base string, t *soakTask) bool {
	q := url.Values{"key": {soakClientKey}, "action": {"get"}, "id": {t.id}}
	status, body, err := soakCall(ctx, "GET", base+"/res.php?"+q.Encode(), nil)
	token, ok := strings.CutPrefix(body, "OK|")
	if !ok || status != 200 {
		if ctx.Err() == nil && (body != "CAPCHA_NOT_READY" || status != 200) {
			l.other("res.php", status, body, err)
		}
		return false
	}
	l.mu.Lock()
	seen := false
	for _, s := range t.tokens {
		seen = seen || s == token
	}
	if !seen {
		t.tokens = append(t.tokens, token)
		if t.answered.IsZero() {
			t.answered = time.Now()
		}
	}
	l.mu.Unlock()
	if !seen {
		// A token verifies once: each distinct one is checked when first seen.
		if host := l.verify(ctx, token); host != t.host {
			l.mu.Lock()
			t.wrong++
			l.mu.Unlock()
		}
	}
	return true
}

// verify asks the simulator's siteverify which page token was issued
// for; "" when it is not a token of its.
func (l *soakLedger) verify(ctx context.Context, token string) string {
	host, err := sim.VerifiedHost(ctx, http.DefaultClient, l.simURL, token)
	if err != nil {
		return ""
	}
	return host
}

// soakCall makes one request and returns its status and body.
func soakCall(ctx context.Context, method, u string, form url.Values) (int, string, error) {
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return 0, "", err
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := soakHTTP.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	return resp.StatusCode, string(b), err
}

// wait waits until every task's goroutine is done or ctx ends.
func (l *soakLedger) wait(ctx context.Context) {
	done := make(chan struct{})
	go func() { l.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// repoll asks every replica directly for every answered id once more:
// one token per id through any replica.
func (l *soakLedger) repoll(ctx context.Context, replicas []string) {
	l.mu.Lock()
	var answered []*soakTask
	for _, t := range l.tasks {
		if len(t.tokens) > 0 {
			answered = append(answered, t)
		}
	}
	l.mu.Unlock()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, t := range answered {
		for _, base := range replicas {
			sem <- struct{}{}
			wg.Go(func() { defer func() { <-sem }(); l.poll(ctx, base, t) })
		}
	}
	wg.Wait()
}

// answeredIDs maps each answered task's id to its tokens.
func (l *soakLedger) answeredIDs() map[string][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := map[string][]string{}
	for _, t := range l.tasks {
		if len(t.tokens) > 0 {
			m[t.id] = t.tokens
		}
	}
	return m
}

// pingbackReceiver counts the pingbacks of each id and keeps their tokens.
type pingbackReceiver struct {
	url string
	srv *http.Server
	mu  sync.Mutex
	n   map[string]int
	got map[string][]string // tokens, by id
}

func newPingbackReceiver() (*pingbackReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &pingbackReceiver{url: "http://" + ln.Addr().String() + "/cb", n: map[string]int{}, got: map[string][]string{}}
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		id := r.Form.Get("id")
		p.mu.Lock()
		p.n[id]++
		p.got[id] = append(p.got[id], r.Form.Get("code"))
		p.mu.Unlock()
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// waitFor waits until every id of ids has had a pingback, or ctx ends.
func (p *pingbackReceiver) waitFor(ctx context.Context, ids map[string][]string) {
	for {
		p.mu.Lock()
		missing := 0
		for id := range ids {
			if p.n[id] == 0 {
				missing++
			}
		}
		p.mu.Unlock()
		if missing == 0 || ctx.Err() != nil {
			return
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
}

func (p *pingbackReceiver) counts() (map[string]int, map[string][]string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n, got := map[string]int{}, map[string][]string{}
	for k, v := range p.n {
		n[k] = v
	}
	for k, v := range p.got {
		got[k] = append([]string(nil), v...)
	}
	return n, got
}

func (p *pingbackReceiver) close() { _ = p.srv.Close() }
