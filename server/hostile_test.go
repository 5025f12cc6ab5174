package server_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/server"
)

type apiErr struct {
	Error string `json:"error"`
	Field string `json:"field"`
}

// apiRefuses posts body to /v1/tasks and checks that it is refused with a
// 400 naming field, with an error that says text.
func (b *bundle) apiRefuses(t *testing.T, body, field, text string) {
	t.Helper()
	var e apiErr
	b.api(t, "POST", "/v1/tasks", keyQA, body, http.StatusBadRequest, &e)
	if e.Field != field || !strings.Contains(e.Error, text) {
		t.Errorf("%.80s: %+v, want field %s and %q", body, e, field, text)
	}
}

// inRefuses posts a Turnstile task to in.php with the client's key, then
// name=value, and checks that the answer is want.
func (b *bundle) inRefuses(t *testing.T, name, value, want string) {
	t.Helper()
	v := turnstile()
	v.Set("key", keyQA)
	v.Set(name, value)
	if got := b.form(t, "POST", "/in.php", v); got != want {
		t.Errorf("in.php with %s: %q, want %q", name, got, want)
	}
}

// A JSON API post task names no path: the server opens none, and the
// answer is the same whether the path exists or not.
func TestAPIPostFileIsNotAPath(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	real := filepath.Join(t.TempDir(), "secret.png")
	if err := os.WriteFile(real, []byte("GIF89a-secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	var first string
	for _, path := range []string{"/etc/hostname", "/dev/zero", real, real + ".missing"} {
		var e apiErr
		b.api(t, "POST", "/v1/tasks", keyQA, `{"method":"post","params":{"file":"`+path+`"}}`, http.StatusBadRequest, &e)
		if e.Field != "params.file" || strings.Contains(e.Error, path) || !strings.Contains(e.Error, "a path is not read here") {
			t.Errorf("%s: %+v", path, e)
		}
		if first == "" {
			first = e.Error
		} else if e.Error != first {
			t.Errorf("answers differ by path: %q vs %q", e.Error, first)
		}
	}
	// The image's bytes, base64-encoded, are an upload: solved.
	img := base64.StdEncoding.EncodeToString([]byte("GIF89a-captcha"))
	b.api(t, "POST", "/v1/tasks", keyQA, `{"id":"up","method":"post","params":{"file":"`+img+`"}}`, http.StatusAccepted, nil)
	if v := b.waitFinal(t, keyQA, "up"); v.Status != "solved" {
		t.Errorf("upload: %+v", v)
	}
}

func TestAPIReservedParamsAndImageCap(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	for _, name := range []string{"Key", "KEY", "key", "pingback", "SOFT_ID", "header_acao", "Method", "JSON"} {
		b.apiRefuses(t, `{"method":"turnstile","params":{"sitekey":"0x4","pageurl":"https://a.example/","`+name+`":"x"}}`, "params."+name, "reserved in any letter case")
	}
	big := base64.StdEncoding.EncodeToString(make([]byte, provider.MaxImageBytes+1))
	b.apiRefuses(t, `{"method":"base64","params":{"body":"`+big+`"}}`, "params.body", "the provider takes at most 614400")
	// in.php: field names are read in any letter case, so a KEY beside
	// the real key is the key field itself, never a param passed on: the
	// request is refused and nothing reaches the provider.
	b.inRefuses(t, "KEY", "smuggled", "ERROR_WRONG_USER_KEY")
}

func TestAPINullTasks(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	for _, body := range []string{"null", "[null]", " null ", `[{"method":"turnstile","params":{"sitekey":"0x4","pageurl":"https://a.example/"}},null]`} {
		var e apiErr
		b.api(t, "POST", "/v1/tasks", keyQA, body, http.StatusBadRequest, &e)
		if !strings.Contains(e.Error, "null is not a task") {
			t.Errorf("%s: %+v", body, e)
		}
	}
}

func TestPingbackUserInfoRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	b.apiRefuses(t, `{"method":"turnstile","params":{"sitekey":"0x4","pageurl":"https://a.example/"},"pingback":"http://guest:guest@hooks.example/x"}`, "pingback", "must not carry a user or password")
	b.inRefuses(t, "pingback", "http://u:p@hooks.example/x", "ERROR_BAD_PARAMETERS")
}

// /metrics on the main listener needs an admin key; non-admin stats show
// the client's own numbers only; no page may be framed; ?key= works on
// the event stream only.
func TestOperatorSurfaces(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	b.inOK(t, keyQA, turnstile())
	req := func(path, key string) *http.Request {
		r := mustReq("GET", b.url+path)
		if key != "" {
			r.Header.Set("Authorization", "Bearer "+key)
		}
		return r
	}
	b.do(t, req("/metrics", ""), http.StatusUnauthorized)
	b.do(t, req("/metrics", keyQA), http.StatusUnauthorized)
	if got := b.do(t, req("/metrics", keyAdmin), http.StatusOK); !strings.Contains(got, "captchaq_tasks_submitted_total") {
		t.Errorf("admin /metrics: %.200s", got)
	}

	var mine, all struct {
		Metrics map[string]any   `json:"metrics"`
		Clients []map[string]any `json:"clients"`
		Broker  map[string]int   `json:"broker"`
	}
	b.api(t, "GET", "/v1/stats", keyQA, "", http.StatusOK, &mine)
	b.api(t, "GET", "/v1/stats", keyAdmin, "", http.StatusOK, &all)
	if len(mine.Clients) != 1 || mine.Clients[0]["name"] != "qa" || mine.Metrics != nil || mine.Broker != nil {
		t.Errorf("client stats show more than its own: %+v", mine)
	}
	if len(all.Clients) != 3 || all.Metrics == nil {
		t.Errorf("admin stats: %+v", all)
	}

	resp, err := b.http.Do(req("/", ""))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("X-Frame-Options") != "DENY" || resp.Header.Get("Content-Security-Policy") != dashboardCSP {
		t.Errorf("framing headers: %v", resp.Header)
	}

	b.do(t, req("/v1/stats?key="+keyQA, ""), http.StatusUnauthorized)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ev, _ := http.NewRequestWithContext(ctx, "GET", b.url+"/v1/events?key="+keyQA, nil)
	resp, err = b.http.Do(ev)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("event stream with ?key=: HTTP %d", resp.StatusCode)
	}
}

