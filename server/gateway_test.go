package server_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/amqp"
	"github.com/captchaq/captchaq/internal/brokertest"
	"github.com/captchaq/captchaq/internal/reportfwd"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/provider/createtask"
	"github.com/captchaq/captchaq/server"
	"github.com/captchaq/captchaq/sim"
	"github.com/captchaq/captchaq/store/sqlite"
)

// The gateway is a Backend.
var _ server.Backend = (*amqp.Gateway)(nil)
var _ server.QueueDepther = (*amqp.Gateway)(nil)

// fleetRig is one test's fleet on the real broker: a topology of its own,
// a simulator, in-process workers, and gateways each with its own
// connection, store file and HTTP server. Everything goes when the test
// ends.
type fleetRig struct {
	t      *testing.T
	cfg    amqp.Config
	sim    *sim.Server
	apiURL string
	log    *slog.Logger
	// config, when set, changes each gateway server's Config.
	config func(*server.Config)
	// createTask: the workers reach the simulator by createTask and
	// getTaskResult instead of in.php and res.php.
	createTask bool
	// methods, when set, are what the workers' one provider, "sim",
	// solves, and what the gateways accept; nil: the provider's default.
	methods []string

	mu       sync.Mutex
	owners   []string
	gateways []string
}

func newFleetRig(t *testing.T, sc sim.Config) *fleetRig {
	t.Helper()
	ss, apiURL, err := sim.Start(sc, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Registered first, so it runs last: after workers and gateways stop.
	t.Cleanup(func() { ss.Close() })
	f := newFleetAt(t, apiURL)
	f.sim = ss
	return f
}

// newFleetAt is a fleetRig whose workers solve at the provider at apiURL,
// which the caller runs and stops; sim is nil.
func newFleetAt(t *testing.T, apiURL string) *fleetRig {
	t.Helper()
	var b [4]byte
	rand.Read(b[:])
	f := &fleetRig{t: t, apiURL: apiURL, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	f.cfg = amqp.Config{URL: brokertest.Use(t), Prefix: "test-gw-" + hex.EncodeToString(b[:]),
		ReconnectMin: 50 * time.Millisecond, ReconnectMax: time.Second, Logger: f.log}
	// Registered before any worker or gateway, so it runs after they stop.
	t.Cleanup(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if err := amqp.DeleteReplies(context.Background(), f.cfg, f.gateways...); err != nil {
			t.Errorf("DeleteReplies: %v", err)
		}
		if err := amqp.DeleteTopology(context.Background(), f.cfg, f.owners...); err != nil {
			t.Errorf("DeleteTopology: %v", err)
		}
	})
	return f
}

func (f *fleetRig) dial() *amqp.Conn {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := amqp.Dial(ctx, f.cfg)
	if err != nil {
		f.t.Fatalf("Dial: %v", err)
	}
	return c
}

// worker runs an in-process worker holding the provider key, until the
// test ends or the stop it returns is called.
func (f *fleetRig) worker(owner string, threads int) (stop func()) {
	f.t.Helper()
	c := f.dial()
	qc := captchaq.Config{Provider: f.provider(), Threads: threads, PollInterval: 10 * time.Millisecond,
		RetryBackoff: 10 * time.Millisecond, RetryBackoffMax: 100 * time.Millisecond, Logger: f.log}
	if f.methods != nil {
		qc.Providers = []captchaq.ProviderConfig{{Name: "sim", Provider: qc.Provider, Threads: threads, Methods: f.methods}}
		qc.Provider, qc.Threads = nil, 0
	}
	w, err := amqp.NewWorker(c, amqp.WorkerConfig{
		Queue: qc, Owner: owner, Grace: 200 * time.Millisecond, BeatInterval: time.Second, Logger: f.log,
		Report: reportfwd.New(captchaq.Config{Provider: qc.Provider, Providers: qc.Providers}).Forward,
	})
	if err != nil {
		f.t.Fatal(err)
	}
	f.mu.Lock()
	f.owners = append(f.owners, owner)
	f.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				f.t.Errorf("worker %s: %v", owner, err)
			}
			c.Close()
		})
	}
	f.t.Cleanup(stop)
	return stop
}

