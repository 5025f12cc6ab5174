package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/server"
)

// An in.php submit as a 2captcha client sends it (json, soft_id,
// header_acao beside the captcha's params) matches a reservoir declared
// with the same method and params: the protocol's fields are not the
// task's. Its first res.php poll gets the token, and its pingback is
// sent at once. A createTask of the same captcha draws too: its first
// getTaskResult is ready.
func TestFrontSubmitsDrawFromReservoir(t *testing.T) {
	pingbacks := make(chan url.Values, 1)
	rx := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		v, _ := url.ParseQuery(string(body))
		pingbacks <- v
	}))
	defer rx.Close()
	v := turnstile()
	template := captchaq.Task{Method: v.Get("method"), Params: map[string]string{"sitekey": v.Get("sitekey"), "pageurl": v.Get("pageurl")}}
	b := setup(t, options{server: func(c *server.Config) {
		c.Queue.Threads = 4
		c.Queue.Reservoirs = []captchaq.ReservoirConfig{{Name: "checkout", Task: template, Size: 2}}
	}})
	q := b.srv.Queue()
	testbound.Until(t, "a token in stock", func() bool { return q.Reservoirs()[0].Stock == 2 })

	v.Set("soft_id", "4580")
	v.Set("header_acao", "0")
	v.Set("pingback", rx.URL+"/done")
	id := b.inOK(t, keyQA, v) // with json=1
	var res struct {
		Status    int    `json:"status"`
		Request   string `json:"request"`
		Reservoir string `json:"reservoir"`
		ExpiresAt int64  `json:"expires_at"`
	}
	got := b.form(t, http.MethodGet, "/res.php", url.Values{"key": {keyQA}, "action": {"get"}, "id": {id}, "json": {"1"}})
	if err := json.Unmarshal([]byte(got), &res); err != nil || res.Status != 1 || res.Request == "" {
		t.Fatalf("first res.php poll after the submit: %s, want the token", got)
	}
	if life := time.Until(time.Unix(res.ExpiresAt, 0)); res.Reservoir != "checkout" || life < 75*time.Second || life > 301*time.Second {
		t.Errorf("res.php json=1 answer %s: want reservoir checkout and expires_at within a Turnstile lifetime", got)
	}
	if text := b.form(t, http.MethodGet, "/res.php", url.Values{"key": {keyQA}, "action": {"get"}, "id": {id}}); text != "OK|"+res.Request {
		t.Errorf("plain res.php answer %q, want OK|token alone", text)
	}
	if pb := testbound.Receive(t, "the pingback", pingbacks); pb.Get("id") != id || pb.Get("code") != res.Request {
		t.Errorf("pingback %v, want id %s and the token", pb, id)
	}

	ct := b.ctCreate(t, keyQA, `{"type":"TurnstileTaskProxyless","websiteURL":"`+v.Get("pageurl")+`","websiteKey":"`+v.Get("sitekey")+`"}`)
	if m := b.ct(t, "getTaskResult", `{"clientKey":"`+keyQA+`","taskId":`+ct+`}`); m["status"] != "ready" || m["reservoir"] != "checkout" || m["expires_at"] == nil {
		t.Errorf("first getTaskResult after createTask: %v, want ready, from reservoir checkout, with expires_at", m)
	}
	if c := q.Reservoirs()[0]; c.Hits != 2 || c.Misses != 0 {
		t.Errorf("reservoir counts %+v: want both submits to hit", c)
	}
}

