package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/server"
	"github.com/captchaq/captchaq/storetest"
)

type created struct {
	Tasks []server.TaskView `json:"tasks"`
}

func TestAPICreateGetWaitCancel(t *testing.T) {
	t.Parallel()
	b := setup(t, options{threads: 1})
	// One task: blocks the only thread for the whole test.
	var one created
	b.api(t, "POST", "/v1/tasks", keyQA, `{"id":"blocker","method":"userrecaptcha","params":{"googlekey":"k","pageurl":"https://a.example"}}`, http.StatusAccepted, &one)
	if len(one.Tasks) != 1 || one.Tasks[0].ID != "blocker" || one.Tasks[0].Status != captchaq.StatusQueued {
		t.Fatalf("create one: %+v", one)
	}
	// Many: queued behind it.
	var many created
	b.api(t, "POST", "/v1/tasks", keyQA, "["+apiTurnstile("a")+","+apiTurnstile("b")+"]", http.StatusAccepted, &many)
	if len(many.Tasks) != 2 || many.Tasks[0].ID != "a" || many.Tasks[1].ID != "b" {
		t.Fatalf("create many: %+v", many)
	}
	// The same id again is answered as it is.
	b.api(t, "POST", "/v1/tasks", keyQA, apiTurnstile("a"), http.StatusAccepted, &one)
	if !one.Tasks[0].Existed {
		t.Errorf("repeat of a: %+v, want existed", one.Tasks[0])
	}
	// Another client may use the same id: its own task.
	var theirs created
	b.api(t, "POST", "/v1/tasks", keyOther, apiTurnstile("a"), http.StatusAccepted, &theirs)
	if theirs.Tasks[0].Existed {
		t.Errorf("other client's a: existed")
	}
	// A short wait on a queued task answers it still queued.
	var v server.TaskView
	b.api(t, "GET", "/v1/tasks/a?wait=50ms", keyQA, "", http.StatusOK, &v)
	if v.Status != captchaq.StatusQueued {
		t.Errorf("a after 50ms: %s, want queued", v.Status)
	}
	// Cancel a (queued): failed with CANCELED, a dead letter.
	b.api(t, "DELETE", "/v1/tasks/a", keyQA, "", http.StatusOK, &v)
	if v.Status != captchaq.StatusFailed || v.Result == nil || v.Result.ErrorCode != captchaq.CodeCanceled {
		t.Errorf("cancel a: %+v", v)
	}
	// The blocker is in flight: 409.
	var e map[string]any
	for v.Status != captchaq.StatusInFlight {
		v = server.TaskView{}
		b.api(t, "GET", "/v1/tasks/blocker?wait=20ms", keyQA, "", http.StatusOK, &v)
	}
	b.api(t, "DELETE", "/v1/tasks/blocker", keyQA, "", http.StatusConflict, &e)
	b.api(t, "DELETE", "/v1/tasks/nope", keyQA, "", http.StatusNotFound, &e)
	// res.php on a CANCELED task: unsolvable, the real code in the text.
	if got := b.form(t, http.MethodGet, "/res.php", url.Values{"key": {keyQA}, "action": {"get"}, "id": {"a"}, "json": {"1"}}); !strings.Contains(got, `"request":"ERROR_CAPTCHA_UNSOLVABLE"`) || !strings.Contains(got, "CANCELED") {
		t.Errorf("res.php canceled: %s", got)
	}
	// Dead letters: qa sees a; other sees none; replay puts it back.
	var dl struct {
		DeadLetters []server.TaskView `json:"dead_letters"`
		Total       int               `json:"total"`
	}
	b.api(t, "GET", "/v1/deadletters", keyQA, "", http.StatusOK, &dl)
	if dl.Total != 1 || dl.DeadLetters[0].ID != "a" {
		t.Fatalf("dead letters: %+v", dl)
	}
	b.api(t, "GET", "/v1/deadletters", keyOther, "", http.StatusOK, &dl)
	if dl.Total != 0 {
		t.Errorf("other's dead letters: %+v", dl)
	}
	var rep struct {
		Replayed int      `json:"replayed"`
		IDs      []string `json:"ids"`
	}
	b.api(t, "POST", "/v1/deadletters/replay", keyQA, `{"ids":["a"]}`, http.StatusOK, &rep)
	if rep.Replayed != 1 || rep.IDs[0] != "a" {
		t.Fatalf("replay: %+v", rep)
	}
	b.api(t, "GET", "/v1/tasks/a", keyQA, "", http.StatusOK, &v)
	if v.Status != captchaq.StatusQueued {
		t.Errorf("a after replay: %s, want queued", v.Status)
	}
	b.api(t, "POST", "/v1/deadletters/replay", keyQA, `{"ids":["a"],"all":true}`, http.StatusBadRequest, &e)
	if e["field"] != "ids" {
		t.Errorf("replay with both: %v", e)
	}
}

func TestAPIBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	cases := []struct {
		name, body, field string
		index             *int
	}{
		{"missing pageurl", `{"method":"turnstile","params":{"sitekey":"x"}}`, "params.pageurl", nil},
		{"priority not a number", `{"method":"turnstile","params":{"sitekey":"x","pageurl":"https://a.example"},"priority":"high"}`, "priority", nil},
		{"unknown field", `{"method":"turnstile","prio":1}`, "prio", nil},
		{"no method", `{"params":{}}`, "method", nil},
		{"unsupported", `{"method":"hcaptcha","params":{"sitekey":"x","pageurl":"https://a.example"}}`, "method", nil},
		{"bad pingback", `{"method":"turnstile","params":{"sitekey":"x","pageurl":"https://a.example"},"pingback":"nope"}`, "pingback", nil},
		{"second of two", "[" + apiTurnstile("ok") + `,{"method":"turnstile","params":{"sitekey":"x","pageurl":"a.example"}}]`, "params.pageurl", ptr(1)},
		{"duplicate ids", "[" + apiTurnstile("d") + "," + apiTurnstile("d") + "]", "id", ptr(1)},
		{"slash in id", apiTurnstile("a/b"), "id", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var e struct {
				Error string `json:"error"`
				Field string `json:"field"`
				Index *int   `json:"index"`
			}
			b.api(t, "POST", "/v1/tasks", keyQA, c.body, http.StatusBadRequest, &e)
			if e.Field != c.field || e.Error == "" || !strings.Contains(e.Error, strings.TrimPrefix(c.field, "params.")) {
				t.Errorf("error %+v, want field %q named in the text", e, c.field)
			}
			if (c.index == nil) != (e.Index == nil) || (c.index != nil && *c.index != *e.Index) {
				t.Errorf("index %v, want %v", e.Index, c.index)
			}
		})
	}
	// Nothing of a refused batch was accepted.
	var e map[string]any
	b.api(t, "GET", "/v1/tasks/ok", keyQA, "", http.StatusNotFound, &e)
	b.api(t, "GET", "/v1/stats", "wrong-key-123", "", http.StatusUnauthorized, &e)
}

func ptr(i int) *int { return &i }

func TestAPIEventsAndStats(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	req, _ := http.NewRequest("GET", b.url+"/v1/events", nil)
	req.Header.Set("Authorization", "Bearer "+keyQA)
	resp, err := b.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	r := bufio.NewReader(resp.Body)
	if line, _ := r.ReadString('\n'); line != ": connected\n" {
		t.Fatalf("first line %q", line)
	}
	// Another client's result must not reach qa's stream: submit it first.
	b.waitFinal(t, keyOther, b.inOK(t, keyOther, turnstile()))
	ids := map[string]bool{}
	for _, id := range []string{"e1", "e2", "e3"} {
		b.api(t, "POST", "/v1/tasks", keyQA, apiTurnstile(id), http.StatusAccepted, nil)
		ids[id] = true
	}
	for len(ids) > 0 {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var res captchaq.Result
		if err := json.Unmarshal([]byte(data), &res); err != nil {
			t.Fatal(err)
		}
		if !ids[res.ID] || res.Status != captchaq.StatusSolved || res.Token == "" {
			t.Fatalf("event %+v; waiting for %v", res, ids)
		}
		delete(ids, res.ID)
	}
	var st server.Stats
	b.api(t, "GET", "/v1/stats", keyQA, "", http.StatusOK, &st)
	if st.Metrics != nil || len(st.Clients) != 1 || st.Clients[0].Name != "qa" || st.Clients[0].Solved != 3 || st.Clients[0].Accepted != 3 || st.Clients[0].Inflight != 0 {
		t.Errorf("stats for qa: %+v", st)
	}
	st = server.Stats{}
	b.api(t, "GET", "/v1/stats", keyAdmin, "", http.StatusOK, &st)
	if st.Metrics == nil || st.Metrics.Solved != 4 || st.Metrics.Submitted != 4 || len(st.Clients) != 3 || st.Clients[1].Name != "other" || st.Clients[1].Solved != 1 {
		t.Errorf("stats for admin: %+v", st.Clients)
	}
}