// provider is a worker's client of the simulator, by the protocol and
// with the methods the rig says.
func (f *fleetRig) provider() captchaq.Provider {
	f.t.Helper()
	cc := provider.ClientConfig{BaseURL: f.apiURL, Key: "fleet-provider-secret", Methods: f.methods}
	if f.createTask {
		pc, err := createtask.NewClient(cc)
		if err != nil {
			f.t.Fatal(err)
		}
		return pc
	}
	pc, err := provider.NewClient(cc)
	if err != nil {
		f.t.Fatal(err)
	}
	return pc
}

// gatewayBundle is a running gateway: its server, behind an httptest
// server, on its own connection and store file.
type gatewayBundle struct {
	*bundle
	gw    *amqp.Gateway
	store captchaq.Store // the gateway's
	stop  func()
}

var gatewayClients = []server.Client{
	{Name: "qa", Key: keyQA, Weight: 2},
	{Name: "other", Key: keyOther},
	{Name: "slow", Key: "slow-key-0001", MaxInflight: 1},
	{Name: "burst", Key: "burst-key-001", Rate: 1},
	{Name: "ops", Key: keyAdmin, Admin: true},
}

// serve starts a gateway named name on the SQLite file path. before runs
// between building the server and starting it (to subscribe to events
// before results flow). stop ends it (idempotent; also at cleanup).
func (f *fleetRig) serve(name, path string, before func(*bundle)) *gatewayBundle {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := sqlite.Open(ctx, path, sqlite.Config{Logger: f.log})
	if err != nil {
		f.t.Fatal(err)
	}
	return f.serveStore(name, st, before)
}

// serveStore is serve on the store st, which stop closes.
func (f *fleetRig) serveStore(name string, st captchaq.Store, before func(*bundle)) *gatewayBundle {
	f.t.Helper()
	f.mu.Lock()
	if !slices.Contains(f.gateways, name) {
		f.gateways = append(f.gateways, name)
	}
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := f.dial()
	gc := amqp.GatewayConfig{Store: st, Name: name, Logger: f.log}
	if f.methods != nil {
		gc.Providers = []captchaq.ProviderConfig{{Name: "sim", Methods: f.methods}}
	}
	gw, err := amqp.NewGateway(c, gc)
	if err != nil {
		f.t.Fatal(err)
	}
	scfg := server.Config{Backend: gw, Clients: gatewayClients, Logger: f.log, PingbackAllow: testAllow,
		PingbackTimeout: time.Minute, Report: gw.Report}
	if f.config != nil {
		f.config(&scfg)
	}
	srv, err := server.New(scfg)
	if err != nil {
		f.t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	b := &bundle{sim: f.sim, srv: srv, url: hs.URL, http: hs.Client()}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			hs.CloseClientConnections()
			hs.Close()
			sctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if err := srv.Shutdown(sctx); err != nil {
				f.t.Errorf("gateway %s: Shutdown: %v", name, err)
			}
			c.Close()
			st.Close()
		})
	}
	f.t.Cleanup(stop)
	if before != nil {
		before(b)
	}
	if err := srv.Start(ctx); err != nil {
		f.t.Fatal(err)
	}
	return &gatewayBundle{bundle: b, gw: gw, store: st, stop: stop}
}

// resOK polls res.php until the task is final and returns the answer.
func (b *bundle) resFinal(t *testing.T, key, id string) string {
	t.Helper()
	var got string
	testbound.Eventually(func() bool {
		got = b.form(t, http.MethodGet, "/res.php", url.Values{"key": {key}, "action": {"get"}, "id": {id}})
		return got != "CAPCHA_NOT_READY"
	})
	return got
}

// distinct makes a task's page URL its own, so the simulator counts a
// second submit of it as a duplicate.
func distinct(v url.Values, n string) url.Values {
	v.Set("pageurl", v.Get("pageurl")+"?n="+n)
	return v
}