// getbalance with the provider unreachable says so without the
// provider's address (nor its key).
func TestBalanceErrorNamesNoProviderAddress(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there: connection refused
	down, err := provider.NewClient(provider.ClientConfig{BaseURL: "http://" + addr, Key: "provider-secret"})
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, options{server: func(c *server.Config) { c.Balance = down.Balance }})
	got := b.form(t, http.MethodGet, "/res.php", url.Values{"key": {keyQA}, "action": {"getbalance"}, "json": {"1"}})
	_, port, _ := net.SplitHostPort(addr)
	if !strings.Contains(got, `"request":"ERROR_NO_SLOT_AVAILABLE"`) || !strings.Contains(got, "cannot reach the provider") ||
		strings.Contains(got, port) || strings.Contains(got, "://") || strings.Contains(got, "provider-secret") {
		t.Errorf("getbalance with the provider down: %s", got)
	}
}

// serveMeasured serves req in this goroutine and returns the answer and
// the bytes allocated meanwhile (by the whole process: call it from a test
// that is not parallel).
func (b *bundle) serveMeasured(req *http.Request) (*httptest.ResponseRecorder, uint64) {
	w := httptest.NewRecorder()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.srv.Handler().ServeHTTP(w, req)
	runtime.ReadMemStats(&after)
	return w, after.TotalAlloc - before.TotalAlloc
}