func TestLimits(t *testing.T) {
	t.Parallel()
	b := setup(t, options{
		clients: []server.Client{
			{Name: "slow", Key: "slow-key-0001", Rate: 1},
			{Name: "capped", Key: "capped-key-01", MaxInflight: 1},
			{Name: "qa", Key: keyQA},
		},
		server: func(c *server.Config) { c.MaxBodyBytes = 4096 },
	})
	// Rate 1/s with a burst of 1: the second submit at once is refused.
	b.inOK(t, "slow-key-0001", turnstile())
	v := turnstile()
	v.Set("key", "slow-key-0001")
	if got := b.form(t, http.MethodPost, "/in.php", v); got != "MAX_USER_TURN" {
		t.Errorf("over rate on in.php: %q", got)
	}
	var e map[string]any
	h := b.api(t, "POST", "/v1/tasks", "slow-key-0001", apiTurnstile("r"), http.StatusTooManyRequests, &e)
	if h.Get("Retry-After") == "" {
		t.Errorf("429 without Retry-After")
	}
	// In-flight cap 1: a task that stays in flight fills it.
	b.inOK(t, "capped-key-01", recaptcha())
	v = turnstile()
	v.Set("key", "capped-key-01")
	if got := b.form(t, http.MethodPost, "/in.php", v); got != "ERROR_NO_SLOT_AVAILABLE" {
		t.Errorf("over in-flight cap on in.php: %q", got)
	}
	b.api(t, "POST", "/v1/tasks", "capped-key-01", apiTurnstile("c"), http.StatusTooManyRequests, &e)
	// Body over 4096 bytes.
	v = url.Values{"key": {keyQA}, "method": {"base64"}, "body": {strings.Repeat("A", 8000)}}
	if got := b.form(t, http.MethodPost, "/in.php", v); got != "ERROR_TOO_BIG_CAPTCHA_FILESIZE" {
		t.Errorf("big body on in.php: %q", got)
	}
	b.api(t, "POST", "/v1/tasks", keyQA, `{"method":"base64","params":{"body":"`+strings.Repeat("A", 8000)+`"}}`, http.StatusRequestEntityTooLarge, &e)
	if !strings.Contains(e["error"].(string), "4096") {
		t.Errorf("413 error %v does not name the limit", e)
	}
}

