package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"

	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/sim"
)

// pushRx receives pingbacks by path.
type pushRx struct {
	mu     sync.Mutex
	bodies map[string]string
	url    string
}

func newPushRx(t *testing.T) *pushRx {
	rx := &pushRx{bodies: map[string]string{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rx.mu.Lock()
		rx.bodies[r.URL.Path] = string(body)
		rx.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	rx.url = srv.URL
	return rx
}

// wait returns the body POSTed to path.
func (rx *pushRx) wait(t *testing.T, path string) string {
	t.Helper()
	var body string
	testbound.Until(t, "a pingback at "+path, func() bool {
		rx.mu.Lock()
		defer rx.mu.Unlock()
		var ok bool
		body, ok = rx.bodies[path]
		return ok
	})
	return body
}

// A token's bindings reach the client in every push and in res.php's
// ids= poll, as GET /v1/tasks/{id} shows them: an in.php pingback's
// useragent field, the API's pingback and events' "bindings", json=1's
// "bindings" by id. A Turnstile solved with the provider's user agent
// takes it; a CaptchaFox token, answered alone, the task's own; a token
// solved with none, an image, has none anywhere. The queue polls the
// simulator with ids= (a reCAPTCHA v2 stays in flight throughout), which
// answers tokens alone: the Turnstile's user agent comes from a poll of
// its id alone.
func TestBindingsReachPushesAndBulkPolls(t *testing.T) {
	t.Parallel()
	const solvedUA, taskUA = "Mozilla/5.0 (X11; Linux x86_64) SolvedBy/8", "Mozilla/5.0 (Windows NT 10.0) TaskOwn/2"
	for _, providerUA := range []string{solvedUA, ""} {
		t.Run("provider user agent "+providerUA, func(t *testing.T) {
			t.Parallel()
			b := setup(t, options{sim: func(c *sim.Config) {
				fastSim(c)
				c.UserAgent = providerUA
				c.Latency = map[provider.Kind]sim.Latency{provider.KindRecaptchaV2: slowRecaptcha}
			}})
			rx := newPushRx(t)
			b.inOK(t, keyQA, recaptcha())
			events := b.events(t, keyQA)
			ts := turnstile()
			ts.Set("pingback", rx.url+"/ts")
			tsID := b.inOK(t, keyQA, ts)
			imgID := b.inOK(t, keyQA, url.Values{"method": {"base64"}, "body": {"iVBORw0KGgo="}, "pingback": {rx.url + "/img"}})
			b.api(t, "POST", "/v1/tasks", keyQA, `{"id":"fox","method":"captchafox","params":{"sitekey":"sk_fox","pageurl":"https://shop.example/",`+
				`"userAgent":"`+taskUA+`","proxy":"10.1.2.3:8080","proxytype":"HTTP"},"pingback":"`+rx.url+`/fox"}`, http.StatusAccepted, nil)
			want := map[string]string{tsID: providerUA, imgID: "", "fox": taskUA}
			for id, ua := range want {
				if v := b.waitFinal(t, keyQA, id); (v.Bindings == nil) != (ua == "") || ua != "" && v.Bindings.UserAgent != ua {
					t.Errorf("GET /v1/tasks/%s: bindings %+v, want user agent %q", id, v.Bindings, ua)
				}
			}
			form := func(path string) url.Values { v, _ := url.ParseQuery(rx.wait(t, path)); return v }
			wantFields := 2
			if providerUA != "" {
				wantFields = 3
			}
			if f := form("/ts"); f.Get("code") == "" || f.Get("useragent") != providerUA || len(f) != wantFields {
				t.Errorf("in.php pingback %v, want id, code and useragent %q", f, providerUA)
			}
			if f := form("/img"); len(f) != 2 {
				t.Errorf("an image's in.php pingback %v, want id and code alone", f)
			}
			var fox map[string]any
			json.Unmarshal([]byte(rx.wait(t, "/fox")), &fox)
			if bd, _ := fox["bindings"].(map[string]any); bd["user_agent"] != taskUA || len(bd) != 1 {
				t.Errorf("API pingback %v, want bindings {user_agent: the task's}", fox)
			}
			seen := map[string]any{}
			for len(seen) < len(want) {
				var ev map[string]any
				events.nextInto(t, &ev)
				seen[ev["id"].(string)] = ev["bindings"]
			}
			for id, ua := range want {
				if bd, _ := seen[id].(map[string]any); ua == "" && seen[id] != nil || ua != "" && bd["user_agent"] != ua {
					t.Errorf("event of %s: bindings %v, want user agent %q", id, seen[id], ua)
				}
			}
			var bulk map[string]any
			json.Unmarshal([]byte(b.form(t, http.MethodGet, "/res.php", url.Values{"key": {keyQA}, "action": {"get"}, "ids": {tsID + "," + imgID}, "json": {"1"}})), &bulk)
			bound, _ := bulk["bindings"].(map[string]any)
			if providerUA == "" && bulk["bindings"] != nil || providerUA != "" && (len(bound) != 1 || bound[tsID].(map[string]any)["useragent"] != providerUA) {
				t.Errorf("res.php ids= json=1: %v, want bindings {%s: {useragent: %q}} alone", bulk, tsID, providerUA)
			}
		})
	}
}
