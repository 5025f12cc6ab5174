package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/simrig"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/server"
	"github.com/captchaq/captchaq/sim"
)

const (
	keyQA    = "qa-key-000001"
	keyOther = "other-key-0001"
	keyAdmin = "admin-key-0001"
)

// bundle is one running stack: simulator, provider client, queue, server.
type bundle struct {
	sim     *sim.Server
	simBase string // the simulator's URL
	srv     *server.Server
	url     string
	http    *http.Client
}

type options struct {
	clients []server.Client
	threads int
	server  func(*server.Config)
	sim     func(*sim.Config)
	noStart bool
	// served: the Handler on the server's capped Listener, with the
	// http.Server timeouts captchaq serve sets, not httptest's bare one.
	served bool
	// createTask: the queue reaches the simulator by createTask and
	// getTaskResult instead of in.php and res.php.
	createTask bool
	// methods: what the provider client solves and the simulator serves
	// (the queue's one provider lists them); nil: their defaults.
	methods []string
}

// slowRecaptcha keeps reCAPTCHA v2 tasks in flight for the whole test.
var slowRecaptcha = sim.Latency{Median: time.Hour, Min: time.Hour, Max: time.Hour}

func setup(t *testing.T, o options) *bundle {
	t.Helper()
	sc := sim.Config{LatencyScale: 0.01, Seed: 7, Latency: map[provider.Kind]sim.Latency{provider.KindRecaptchaV2: slowRecaptcha}, PollBan: sim.PollBan{Disabled: true}}
	sc.Methods = o.methods
	if o.sim != nil {
		o.sim(&sc)
	}
	r := simrig.Start(t, simrig.Options{Sim: sc, CreateTask: o.createTask, Key: "provider-secret", Methods: o.methods})
	clients := o.clients
	if clients == nil {
		clients = []server.Client{{Name: "qa", Key: keyQA, Weight: 2}, {Name: "other", Key: keyOther}, {Name: "ops", Key: keyAdmin, Admin: true}}
	}
	cfg := server.Config{
		Queue: captchaq.Config{
			Provider: r.Provider, Threads: o.threads, PollInterval: 10 * time.Millisecond,
			RetryBackoff: 10 * time.Millisecond, RetryBackoffMax: 50 * time.Millisecond,
		},
		Clients: clients,
		Balance: r.Balance,
		// The tests' pingback receivers listen on loopback.
		PingbackAllow: testAllow,
	}
	if o.methods != nil {
		cfg.Queue.Providers = []captchaq.ProviderConfig{{Name: "sim", Provider: r.Provider, Threads: o.threads, Methods: o.methods}}
		cfg.Queue.Provider = nil
	}
	if o.server != nil {
		o.server(&cfg)
	}
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(srv.Handler())
	if o.served {
		hs.Listener = srv.Listener(hs.Listener)
		hc := hs.Config
		hc.ReadHeaderTimeout, hc.ReadTimeout, hc.WriteTimeout, hc.IdleTimeout = 5*time.Second, 60*time.Second, 30*time.Second, 120*time.Second
		hc.MaxHeaderBytes = 64 << 10
	}
	hs.Start()
	t.Cleanup(func() {
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		srv.Shutdown(ctx)
		if q := srv.Queue(); q != nil { // nil with a Config.Backend
			q.Close()
		}
	})
	if !o.noStart {
		if err := srv.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	return &bundle{sim: r.Sim, simBase: r.Base, srv: srv, url: hs.URL, http: hs.Client()}
}

// form sends a front request and returns the body.
func (b *bundle) form(t *testing.T, method, path string, v url.Values) string {
	t.Helper()
	var req *http.Request
	var err error
	if method == http.MethodGet {
		req, err = http.NewRequest(method, b.url+path+"?"+v.Encode(), nil)
	} else {
		req, err = http.NewRequest(method, b.url+path, strings.NewReader(v.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if err != nil {
		t.Fatal(err)
	}
	return b.do(t, req, http.StatusOK)
}

func (b *bundle) do(t *testing.T, req *http.Request, want int) string {
	t.Helper()
	resp, err := b.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: HTTP %d, want %d: %s", req.Method, req.URL.Path, resp.StatusCode, want, body)
	}
	return strings.TrimSpace(string(body))
}

// api sends a JSON API request with key and decodes the answer into out.
func (b *bundle) api(t *testing.T, method, path, key, body string, want int, out any) http.Header {
	t.Helper()
	req, err := http.NewRequest(method, b.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: HTTP %d, want %d: %s", method, path, resp.StatusCode, want, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, raw)
		}
	}
	return resp.Header
}

// waitFinal long-polls a task until it is final.
func (b *bundle) waitFinal(t *testing.T, key, id string) server.TaskView {
	t.Helper()
	for range 6 {
		var v server.TaskView
		b.api(t, "GET", "/v1/tasks/"+url.PathEscape(id)+"?wait=10s", key, "", http.StatusOK, &v)
		if v.Status == captchaq.StatusSolved || v.Status == captchaq.StatusFailed {
			return v
		}
	}
	t.Fatalf("task %s not final after a minute", id)
	return server.TaskView{}
}

// inOK submits through in.php (json) and returns the id.
func (b *bundle) inOK(t *testing.T, key string, v url.Values) string {
	t.Helper()
	v.Set("key", key)
	v.Set("json", "1")
	var ans struct {
		Status  int    `json:"status"`
		Request string `json:"request"`
		Text    string `json:"error_text"`
	}
	if err := json.Unmarshal([]byte(b.form(t, http.MethodPost, "/in.php", v)), &ans); err != nil {
		t.Fatal(err)
	}
	if ans.Status != 1 {
		t.Fatalf("in.php refused: %s %s", ans.Request, ans.Text)
	}
	return ans.Request
}

func turnstile() url.Values {
	return url.Values{"method": {"turnstile"}, "sitekey": {"0x4AAAAAAA"}, "pageurl": {"https://shop.example/checkout"}}
}

func recaptcha() url.Values {
	return url.Values{"method": {"userrecaptcha"}, "googlekey": {"6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-"}, "pageurl": {"https://shop.example/login"}}
}

func apiTurnstile(id string) string {
	return fmt.Sprintf(`{"id":%q,"method":"turnstile","params":{"sitekey":"0x4AAAAAAA","pageurl":"https://shop.example/checkout"}}`, id)
}

func simBadKey() sim.Account { return sim.Account{BadKey: true} }

func simGoodKey() sim.Account { return sim.Account{} }

var testAllow = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