// GET /v1/reservoirs shows an admin each reservoir's declaration and live
// numbers, and refuses a client; /metrics carries the same numbers per
// reservoir. SetReservoirs swaps the set: a kept reservoir keeps its
// counts, and a bad set changes nothing.
func TestReservoirsView(t *testing.T) {
	v := turnstile()
	template := captchaq.Task{Method: v.Get("method"), Params: map[string]string{"sitekey": v.Get("sitekey"), "pageurl": v.Get("pageurl")}}
	b := setup(t, options{server: func(c *server.Config) {
		c.Queue.Threads = 4
		c.Queue.Reservoirs = []captchaq.ReservoirConfig{{Name: "checkout", Task: template, Size: 1, MinLife: time.Minute, Clients: []string{"qa"}}}
	}})
	q := b.srv.Queue()
	testbound.Until(t, "a token in stock", func() bool { return q.Reservoirs()[0].Stock == 1 })
	b.inOK(t, keyQA, v)

	b.api(t, http.MethodGet, "/v1/reservoirs", keyQA, "", http.StatusForbidden, nil)
	var got struct{ Reservoirs []server.ReservoirView }
	b.api(t, http.MethodGet, "/v1/reservoirs", keyAdmin, "", http.StatusOK, &got)
	if len(got.Reservoirs) != 1 {
		t.Fatalf("GET /v1/reservoirs: %+v, want checkout alone", got)
	}
	r := got.Reservoirs[0]
	if r.Name != "checkout" || r.Method != "turnstile" || r.Params["sitekey"] != v.Get("sitekey") || r.Size != float64(1) ||
		r.Max != captchaq.ReservoirMaxDefault || r.MinLife != "1m0s" || len(r.Clients) != 1 || r.Hits != 1 || r.HandedOut != 1 || r.Solved < 1 {
		t.Errorf("GET /v1/reservoirs: %+v, want checkout's declaration, 1 hit, 1 handed out, 1 or more solved", r)
	}
	rec := httptest.NewRecorder()
	b.srv.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	metrics := rec.Body.String()
	for _, line := range []string{`captchaq_reservoir_hits_total{reservoir="checkout"} 1`, `captchaq_reservoir_handed_out_total{reservoir="checkout"} 1`,
		`captchaq_reservoir_target{reservoir="checkout"} 1`, `captchaq_reservoir_misses_total{reservoir="checkout"} 0`} {
		if !strings.Contains(metrics, line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}

	bad := []captchaq.ReservoirConfig{{Name: "checkout", Task: template, MinLife: time.Hour}}
	if err := b.srv.SetReservoirs(bad); err == nil || !strings.Contains(err.Error(), "Reservoirs[0].MinLife") {
		t.Errorf("SetReservoirs(min life past the lifetime) = %v, want a Reservoirs[0].MinLife error", err)
	}
	login := captchaq.Task{Method: "turnstile", Params: map[string]string{"sitekey": v.Get("sitekey"), "pageurl": "https://example.com/login"}}
	if err := b.srv.SetReservoirs([]captchaq.ReservoirConfig{{Name: "checkout", Task: template, Size: 2}, {Name: "login", Task: login, Size: 1}}); err != nil {
		t.Fatal(err)
	}
	b.api(t, http.MethodGet, "/v1/reservoirs", keyAdmin, "", http.StatusOK, &got)
	if len(got.Reservoirs) != 2 || got.Reservoirs[0].Hits != 1 || got.Reservoirs[0].Size != float64(2) || got.Reservoirs[1].Name != "login" {
		t.Errorf("GET /v1/reservoirs after SetReservoirs: %+v, want checkout (its hit kept, size 2) and login", got.Reservoirs)
	}
}

// LoadReservoirs reads the file serve --reservoirs names, and refuses an
// unknown field, a size out of bounds, a bad min_life and a client not in
// the clients file, each naming the entry's field and the path.
func TestLoadReservoirs(t *testing.T) {
	clients := []server.Client{{Name: "qa", Key: keyQA}}
	write := func(body string) string {
		path := filepath.Join(t.TempDir(), "reservoirs.json")
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	path := write(`[{"name":"shop","method":"turnstile","params":{"sitekey":"0x4AAA","pageurl":"https://shop.example/checkout","min_score":0.3},"size":"auto","max":50,"min_life":"75s","clients":["qa"]},
		{"name":"login","method":"turnstile","params":{"sitekey":"0x4AAA","pageurl":"https://shop.example/login"},"size":3}]`)
	rcs, err := server.LoadReservoirs(path, clients)
	if err != nil {
		t.Fatal(err)
	}
	want := []captchaq.ReservoirConfig{
		{Name: "shop", Task: captchaq.Task{Method: "turnstile", Params: map[string]string{"sitekey": "0x4AAA", "pageurl": "https://shop.example/checkout", "min_score": "0.3"}},
			Max: 50, MinLife: 75 * time.Second, Clients: []string{"qa"}},
		{Name: "login", Task: captchaq.Task{Method: "turnstile", Params: map[string]string{"sitekey": "0x4AAA", "pageurl": "https://shop.example/login"}}, Size: 3},
	}
	if !reflect.DeepEqual(rcs, want) {
		t.Errorf("LoadReservoirs = %+v, want %+v", rcs, want)
	}
	for body, wantErr := range map[string]string{
		`[{"name":"a","method":"turnstile","sitekey":"x"}]`:              `unknown field "sitekey"`,
		`[{"name":"a","method":"turnstile","size":1001}]`:                `[0].size: 1001: give "auto"`,
		`[{"name":"a","method":"turnstile","size":"big"}]`:               `[0].size: "big"`,
		`[{"name":"a","method":"turnstile","max":5000}]`:                 `[0].max: 5000: give 1 to 1000`,
		`[{"name":"a","method":"turnstile","min_life":"75"}]`:            `[0].min_life: "75"`,
		`[{"name":"a","method":"turnstile","clients":["nobody"]}]`:       `[0].clients: "nobody" is no client of the clients file`,
		`[{"name":"a","params":{"sitekey":"x"}}]`:                        `[0].method: required`,
		`[{"name":"a","method":"turnstile","params":{"sitekey":["x"]}}]`: `[0].params.sitekey: ["x"] is neither a string nor a number`,
		`{"name":"a"}`: `want a JSON array like`,
	} {
		path := write(body)
		_, err := server.LoadReservoirs(path, clients)
		if err == nil || !strings.Contains(err.Error(), wantErr) || !strings.Contains(err.Error(), path) {
			t.Errorf("LoadReservoirs(%s) = %v, want an error naming %s and %q", body, err, path, wantErr)
		}
	}
}