func TestClientPingback(t *testing.T) {
	t.Parallel()
	type call struct{ ctype, body string }
	var mu sync.Mutex
	got := map[string]call{}
	arrived := make(chan struct{}, 4)
	rx := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got[r.URL.Path] = call{r.Header.Get("Content-Type"), string(body)}
		mu.Unlock()
		arrived <- struct{}{}
	}))
	defer rx.Close()
	b := setup(t, options{})
	v := turnstile()
	v.Set("pingback", rx.URL+"/front")
	id := b.inOK(t, keyQA, v)
	b.api(t, "POST", "/v1/tasks", keyQA, `{"id":"p1","method":"turnstile","params":{"sitekey":"0x4A","pageurl":"https://a.example"},"pingback":"`+rx.URL+`/api"}`, http.StatusAccepted, nil)
	front := b.waitFinal(t, keyQA, id)
	api := b.waitFinal(t, keyQA, "p1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 2 {
		select {
		case <-arrived:
		case <-ctx.Done():
			t.Fatal("pingbacks did not arrive")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	wantForm := url.Values{"id": {id}, "code": {front.Result.Token}}.Encode()
	if c := got["/front"]; c.ctype != "application/x-www-form-urlencoded" || c.body != wantForm {
		t.Errorf("front pingback %+v, want %s", c, wantForm)
	}
	var res captchaq.Result
	if c := got["/api"]; c.ctype != "application/json" || json.Unmarshal([]byte(c.body), &res) != nil || res.ID != "p1" || res.Token != api.Result.Token {
		t.Errorf("api pingback %+v, want id p1 token %s", got["/api"], api.Result.Token)
	}
}

func TestMetricsAndHealth(t *testing.T) {
	t.Parallel()
	b := setup(t, options{noStart: true})
	if got := b.do(t, mustReq("GET", b.url+"/healthz"), http.StatusOK); got != "ok" {
		t.Errorf("healthz %q", got)
	}
	b.do(t, mustReq("GET", b.url+"/readyz"), http.StatusServiceUnavailable)
	if err := b.srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	b.do(t, mustReq("GET", b.url+"/readyz"), http.StatusOK)
	for range 3 {
		b.waitFinal(t, keyQA, b.inOK(t, keyQA, turnstile()))
	}
	// The queue's series (from promq) and the server's own, exactly.
	const series = `
# HELP captchaq_tasks_submitted_total Tasks taken into the queue.
# TYPE captchaq_tasks_submitted_total counter
captchaq_tasks_submitted_total 3
# HELP captchaq_tasks_solved_total Tasks solved.
# TYPE captchaq_tasks_solved_total counter
captchaq_tasks_solved_total 3
# HELP captchaq_tasks_failed_total Tasks failed for good.
# TYPE captchaq_tasks_failed_total counter
captchaq_tasks_failed_total 0
# HELP captchaq_threads_plan The plan's threads.
# TYPE captchaq_threads_plan gauge
captchaq_threads_plan 5
# HELP captchaq_threads_in_use Threads taken: tasks at the provider or being submitted.
# TYPE captchaq_threads_in_use gauge
captchaq_threads_in_use 0
# HELP captchaq_queue_depth Tasks waiting for a thread, by priority.
# TYPE captchaq_queue_depth gauge
captchaq_queue_depth{priority="5"} 0
# HELP captchaq_oldest_waiting_seconds The longest wait among tasks waiting for a thread.
# TYPE captchaq_oldest_waiting_seconds gauge
captchaq_oldest_waiting_seconds 0
# HELP captchaq_paused 1 while an account error stops all sending.
# TYPE captchaq_paused gauge
captchaq_paused 0
# HELP captchaq_client_tasks_inflight Unfinished tasks per client.
# TYPE captchaq_client_tasks_inflight gauge
captchaq_client_tasks_inflight{client="qa"} 0
captchaq_client_tasks_inflight{client="other"} 0
captchaq_client_tasks_inflight{client="ops"} 0
# HELP captchaq_client_tasks_solved_total Tasks solved per client.
# TYPE captchaq_client_tasks_solved_total counter
captchaq_client_tasks_solved_total{client="qa"} 3
captchaq_client_tasks_solved_total{client="other"} 0
captchaq_client_tasks_solved_total{client="ops"} 0
# HELP captchaq_client_tasks_failed_total Tasks failed for good per client.
# TYPE captchaq_client_tasks_failed_total counter
captchaq_client_tasks_failed_total{client="qa"} 0
captchaq_client_tasks_failed_total{client="other"} 0
captchaq_client_tasks_failed_total{client="ops"} 0
# HELP captchaq_http_requests_total Requests served, by route and HTTP status.
# TYPE captchaq_http_requests_total counter
captchaq_http_requests_total{code="200",route="in.php"} 3
captchaq_http_requests_total{code="200",route="tasks_get"} 3
`
	// The operator's own listener (serve --metrics-listen) needs no key.
	ops := httptest.NewServer(b.srv.MetricsHandler())
	defer ops.Close()
	if err := testutil.ScrapeAndCompare(ops.URL+"/metrics", strings.NewReader(series),
		"captchaq_tasks_submitted_total", "captchaq_tasks_solved_total", "captchaq_tasks_failed_total",
		"captchaq_retries_total", "captchaq_threads_plan", "captchaq_threads_in_use", "captchaq_queue_depth",
		"captchaq_oldest_waiting_seconds", "captchaq_paused", "captchaq_client_tasks_inflight",
		"captchaq_client_tasks_solved_total", "captchaq_client_tasks_failed_total", "captchaq_http_requests_total"); err != nil {
		t.Error(err)
	}
	// Every route has its histogram from the start; in.php's three calls are
	// timed, the long polls of waitFinal are not.
	wantTimed := map[string]uint64{"in.php": 3, "res.php": 0, "tasks_create": 0, "tasks_get": 0, "tasks_cancel": 0,
		"events": 0, "stats": 0, "history": 0, "deadletters": 0, "deadletters_replay": 0, "createtask": 0, "reservoirs": 0}
	if got := requestDurations(t, b.srv.Registry()); !maps.Equal(got, wantTimed) {
		t.Errorf("captchaq_http_request_duration_seconds counts %v, want %v", got, wantTimed)
	}
	problems, err := testutil.GatherAndLint(b.srv.Registry())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	// A bad provider key pauses all sending: not ready.
	b.sim.SetAccount(simBadKey())
	b.inOK(t, keyQA, turnstile())
	testbound.Until(t, "sending paused by the bad key", func() bool { return b.srv.Queue().Paused() != nil })
	body := b.do(t, mustReq("GET", b.url+"/readyz"), http.StatusServiceUnavailable)
	if !strings.Contains(body, "ERROR_WRONG_USER_KEY") {
		t.Errorf("readyz while paused: %q", body)
	}
}

// requestDurations gathers the request duration histogram's observation
// counts by route.
func requestDurations(t *testing.T, g prometheus.Gatherer) map[string]uint64 {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, f := range families {
		if f.GetName() != "captchaq_http_request_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "route" {
					got[l.GetValue()] = m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return got
}

func mustReq(method, u string) *http.Request {
	r, err := http.NewRequest(method, u, nil)
	if err != nil {
		panic(err)
	}
	return r
}

// The tasks of one create go to the Store together; when the queue has
// room for only some of them, the answer says how many were accepted, and
// only those exist.
func TestAPICreateManyStoresTogether(t *testing.T) {
	t.Parallel()
	store := storetest.NewRecorder(captchaq.NewMemoryStore(captchaq.MemoryStoreConfig{}))
	b := setup(t, options{noStart: true, server: func(c *server.Config) {
		c.Queue.Store, c.Queue.MaxQueued, c.SubmitWait = store, 3, 50*time.Millisecond
	}})
	var many created
	b.api(t, "POST", "/v1/tasks", keyQA, "["+apiTurnstile("a")+","+apiTurnstile("b")+"]", http.StatusAccepted, &many)
	if len(many.Tasks) != 2 || many.Tasks[0].ID != "a" || many.Tasks[1].ID != "b" {
		t.Fatalf("create a, b: %+v", many)
	}
	if got := store.Enqueues(); !slices.Equal(got, []int{2}) {
		t.Fatalf("Enqueue calls of %v tasks, want one of 2", got)
	}
	var e map[string]any
	h := b.api(t, "POST", "/v1/tasks", keyQA, "["+apiTurnstile("c")+","+apiTurnstile("d")+","+apiTurnstile("e")+"]", http.StatusServiceUnavailable, &e)
	if want := "the queue is full: try again shortly (1 of the 3 new tasks were accepted)"; e["error"] != want || h.Get("Retry-After") != "1" {
		t.Errorf("create c, d, e with room for one: %v, Retry-After %q; want %q, 1", e, h.Get("Retry-After"), want)
	}
	if got := store.Enqueues(); !slices.Equal(got, []int{2, 1}) {
		t.Errorf("Enqueue calls of %v tasks, want 2 then 1", got)
	}
	var v server.TaskView
	b.api(t, "GET", "/v1/tasks/c", keyQA, "", http.StatusOK, &v)
	if v.Status != captchaq.StatusQueued {
		t.Errorf("c: %+v, want queued", v)
	}
	for _, id := range []string{"d", "e"} {
		b.api(t, "GET", "/v1/tasks/"+id, keyQA, "", http.StatusNotFound, &e)
	}
}