func apiTurnstileOwn(id string) string {
	return fmt.Sprintf(`{"id":%q,"method":"turnstile","params":{"sitekey":"0x4AAAAAAA","pageurl":"https://shop.example/checkout?n=%s"}}`, id, id)
}

func geetest(id, challenge string) string {
	return fmt.Sprintf(`{"id":%q,"method":"geetest","params":{"gt":"81dc9bdb52d04dc20036dbd8313ed055","challenge":%q,"pageurl":"https://shop.example/login"}}`, id, challenge)
}

// TestGatewayEndToEnd: a gateway with no provider key and an in-process
// worker answer in.php/res.php and the JSON API end to end: long-poll,
// events, limits, cancel, dead letters and replay, stats and metrics.
func TestGatewayEndToEnd(t *testing.T) {
	t.Parallel()
	f := newFleetRig(t, sim.Config{Threads: 20, LatencyScale: 0.01, Seed: 11, PollBan: sim.PollBan{Disabled: true},
		Latency: map[provider.Kind]sim.Latency{provider.KindRecaptchaV2: slowRecaptcha}})
	f.worker("e2e-w", 10)
	g := f.serve("e2e", filepath.Join(t.TempDir(), "gateway.db"), nil)

	// in.php/res.php, text and json.
	var ids []string
	for i := range 3 {
		ids = append(ids, g.inOK(t, keyQA, distinct(turnstile(), fmt.Sprint(i))))
	}
	tokens := map[string]string{}
	for _, id := range ids {
		ans := g.resFinal(t, keyQA, id)
		token, ok := strings.CutPrefix(ans, "OK|")
		if !ok || len(token) < 100 {
			t.Fatalf("res.php %s: %q, want OK|<turnstile token>", id, ans)
		}
		tokens[id] = token
	}
	bulk := g.form(t, http.MethodGet, "/res.php", url.Values{"key": {keyQA}, "action": {"get"}, "ids": {strings.Join(ids, ",")}})
	if want := tokens[ids[0]] + "|" + tokens[ids[1]] + "|" + tokens[ids[2]]; bulk != want {
		t.Errorf("bulk res.php: %q, want the three tokens", bulk)
	}
	var js struct {
		Status  int    `json:"status"`
		Request string `json:"request"`
	}
	json.Unmarshal([]byte(g.form(t, http.MethodGet, "/res.php", url.Values{"key": {keyQA}, "action": {"get"}, "id": {ids[0]}, "json": {"1"}})), &js)
	if js.Status != 1 || js.Request != tokens[ids[0]] {
		t.Errorf("res.php json: %+v", js)
	}
	if got := g.form(t, http.MethodGet, "/res.php", url.Values{"key": {keyOther}, "action": {"get"}, "id": {ids[0]}}); got != "ERROR_WRONG_CAPTCHA_ID" {
		t.Errorf("another client's id: %q", got)
	}
	if got := g.form(t, http.MethodGet, "/res.php", url.Values{"key": {keyQA}, "action": {"getbalance"}}); got != "ERROR_NO_SLOT_AVAILABLE" {
		t.Errorf("getbalance on a gateway without a balance: %q, want ERROR_NO_SLOT_AVAILABLE (try again later)", got)
	}

	// The JSON API: create, long-poll, a known id, events.
	events := g.events(t, keyOther)
	var c created
	g.api(t, "POST", "/v1/tasks", keyQA, "["+apiTurnstileOwn("j1")+","+apiTurnstileOwn("j2")+"]", http.StatusAccepted, &c)
	if len(c.Tasks) != 2 || c.Tasks[0].ID != "j1" || c.Tasks[0].Status != captchaq.StatusQueued || c.Tasks[1].ID != "j2" {
		t.Fatalf("create: %+v", c)
	}
	for _, id := range []string{"j1", "j2"} {
		if v := g.waitFinal(t, keyQA, id); v.Status != captchaq.StatusSolved || v.Result == nil || v.Result.Token == "" || v.Result.ID != id {
			t.Fatalf("%s: %+v", id, v)
		}
	}
	g.api(t, "POST", "/v1/tasks", keyQA, apiTurnstileOwn("j1"), http.StatusAccepted, &c)
	if !c.Tasks[0].Existed || c.Tasks[0].Status != captchaq.StatusSolved {
		t.Errorf("j1 again: %+v, want existed and solved", c.Tasks[0])
	}
	g.api(t, "POST", "/v1/tasks", keyOther, apiTurnstileOwn("o1"), http.StatusAccepted, nil)
	if ev := events.next(t); ev.ID != "o1" || ev.Status != captchaq.StatusSolved || ev.Token == "" {
		t.Errorf("event: %+v, want o1 solved", ev)
	}

	// max_inflight 1: a second task waits for the first to finish; a
	// cancel finishes it (the worker keeps solving it, its answer is
	// dropped).
	slowKey := gatewayClients[2].Key
	first := g.inOK(t, slowKey, distinct(recaptcha(), "first"))
	v := server.TaskView{}
	g.api(t, "GET", "/v1/tasks/"+first, slowKey, "", http.StatusOK, &v)
	if v.Status != captchaq.StatusInFlight {
		t.Errorf("a task at the fleet: %s, want inflight", v.Status)
	}
	if got := g.form(t, http.MethodPost, "/in.php", url.Values{"key": {slowKey}, "method": {"userrecaptcha"}, "googlekey": {"6Le-x"}, "pageurl": {"https://shop.example/a"}}); got != "ERROR_NO_SLOT_AVAILABLE" {
		t.Fatalf("over max_inflight: %q", got)
	}
	g.api(t, "DELETE", "/v1/tasks/"+first, slowKey, "", http.StatusOK, &v)
	if v.Status != captchaq.StatusFailed || v.Result.ErrorCode != captchaq.CodeCanceled {
		t.Fatalf("cancel: %+v", v)
	}
	if got := g.form(t, http.MethodGet, "/res.php", url.Values{"key": {slowKey}, "action": {"get"}, "id": {first}}); got != "ERROR_CAPTCHA_UNSOLVABLE" {
		t.Errorf("res.php of a canceled task: %q", got)
	}
	g.inOK(t, slowKey, distinct(recaptcha(), "second"))
	var dl struct {
		DeadLetters []server.TaskView `json:"dead_letters"`
		Total       int               `json:"total"`
	}
	g.api(t, "GET", "/v1/deadletters", slowKey, "", http.StatusOK, &dl)
	if dl.Total != 1 || dl.DeadLetters[0].ID != first || dl.DeadLetters[0].Result.ErrorCode != captchaq.CodeCanceled {
		t.Fatalf("dead letters: %+v", dl)
	}

	// Stats, metrics, readiness: what this gateway accepted and received.
	var st server.Stats
	g.api(t, "GET", "/v1/stats", keyAdmin, "", http.StatusOK, &st)
	m := st.Metrics
	if m.Submitted != 8 || m.Solved != 6 || m.Failed != 1 || m.QueueDepth != 1 || m.DepthByPriority[5] != 1 || m.Threads != 0 || !st.Ready {
		t.Errorf("stats: submitted %d solved %d failed %d depth %d %v threads %d ready %v; want 8 6 1 1 map[5:1] 0 true",
			m.Submitted, m.Solved, m.Failed, m.QueueDepth, m.DepthByPriority, m.Threads, st.Ready)
	}
	byName := map[string]server.ClientStats{}
	for _, cs := range st.Clients {
		byName[cs.Name] = cs
	}
	if q, s := byName["qa"], byName["slow"]; q.Accepted != 5 || q.Solved != 5 || q.Inflight != 0 || s.Accepted != 2 || s.Failed != 1 || s.Inflight != 1 {
		t.Errorf("client stats: qa %+v slow %+v", q, s)
	}
	tasksQueue, replyQueue := f.cfg.Prefix+".tasks", f.cfg.Prefix+".replies.e2e"
	if n, ok := st.Broker[tasksQueue]; !ok || n != 0 || len(st.Broker) != 3 {
		t.Errorf("broker depths %v, want %s: 0, the reply and dead-letter queues", st.Broker, tasksQueue)
	}
	if _, ok := st.Broker[replyQueue]; !ok {
		t.Errorf("broker depths %v lack %s", st.Broker, replyQueue)
	}
	mreq := mustRequest(t, "GET", g.url+"/metrics")
	mreq.Header.Set("Authorization", "Bearer "+keyAdmin)
	metrics := g.do(t, mreq, http.StatusOK)
	for _, want := range []string{
		"captchaq_tasks_submitted_total 8", "captchaq_tasks_solved_total 6", "captchaq_tasks_failed_total 1",
		`captchaq_broker_queue_ready{queue="` + tasksQueue + `"} 0`, `captchaq_client_tasks_inflight{client="slow"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if got := g.do(t, mustRequest(t, "GET", g.url+"/readyz"), http.StatusOK); got != "ready" {
		t.Errorf("/readyz: %q", got)
	}

	// Replaying the canceled task counts against slow's max_inflight of 1,
	// which the second task fills: refused, still a dead letter.
	var e struct {
		Error string `json:"error"`
	}
	g.api(t, "POST", "/v1/deadletters/replay", keyAdmin, `{"ids":["slow/`+first+`"]}`, http.StatusTooManyRequests, &e)
	if !strings.Contains(e.Error, `client "slow" has 1 unfinished tasks; its max_inflight is 1`) {
		t.Fatalf("replay over max_inflight: %+v", e)
	}
	g.api(t, "GET", "/v1/tasks/"+first, slowKey, "", http.StatusOK, &v)
	if v.Status != captchaq.StatusFailed {
		t.Errorf("not replayed: %s, want failed", v.Status)
	}
	// A rate of one task a second: the second at once is refused. The
	// priority parameter is the task's.
	burstKey := gatewayClients[3].Key
	urgent := g.inOK(t, burstKey, distinct(url.Values{"method": {"turnstile"}, "sitekey": {"0x4AAAAAAA"}, "pageurl": {"https://shop.example/checkout"}, "priority": {"1"}}, "urgent"))
	if got := g.form(t, http.MethodPost, "/in.php", distinct(url.Values{"key": {burstKey}, "method": {"turnstile"}, "sitekey": {"0x4AAAAAAA"}, "pageurl": {"https://shop.example/checkout"}}, "late")); got != "MAX_USER_TURN" {
		t.Errorf("over the rate: %q, want MAX_USER_TURN", got)
	}
	if v := g.waitFinal(t, burstKey, urgent); v.Status != captchaq.StatusSolved || v.Priority != 1 {
		t.Errorf("urgent task: %+v, want solved at priority 1", v)
	}

	// Every task reached the provider once: 5 + 1 + 1 Turnstile for qa,
	// other and burst, and two reCAPTCHAs.
	testbound.Until(t, "nine tasks at the simulator", func() bool { return f.sim.Stats().Accepted >= 9 })
	// The fault looked for is a tenth submit (a task published twice):
	// it has 100 ms to show. The pause cannot make the test pass.
	time.Sleep(100 * time.Millisecond)
	if s := f.sim.Stats(); s.Accepted != 9 || s.Duplicates != 0 {
		t.Errorf("simulator accepted %d (duplicates %d), want 9 and 0", s.Accepted, s.Duplicates)
	}
	if c := g.gw.Counts(); c != (amqp.GatewayCounts{Accepted: 9, Results: 8}) {
		t.Errorf("gateway counts %+v, want 9 accepted, 8 results, nothing dropped", c)
	}
}

func mustRequest(t *testing.T, method, u string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// eventStream reads result events of one client.
type eventStream struct {
	lines *bufio.Scanner
}

func (b *bundle) events(t *testing.T, key string) *eventStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", b.url+"/v1/events?key="+key, nil)
	resp, err := b.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	s := &eventStream{lines: bufio.NewScanner(resp.Body)}
	s.lines.Buffer(nil, 1<<20)
	return s
}

func (s *eventStream) next(t *testing.T) captchaq.Result {
	t.Helper()
	var r captchaq.Result
	s.nextInto(t, &r)
	return r
}

// nextInto decodes the next result event into v.
func (s *eventStream) nextInto(t *testing.T, v any) {
	t.Helper()
	for s.lines.Scan() {
		data, ok := strings.CutPrefix(s.lines.Text(), "data: ")
		if !ok || strings.Contains(data, `"dropped"`) {
			continue
		}
		if err := json.Unmarshal([]byte(data), v); err != nil {
			t.Fatalf("event %q: %v", data, err)
		}
		return
	}
	t.Fatalf("event stream ended: %v", s.lines.Err())
}

// TestGatewaysShareFleet: two gateways on one fleet, with the same
// clients and the same task ids, each get exactly their own results.
func TestGatewaysShareFleet(t *testing.T) {
	t.Parallel()
	f := newFleetRig(t, sim.Config{Threads: 20, LatencyScale: 0.01, Seed: 12, PollBan: sim.PollBan{Disabled: true}})
	f.worker("share-w1", 5)
	f.worker("share-w2", 5)
	dir := t.TempDir()
	gws := map[string]*gatewayBundle{
		"a": f.serve("gw-a", filepath.Join(dir, "a.db"), nil),
		"b": f.serve("gw-b", filepath.Join(dir, "b.db"), nil),
	}
	const n = 10
	for name, g := range gws {
		var body []string
		for i := range n {
			body = append(body, geetest(fmt.Sprintf("t%02d", i), fmt.Sprintf("%s-challenge-%02d-", name, i)))
		}
		g.api(t, "POST", "/v1/tasks", keyQA, "["+strings.Join(body, ",")+"]", http.StatusAccepted, nil)
	}
	for name, g := range gws {
		for i := range n {
			id := fmt.Sprintf("t%02d", i)
			v := g.waitFinal(t, keyQA, id)
			var ans map[string]string
			if v.Status != captchaq.StatusSolved || v.Result == nil || json.Unmarshal(v.Result.Answer, &ans) != nil {
				t.Fatalf("gateway %s, %s: %+v", name, id, v)
			}
			// The simulator answers a GeeTest challenge with it plus two
			// letters: this answer is for this gateway's task.
			if want := fmt.Sprintf("%s-challenge-%02d-", name, i); !strings.HasPrefix(ans["geetest_challenge"], want) || len(ans["geetest_challenge"]) != len(want)+2 {
				t.Errorf("gateway %s, %s: challenge %q, want %q and two letters", name, id, ans["geetest_challenge"], want)
			}
		}
		if c := g.gw.Counts(); c != (amqp.GatewayCounts{Accepted: n, Results: n}) {
			t.Errorf("gateway %s counts %+v, want %d accepted and results, nothing dropped", name, c, n)
		}
	}
	if s := f.sim.Stats(); s.Accepted != 2*n || s.Duplicates != 0 {
		t.Errorf("simulator accepted %d (duplicates %d), want %d and 0", s.Accepted, s.Duplicates, 2*n)
	}
}

// slowSubmit is a gateway whose submits take longer than SubmitWait.
type slowSubmit struct {
	*amqp.Gateway
	took time.Duration
}

func (s slowSubmit) Submit(ctx context.Context, t captchaq.ValidTask) error {
	time.Sleep(s.took) // the fault: a submit slower than SubmitWait
	return s.Gateway.Submit(ctx, t)
}

// TestGatewaySubmitNotBoundBySubmitWait: SubmitWait is the wait for room
// in the server's own queue; a gateway's submit (publish, confirm, record)
// that takes longer is not refused (nor published and then refused).
func TestGatewaySubmitNotBoundBySubmitWait(t *testing.T) {
	t.Parallel()
	f := newFleetRig(t, sim.Config{Threads: 5, LatencyScale: 0.01, Seed: 15, PollBan: sim.PollBan{Disabled: true}})
	f.config = func(c *server.Config) {
		c.SubmitWait = time.Millisecond
		c.Backend = slowSubmit{Gateway: c.Backend.(*amqp.Gateway), took: 20 * time.Millisecond}
	}
	g := f.serve("slow-submit", filepath.Join(t.TempDir(), "gateway.db"), nil)
	var c created
	g.api(t, "POST", "/v1/tasks", keyQA, "["+apiTurnstileOwn("s1")+","+apiTurnstileOwn("s2")+"]", http.StatusAccepted, &c)
	if len(c.Tasks) != 2 || c.Tasks[0].ID != "s1" || c.Tasks[1].ID != "s2" {
		t.Fatalf("created %+v, want s1 and s2", c)
	}
	if got := g.gw.Counts().Accepted; got != 2 {
		t.Errorf("gateway accepted %d, want 2", got)
	}
}

// TestGatewayRestart: a gateway closed mid-run and opened again on the
// same store file answers every task exactly once: every pingback comes
// once, res.php answers every id (the first incarnation's too), and the
// provider solved each task once. The first gateway stops while its
// pingbacks are still being sent (they must all arrive), and with tasks
// still at the fleet, whose results wait in the reply queue for the second.
func TestGatewayRestart(t *testing.T) {
	t.Parallel()
	f := newFleetRig(t, sim.Config{Threads: 20, LatencyScale: 0.05, Seed: 13, PollBan: sim.PollBan{Disabled: true}})
	stopWorker := f.worker("restart-w", 5)
	var pbMu sync.Mutex
	pingbacks := map[string][]string{}
	arrived := make(chan struct{}, 1)
	release := make(chan struct{})
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		select {
		case arrived <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-r.Context().Done():
			return // given up by the sender: not a delivery
		}
		pbMu.Lock()
		pingbacks[r.Form.Get("id")] = append(pingbacks[r.Form.Get("id")], r.Form.Get("code"))
		pbMu.Unlock()
	}))
	t.Cleanup(hook.Close)
	var releaseOnce sync.Once
	open := func() { releaseOnce.Do(func() { close(release) }) }
	answered := func() int {
		pbMu.Lock()
		defer pbMu.Unlock()
		return len(pingbacks)
	}
	path := filepath.Join(t.TempDir(), "gateway.db")
	g1 := f.serve("restart", path, nil)
	t.Cleanup(open) // before the gateways stop: their pingbacks may be held
	const n = 40
	var ids []string
	submit := func(i int) {
		v := distinct(turnstile(), fmt.Sprint(i))
		v.Set("pingback", hook.URL+"/done")
		ids = append(ids, g1.inOK(t, keyQA, v))
	}
	// The first half is solved and recorded; its pingbacks are held at
	// the receiver.
	for i := range n / 2 {
		submit(i)
	}
	testbound.Until(t, "the first half recorded", func() bool { return g1.gw.Counts().Results == n/2 })
	select {
	case <-arrived:
	case <-time.After(90 * time.Second):
		t.Fatal("no pingback of the first half within 90s")
	}
	// The second half waits at the fleet with no worker.
	stopWorker()
	for i := n / 2; i < n; i++ {
		submit(i)
	}
	stopped := make(chan struct{})
	go func() {
		g1.stop()
		close(stopped)
	}()
	testbound.Until(t, "the first gateway closed", func() bool { return errors.Is(g1.gw.Ready(context.Background()), captchaq.ErrClosed) })
	open()
	select {
	case <-stopped:
	case <-time.After(90 * time.Second):
		t.Fatal("the first gateway did not stop within 90s")
	}
	first := g1.gw.Counts()
	if got := answered(); got != n/2 {
		t.Errorf("%d pingbacks by the first gateway's stop, want the first half's %d", got, n/2)
	}
	// A worker solves the second half while no gateway runs; its results
	// wait in the reply queue for the second gateway.
	f.worker("restart-w2", 5)
	g2 := f.serve("restart", path, nil)
	testbound.Until(t, "every pingback", func() bool { return answered() == n })
	second := g2.gw.Counts()
	for _, id := range ids {
		pbMu.Lock()
		codes := pingbacks[id]
		pbMu.Unlock()
		if len(codes) != 1 {
			t.Errorf("task %s: %d pingbacks, want 1", id, len(codes))
			continue
		}
		if ans := g2.resFinal(t, keyQA, id); ans != "OK|"+codes[0] {
			t.Errorf("res.php %s after the restart: %.40q, want OK| and the pingback's token", id, ans)
		}
	}
	// Its stop sends every pingback it queued: none more came.
	g2.stop()
	if got := answered(); got != n {
		t.Errorf("%d tasks with pingbacks, want %d", got, n)
	}
	if want := (amqp.GatewayCounts{Accepted: n, Results: n / 2}); first != want {
		t.Errorf("counts before the restart %+v, want %+v", first, want)
	}
	if want := (amqp.GatewayCounts{Results: n / 2}); second != want {
		t.Errorf("counts after the restart %+v, want %+v", second, want)
	}
	if s := f.sim.Stats(); s.Accepted != n || s.Duplicates != 0 {
		t.Errorf("simulator accepted %d (duplicates %d), want %d and 0", s.Accepted, s.Duplicates, n)
	}
}

// TestGatewayDashboard: the dashboard of a gateway shows the broker's
// queues instead of threads, and counts what the fleet solves.
func TestGatewayDashboard(t *testing.T) {
	f := newFleetRig(t, sim.Config{Threads: 20, LatencyScale: 0.01, Seed: 14, PollBan: sim.PollBan{Disabled: true}})
	f.worker("dash-w", 5)
	g := f.serve("dash", filepath.Join(t.TempDir(), "gateway.db"), nil)
	ctx := browser(t)
	tasks, failed := f.cfg.Prefix+".tasks", f.cfg.Prefix+".failed"
	if err := chromedp.Do(ctx,
		openDashboard(g.url, keyAdmin),
		waitText("#solved", "0"),
		waitText("#broker li:first-child", failed+": 0"),
	); err != nil {
		t.Fatalf("dashboard did not load: %v", err)
	}
	shown, err := chromedp.Run(ctx, chromedp.Evaluate[string](`[document.getElementById("threads-card").hidden, document.getElementById("broker-card").hidden, document.getElementById("broker").textContent].join(" | ")`))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("true | false | %s: 0%s: 0%s: 0", failed, f.cfg.Prefix+".replies.dash", tasks)
	if shown != want {
		t.Errorf("threads hidden | broker hidden | broker list: %q, want %q", shown, want)
	}
	for i := range 4 {
		g.inOK(t, keyQA, distinct(turnstile(), fmt.Sprint(i)))
	}
	if err := chromedp.Do(ctx, waitText("#solved", "4"), waitText("#submitted", "4"), waitText("#success", "100.0%")); err != nil {
		t.Fatalf("solved count did not reach 4: %v", err)
	}
	// The charts: the broker's queues instead of the threads.
	charts, err := chromedp.Run(ctx, chromedp.Poll[string](`(() => { const c = window.captchaqCharts || {};
	  if (!c["chart-broker"]) return false;
	  return [document.getElementById("chart-threads").closest(".chart").hidden,
	    c["chart-broker"].series.slice(1).map((s) => s.label).join(","),
	    c["chart-broker"].data[0].length > 0].join(" | "); })()`, chromedp.WithPollingInterval(50*time.Millisecond)))
	if err != nil {
		t.Fatalf("no broker chart: %v", err)
	}
	if want := fmt.Sprintf("true | %s,%s,%s | true", failed, f.cfg.Prefix+".replies.dash", tasks); charts != want {
		t.Errorf("threads chart hidden | broker chart series | has samples: %q, want %q", charts, want)
	}
}
