package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/sim"
)

// The keys of the serve front's client and admin at `captchaq serve`.
const (
	reservoirClientKey = "reservoir-bench-client"
	reservoirAdminKey  = "reservoir-bench-admin"
)

// demoCaptcha is a captcha of the simulator's demo site the serve front's
// clients ask for: its in.php method and sitekey param, the page, the form
// field its token goes in, its kind and the min_life a reservoir keeps
// (a quarter of its lifetime).
type demoCaptcha struct {
	method, keyParam, field string
	site                    sim.DemoSite
	kind                    provider.Kind
	minLife                 time.Duration
}

var demoCaptchas = map[string]demoCaptcha{
	"turnstile": {"turnstile", "sitekey", "cf-turnstile-response", sim.DemoTurnstile, provider.KindTurnstile, sim.TurnstileLifetimeDefault / 4},
	"recaptcha": {"userrecaptcha", "googlekey", "g-recaptcha-response", sim.DemoRecaptcha, provider.KindRecaptchaV2, sim.RecaptchaLifetimeDefault / 4},
}

// SolveP90 is the 90th percentile of captcha's solve times in the "fast"
// mix (log-normal, clamped): what a reservoir plans a refill on.
func SolveP90(captcha string) time.Duration {
	l := MixLatency["fast"][demoCaptchas[captcha].kind]
	d := time.Duration(float64(l.Median) * math.Exp(1.2816*l.Spread))
	return min(max(d, l.Min), l.Max)
}

// queueFront is a queue in this process on its own simulator.
type queueFront struct {
	srv    *sim.Server
	q      *captchaq.Queue
	stop   func()
	demand string
}

func startQueueFront(ctx context.Context, c ReservoirConfig, demand string, threads int, withRes bool) (*queueFront, error) {
	s := Sim{Threads: threads, Seed: c.Seed, Latency: map[provider.Kind]sim.Latency{provider.KindTurnstile: MixLatency["fast"][provider.KindTurnstile]}}
	srv, base, err := sim.Start(s.config(), "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench: start simulator: %w", err)
	}
	e := EngineRun{Name: demand}
	if withRes {
		e.Reservoirs = []captchaq.ReservoirConfig{{Name: "shop", Task: reservoirTask(), Max: 50}}
		e.ReservoirShare = c.Share
	}
	q, stop, err := startEngine(ctx, s, base, e)
	if err != nil {
		srv.Close()
		return nil, err
	}
	return &queueFront{srv: srv, q: q, stop: stop, demand: demand}, nil
}

func (f *queueFront) ask(ctx context.Context, i int, every time.Duration) answer {
	t := reservoirTask()
	t.ID = fmt.Sprintf("bench-%s-%05d", f.demand, i)
	got := make(chan gotResult, 1)
	t0 := time.Now()
	if err := f.q.SubmitFunc(ctx, t, func(r captchaq.Result) { got <- gotResult{r, time.Now()} }); err != nil {
		return answer{}
	}
	back := time.Now()
	select {
	case r := <-got:
		return answer{took: PolledAt(t0, back, r.at, every), ok: r.Status == captchaq.StatusSolved,
			hit: r.Reservoir != "", first: !r.at.After(back), token: r.Token}
	case <-ctx.Done():
		return answer{}
	}
}

func (f *queueFront) counts() captchaq.ReservoirCounts {
	if rs := f.q.Reservoirs(); len(rs) > 0 {
		return rs[0]
	}
	return captchaq.ReservoirCounts{}
}

func (f *queueFront) simStats() (sim.Stats, error) { return f.srv.Stats(), nil }

func (f *queueFront) close() {
	f.stop()
	f.srv.Close()
}

// serveFront is `captchaq sim` and `captchaq serve` (its defaults but the
// plan's threads, one "size": "auto" reservoir or none), each a process,
// and an HTTP client speaking in.php and res.php to serve.
type serveFront struct {
	*procGroup
	dir, simURL, base string
	captcha           demoCaptcha
	hc                *http.Client
	mu                sync.Mutex
	last              captchaq.ReservoirCounts // the latest counts read
}