// res.php's ids= past BulkMaxIDs is refused before it is split: a body of
// a million commas costs about its own size, not 16 bytes per comma.
func TestBulkIDsCountedBeforeSplit(t *testing.T) {
	// Not parallel: it measures what the request allocates.
	b := setup(t, options{})
	const n = 1 << 20
	req := httptest.NewRequest(http.MethodPost, "/res.php", strings.NewReader("key="+keyQA+"&action=get&ids="+strings.Repeat(",", n)))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	w, alloc := b.serveMeasured(req)
	if got, want := w.Body.String(), "ERROR_BAD_PARAMETERS"; got != want {
		t.Errorf("res.php with %d ids: %q, want %q", n+1, got, want)
	}
	if alloc > 10*n {
		t.Errorf("res.php with a %d-byte ids= allocated %d bytes", n, alloc)
	}
}

// A task array past MaxTasksPerRequest is refused as it is read: a body of
// a million tiny elements costs about its own size, not a slice of them.
func TestAPITaskArrayCountedAsRead(t *testing.T) {
	// Not parallel: it measures what the request allocates.
	b := setup(t, options{})
	const n = 1 << 19
	req := httptest.NewRequest(http.MethodPost, "/v1/tasks", strings.NewReader("["+strings.Repeat("0,", n)+"0]"))
	req.Header.Set("Authorization", "Bearer "+keyQA)
	w, alloc := b.serveMeasured(req)
	var e apiErr
	json.Unmarshal(w.Body.Bytes(), &e)
	if want := fmt.Sprintf("body: %d tasks in one request; the server takes at most 1000", n+1); w.Code != http.StatusRequestEntityTooLarge || !strings.Contains(e.Error, want) {
		t.Errorf("%d tiny tasks: HTTP %d %+v, want 413 and %q", n+1, w.Code, e, want)
	}
	if alloc > 10*2*n {
		t.Errorf("a %d-byte task array allocated %d bytes", 2*n, alloc)
	}
}

// A param given twice in two letter cases is refused: the provider reads
// names in any case and takes one, maybe not the one validated.
func TestAPIParamInTwoCasesRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	b.apiRefuses(t, `{"method":"turnstile","params":{"sitekey":"0x4","pageurl":"https://a.example/","PageURL":"not a url"}}`, "params.pageurl", `"PageURL" and "pageurl" name one field`)
	b.apiRefuses(t, `{"method":"userrecaptcha","params":{"googlekey":"6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-","pageurl":"https://a.example/","proxy":"u:p@1.2.3.4:8080","Proxy":"http://bad"}}`, "params.proxy", `"Proxy" and "proxy" name one field`)
}

// res.php's error_text for a failed task names no address, as the API's
// view of the same task does not: the provider's URL is the operator's.
func TestResErrorTextNamesNoProviderAddress(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := captchaq.NewMemoryStore(captchaq.MemoryStoreConfig{})
	task := captchaq.Task{ID: "qa/9", Tenant: "qa", Method: "turnstile", Params: map[string]string{"sitekey": "0x4AAAAAAA", "pageurl": "https://shop.example/checkout"}}
	if _, _, err := mem.Enqueue(ctx, []captchaq.Task{task}, time.Now()); err != nil {
		t.Fatal(err)
	}
	b := setup(t, options{server: func(c *server.Config) { c.Queue.Store = mem }})
	const leak = `Post "https://api.provider.example/in.php": dial tcp 10.0.0.5:443: i/o timeout`
	for _, code := range []string{"ERROR_PROXY_CONNECTION_FAILED", captchaq.CodeExpired} {
		failed := captchaq.Result{ID: "qa/9", Method: "turnstile", Status: captchaq.StatusFailed, ErrorCode: code, Error: "NETWORK: cannot reach the provider: " + leak}
		if err := mem.Finish(ctx, failed); err != nil {
			t.Fatal(err)
		}
		got := b.form(t, http.MethodGet, "/res.php", url.Values{"key": {keyQA}, "action": {"get"}, "id": {"9"}, "json": {"1"}})
		if !strings.Contains(got, "cannot reach the provider") || strings.Contains(got, "provider.example") || strings.Contains(got, "10.0.0.5") {
			t.Errorf("res.php, %s: %s", code, got)
		}
	}
}
