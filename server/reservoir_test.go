package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

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
		Status  int    `json:"status"`
		Request string `json:"request"`
	}
	got := b.form(t, http.MethodGet, "/res.php", url.Values{"key": {keyQA}, "action": {"get"}, "id": {id}, "json": {"1"}})
	if err := json.Unmarshal([]byte(got), &res); err != nil || res.Status != 1 || res.Request == "" {
		t.Fatalf("first res.php poll after the submit: %s, want the token", got)
	}
	if pb := testbound.Receive(t, "the pingback", pingbacks); pb.Get("id") != id || pb.Get("code") != res.Request {
		t.Errorf("pingback %v, want id %s and the token", pb, id)
	}

	ct := b.ctCreate(t, keyQA, `{"type":"TurnstileTaskProxyless","websiteURL":"`+v.Get("pageurl")+`","websiteKey":"`+v.Get("sitekey")+`"}`)
	if m := b.ct(t, "getTaskResult", `{"clientKey":"`+keyQA+`","taskId":`+ct+`}`); m["status"] != "ready" {
		t.Errorf("first getTaskResult after createTask: %v, want ready", m)
	}
	if c := q.Reservoirs()[0]; c.Hits != 2 || c.Misses != 0 {
		t.Errorf("reservoir counts %+v: want both submits to hit", c)
	}
}