func startServeFront(ctx context.Context, c ReservoirConfig, threads int, withRes bool) (f *serveFront, err error) {
	dir, err := os.MkdirTemp("", "captchaq-reservoir-")
	if err != nil {
		return nil, err
	}
	f = &serveFront{procGroup: newProcGroup(c.Log), dir: dir, captcha: demoCaptchas[c.Captcha],
		hc: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	defer func() {
		if err != nil {
			f.close()
		}
	}()
	simAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	f.simURL = "http://" + simAddr
	if err := f.startProc("sim", nil, c.Binary, "sim", "--addr", simAddr, "--threads", fmt.Sprint(threads),
		"--mix", "fast", "--seed", fmt.Sprint(c.Seed)); err != nil {
		return nil, err
	}
	if err := waitOK(ctx, f.simURL+"/sim/stats", time.Minute); err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	f.base = "http://" + addr
	clients := filepath.Join(dir, "clients.json")
	args := []string{c.Binary, "serve", "--api-url", f.simURL, "--clients", clients, "--listen", addr, "--threads", fmt.Sprint(threads)}
	files := map[string]string{clients: fmt.Sprintf(`[{"name":"shop","key":%q},{"name":"ops","key":%q,"admin":true}]`, reservoirClientKey, reservoirAdminKey)}
	if withRes {
		res := filepath.Join(dir, "reservoirs.json")
		params, _ := json.Marshal(f.params())
		files[res] = fmt.Sprintf(`[{"name":"shop","method":%q,"params":%s,"size":"auto","max":50}]`, f.captcha.method, params)
		args = append(args, "--reservoirs", res)
	}
	for name, body := range files {
		if err := os.WriteFile(name, []byte(body), 0o600); err != nil {
			return nil, err
		}
	}
	// The default store, a SQLite file in the data directory: the run's own.
	if err := f.startProc("serve", []string{"CAPTCHAAI_KEY=" + benchKey, "XDG_DATA_HOME=" + dir}, args...); err != nil {
		return nil, err
	}
	return f, waitHealthy(ctx, f.base, time.Minute)
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// params are the captcha's in.php params: its sitekey and its page on the
// simulator's demo site.
func (f *serveFront) params() map[string]string {
	return map[string]string{f.captcha.keyParam: f.captcha.site.SiteKey, "pageurl": f.simURL + f.captcha.site.Path}
}

// ask submits at in.php, polls res.php right after and every every until
// the token comes, reads the task's result at /v1/tasks/{id} (its
// reservoir and expiry), and verifies the token once at the demo site.
func (f *serveFront) ask(ctx context.Context, _ int, every time.Duration) answer {
	form := url.Values{"key": {reservoirClientKey}, "method": {f.captcha.method}}
	for k, v := range f.params() {
		form.Set(k, v)
	}
	t0 := time.Now()
	body, err := f.call(ctx, http.MethodPost, f.base+"/in.php", form, "")
	id, ok := strings.CutPrefix(body, "OK|")
	if err != nil || !ok {
		return answer{}
	}
	back := time.Now()
	q := url.Values{"key": {reservoirClientKey}, "action": {"get"}, "id": {id}}.Encode()
	var a answer
	polls := 0
	for {
		body, err = f.call(ctx, http.MethodGet, f.base+"/res.php?"+q, nil, "")
		if err != nil || body != "CAPCHA_NOT_READY" {
			break
		}
		polls++
		if err := sleepUntil(ctx, back.Add(time.Duration(polls)*every)); err != nil {
			return answer{}
		}
	}
	a.took, a.first = time.Since(t0), polls == 0
	token, ok := strings.CutPrefix(body, "OK|")
	if err != nil || !ok {
		return answer{}
	}
	a.ok, a.token = true, token
	var v struct{ Result *captchaq.Result }
	raw, err := f.call(ctx, http.MethodGet, f.base+"/v1/tasks/"+id, nil, reservoirClientKey)
	if err != nil || json.Unmarshal([]byte(raw), &v) != nil || v.Result == nil {
		return answer{}
	}
	// A token from the reservoir has an expiry, at least min_life from
	// the submit; one solved for the task, a fresh one.
	exp := v.Result.ExpiresAt
	a.hit = v.Result.Reservoir != ""
	a.short = (a.hit || !exp.IsZero()) && exp.Sub(t0) < f.captcha.minLife
	_, err = f.call(ctx, http.MethodPost, f.simURL+f.captcha.site.Path, url.Values{f.captcha.field: {token}}, "")
	a.verified, a.rejected = err == nil, err != nil
	return a
}

// call sends a request (a form for a POST; an admin or client key as
// Authorization: Bearer) and returns the body of a 200 answer.
func (f *serveFront) call(ctx context.Context, method, u string, form url.Values, bearer string) (string, error) {
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return "", err
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := f.hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s %s: HTTP %d", method, req.URL.Path, resp.StatusCode)
	}
	return strings.TrimSpace(string(b)), err
}

// counts reads GET /v1/reservoirs; on an error, the latest counts read.
func (f *serveFront) counts() captchaq.ReservoirCounts {
	var out struct {
		Reservoirs []struct {
			Stock     int   `json:"stock"`
			InFlight  int   `json:"in_flight"`
			Solved    int64 `json:"solved"`
			HandedOut int64 `json:"handed_out"`
			Expired   int64 `json:"expired"`
			Failed    int64 `json:"failed"`
		}
	}
	raw, err := f.call(context.Background(), http.MethodGet, f.base+"/v1/reservoirs", nil, reservoirAdminKey)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil && json.Unmarshal([]byte(raw), &out) == nil && len(out.Reservoirs) > 0 {
		r := out.Reservoirs[0]
		f.last = captchaq.ReservoirCounts{Stock: r.Stock, InFlight: r.InFlight, Solved: r.Solved,
			HandedOut: r.HandedOut, Expired: r.Expired, Failed: r.Failed}
	}
	return f.last
}

func (f *serveFront) simStats() (sim.Stats, error) {
	var st sim.Stats
	raw, err := f.call(context.Background(), http.MethodGet, f.simURL+"/sim/stats", nil, "")
	if err == nil {
		err = json.Unmarshal([]byte(raw), &st)
	}
	return st, err
}

func (f *serveFront) close() {
	f.stopAll()
	_ = os.RemoveAll(f.dir)
}
