package server_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/server"
)

// New refuses a PublicURL the provider could not call back, naming the
// field and the fix: without a scheme every submit would fail.
func TestPublicURLCheckedAtNew(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"captchaq.example.com:8080":         `server: Config.PublicURL: "captchaq.example.com:8080" has no scheme; add https:// (e.g. https://captchaq.example.com:8080); give this server's address as the provider reaches it, e.g. https://captchaq.example.com`,
		"ftp://captchaq.example.com":        `server: Config.PublicURL: "ftp://captchaq.example.com" must be an http or https URL; give this server's address as the provider reaches it, e.g. https://captchaq.example.com`,
		"https://u:p@captchaq.example.com":  `server: Config.PublicURL: must not carry a user or password (user:pass@); put a secret in the path instead; give this server's address as the provider reaches it, e.g. https://captchaq.example.com`,
		"https://captchaq.example.com/?a=1": `server: Config.PublicURL: "https://captchaq.example.com/?a=1" has a query or fragment; give the server's base URL (the pingback path is appended to it)`,
		" https://captchaq.example.com":     `server: Config.PublicURL: " https://captchaq.example.com" has spaces around it; give the URL alone`,
	} {
		_, err := server.New(server.Config{
			Queue:     captchaq.Config{Provider: stubProvider{}},
			Clients:   []server.Client{{Name: "qa", Key: keyQA}},
			PublicURL: in,
		})
		if err == nil || err.Error() != want {
			t.Errorf("PublicURL %q: %v\nwant: %s", in, err, want)
		}
	}
}

// What a scheme-less public URL did before it was checked at start: the
// queue's pingback URL is captchaq.example.com:8080/pingback/SECRET, the
// provider client refuses it, and every task fails quoting it. No text a
// client reads (the task's last_error and result, res.php's answer,
// createTask's getTaskResult) holds the host or the secret.
func TestSchemelessPingbackURLLeaksToNoClient(t *testing.T) {
	t.Parallel()
	const secret = "5ec2e75ec2e75ec2e75ec2e75ec2e7aa"
	b := setup(t, options{server: func(c *server.Config) {
		c.Queue.PingbackURL = "captchaq.example.com:8080/pingback/" + secret
	}})
	leaks := func(where, text string) {
		t.Helper()
		if strings.Contains(text, secret) || strings.Contains(text, "captchaq.example.com") {
			t.Errorf("%s shows the pingback URL: %s", where, text)
		}
	}
	var taken struct {
		Tasks []server.TaskView `json:"tasks"`
	}
	b.api(t, "POST", "/v1/tasks", keyQA, `{"method":"turnstile","params":{"sitekey":"0x4","pageurl":"https://a.example/"}}`, http.StatusAccepted, &taken)
	v := b.waitFinal(t, keyQA, taken.Tasks[0].ID)
	if v.Status != captchaq.StatusFailed || v.Result == nil || !strings.Contains(v.Result.Error, `pingback: "(the server's pingback URL)" has no scheme`) {
		t.Fatalf("task %+v, want it failed on its pingback URL", v)
	}
	raw, _ := json.Marshal(v)
	leaks("GET /v1/tasks/{id}", string(raw))

	id := b.inOK(t, keyQA, turnstile())
	w := b.waitFinal(t, keyQA, id)
	if w.Status != captchaq.StatusFailed {
		t.Fatalf("in.php task %+v, want it failed", w)
	}
	res := b.form(t, http.MethodGet, "/res.php", url.Values{"key": {keyQA}, "action": {"get"}, "id": {id}, "json": {"1"}})
	if !strings.Contains(res, `"status":0`) || !strings.Contains(res, "(the server's pingback URL)") {
		t.Errorf("res.php: %s, want the failure with the URL hidden", res)
	}
	leaks("res.php", res)
	m := b.ct(t, "getTaskResult", `{"clientKey":"`+keyQA+`","taskId":`+id+`}`)
	ct, _ := json.Marshal(m)
	if m["errorId"] == 0.0 {
		t.Errorf("getTaskResult: %s, want the failure", ct)
	}
	leaks("getTaskResult", string(ct))
}
