package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/server"
	"github.com/captchaq/captchaq/sim"
)

// ct POSTs a createTask method's body; the answer must be HTTP 200 JSON.
func (b *bundle) ct(t *testing.T, method, body string) map[string]any {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.url+"/"+method, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Fatalf("%s: HTTP %d %v: %s", method, resp.StatusCode, resp.Header, raw)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s: %s is not JSON", method, raw)
	}
	return m
}

// ctCreate creates a task and returns its taskId, which must be an
// integer.
func (b *bundle) ctCreate(t *testing.T, key, task string) string {
	t.Helper()
	m := b.ct(t, "createTask", `{"clientKey":"`+key+`","task":`+task+`}`)
	id, ok := m["taskId"].(float64)
	if m["errorId"] != 0.0 || !ok || id != float64(int64(id)) {
		t.Fatalf("createTask %s: %v, want errorId 0 and an integer taskId", task, m)
	}
	return strconv.FormatFloat(id, 'f', 0, 64)
}

// ctWait polls getTaskResult until the task is no longer processing.
func (b *bundle) ctWait(t *testing.T, key, id string) map[string]any {
	t.Helper()
	var m map[string]any
	testbound.Until(t, "task "+id+" done processing", func() bool {
		m = b.ct(t, "getTaskResult", `{"clientKey":"`+key+`","taskId":`+id+`}`)
		return m["status"] != "processing"
	})
	return m
}

func fastSim(c *sim.Config) { c.Latency = nil }

// Every type through the createTask front: the solution fields of its
// type, the same answer res.php gives for the id, and in.php's tasks read
// by getTaskResult.
func TestCreateTaskFrontTypes(t *testing.T) {
	t.Parallel()
	b := setup(t, options{sim: fastSim})
	for _, tc := range []struct {
		name, task string
		fields     []string
	}{
		{"image", `{"type":"ImageToTextTask","body":"iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==","numeric":1,"minLength":4,"maxLength":4}`, []string{"text"}},
		{"reCAPTCHA v2 (Anti-Captcha's name)", `{"type":"NoCaptchaTaskProxyless","websiteURL":"https://shop.example/signup","websiteKey":"6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-"}`, []string{"gRecaptchaResponse", "token"}},
		{"reCAPTCHA v3", `{"type":"RecaptchaV3TaskProxyless","websiteURL":"https://shop.example/","websiteKey":"6Le-v3","minScore":0.3,"pageAction":"login"}`, []string{"gRecaptchaResponse", "token"}},
		{"Turnstile", `{"type":"TurnstileTaskProxyless","websiteURL":"https://shop.example/login","websiteKey":"0x4AAAAAAA","userAgent":"MyBrowser/1.0"}`, []string{"token", "userAgent"}},
		{"GeeTest", `{"type":"GeeTestTaskProxyless","websiteURL":"https://shop.example/","gt":"81388ea1fc187e0c335c0a8907ff2625","challenge":"2e2f0f65240058b683cb6ea21c303eea"}`, []string{"challenge", "validate", "seccode"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := b.ctCreate(t, keyQA, tc.task)
			m := b.ctWait(t, keyQA, id)
			sol, _ := m["solution"].(map[string]any)
			if m["errorId"] != 0.0 || m["status"] != "ready" || len(sol) != len(tc.fields) {
				t.Fatalf("getTaskResult: %v, want ready with %v", m, tc.fields)
			}
			for _, f := range tc.fields {
				if s, _ := sol[f].(string); s == "" {
					t.Errorf("solution.%s missing: %v", f, sol)
				}
			}
			res := b.form(t, http.MethodGet, "/res.php", url.Values{"key": {keyQA}, "action": {"get"}, "id": {id}, "json": {"1"}})
			var ans struct {
				Status  int             `json:"status"`
				Request json.RawMessage `json:"request"`
			}
			json.Unmarshal([]byte(res), &ans)
			var want string
			switch {
			case sol["text"] != nil:
				want = sol["text"].(string)
			case sol["challenge"] != nil:
				var doc map[string]string
				json.Unmarshal(ans.Request, &doc)
				if doc["geetest_challenge"] != sol["challenge"] || doc["geetest_validate"] != sol["validate"] || doc["geetest_seccode"] != sol["seccode"] {
					t.Errorf("res.php %s and getTaskResult %v differ", ans.Request, sol)
				}
				return
			default:
				want = sol["token"].(string)
			}
			if ans.Status != 1 || string(ans.Request) != strconv.Quote(want) {
				t.Errorf("res.php answers %s, getTaskResult %q", ans.Request, want)
			}
			if sol["userAgent"] != nil && sol["userAgent"] != "MyBrowser/1.0" {
				t.Errorf("userAgent %v, want the task's", sol["userAgent"])
			}
			if sol["text"] != nil && (len(want) != 4 || strings.Trim(want, "0123456789") != "") {
				t.Errorf("image text %q: want 4 digits (numeric 1, length 4)", want)
			}
		})
	}
	// A task from in.php is read by getTaskResult, and the other way round.
	id := b.inOK(t, keyQA, turnstile())
	if m := b.ctWait(t, keyQA, id); m["status"] != "ready" || m["solution"].(map[string]any)["userAgent"] != nil {
		t.Errorf("an in.php task by getTaskResult: %v", m)
	}
	// Another client's id is not found.
	if m := b.ct(t, "getTaskResult", `{"clientKey":"`+keyOther+`","taskId":`+id+`}`); m["errorCode"] != "ERROR_NO_SUCH_CAPCHA_ID" || m["errorId"] != 16.0 {
		t.Errorf("another client's task: %v", m)
	}
}

func TestCreateTaskFrontRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t, options{
		clients: []server.Client{{Name: "qa", Key: keyQA, MaxInflight: 1}},
		sim:     func(c *sim.Config) { c.Balance = 4.5 },
		server:  func(c *server.Config) { c.MaxBodyBytes = 64 << 10 },
	})
	if m := b.ct(t, "getBalance", `{"clientKey":"`+keyQA+`"}`); m["errorId"] != 0.0 || m["balance"] != 4.5 {
		t.Errorf("getBalance: %v", m)
	}
	// One reCAPTCHA stays in flight (the simulator holds it an hour).
	b.ctCreate(t, keyQA, `{"type":"RecaptchaV2TaskProxyless","websiteURL":"https://shop.example/","websiteKey":"6Le-a"}`)
	for _, tc := range []struct {
		name, method, body, code string
		id                       float64
		in                       string
	}{
		{"wrong key", "createTask", `{"clientKey":"nope","task":{"type":"TurnstileTaskProxyless"}}`, "ERROR_KEY_DOES_NOT_EXIST", 1, "clientKey"},
		{"key in another letter case is no key", "getBalance", `{"ClientKey":"` + strings.ToUpper(keyQA) + `"}`, "ERROR_KEY_DOES_NOT_EXIST", 1, ""},
		{"no task", "createTask", `{"clientKey":"` + keyQA + `"}`, "ERROR_TASK_ABSENT", 22, "task: required"},
		{"unknown type", "createTask", `{"clientKey":"` + keyQA + `","task":{"type":"KeyCaptchaTask"}}`, "ERROR_TASK_NOT_SUPPORTED", 23, "KeyCaptchaTask"},
		{"a type no provider solves", "createTask", `{"clientKey":"` + keyQA + `","task":{"type":"HCaptchaTaskProxyless","websiteURL":"https://a.example/","websiteKey":"k"}}`, "ERROR_TASK_NOT_SUPPORTED", 23, "hCaptcha"},
		{"page URL without a scheme", "createTask", `{"clientKey":"` + keyQA + `","task":{"type":"TurnstileTaskProxyless","websiteURL":"shop.example/x","websiteKey":"0x4"}}`, "ERROR_PAGEURL", 5, "has no scheme"},
		{"no site key", "createTask", `{"clientKey":"` + keyQA + `","task":{"type":"RecaptchaV2TaskProxyless","websiteURL":"https://a.example/"}}`, "ERROR_RECAPTCHA_INVALID_SITEKEY", 31, "googlekey"},
		{"a pingback inside the task is in.php's field, refused (callbackUrl is this protocol's)", "createTask", `{"clientKey":"` + keyQA + `","task":{"type":"TurnstileTaskProxyless","websiteURL":"https://a.example/","websiteKey":"0x4","pingback":"http://169.254.169.254/"}}`, "ERROR_BAD_PARAMETERS", 110, "task.pingback: read as in.php's own field pingback"},
		{"max_inflight", "createTask", `{"clientKey":"` + keyQA + `","task":{"type":"TurnstileTaskProxyless","websiteURL":"https://a.example/","websiteKey":"0x4"}}`, "ERROR_NO_SLOT_AVAILABLE", 2, "max_inflight is 1"},
		{"callbackUrl with a password", "createTask", `{"clientKey":"` + keyQA + `","task":{"type":"TurnstileTaskProxyless","websiteURL":"https://a.example/","websiteKey":"0x4"},"callbackUrl":"https://u:p@hooks.example/"}`, "ERROR_BAD_PARAMETERS", 110, "callbackUrl"},
		{"reCAPTCHA API domain not Google's", "createTask", `{"clientKey":"` + keyQA + `","task":{"type":"RecaptchaV2EnterpriseTaskProxyless","websiteURL":"https://a.example/","websiteKey":"6Le-e","apiDomain":"www.gstatic.com"}}`, "ERROR_BAD_PARAMETERS", 110, `params.domain: "www.gstatic.com" is not a domain reCAPTCHA loads from; use google.com or recaptcha.net (createTask's apiDomain)`},
		{"enterprisePayload with a field in.php cannot carry", "createTask", `{"clientKey":"` + keyQA + `","task":{"type":"RecaptchaV2EnterpriseTaskProxyless","websiteURL":"https://a.example/","websiteKey":"6Le-e","enterprisePayload":{"s":"x","blob":"y"}}}`, "ERROR_BAD_PARAMETERS", 110, "task.enterprisePayload.blob: not carried: only s is"},
		{"cf_clearance without a proxy", "createTask", `{"clientKey":"` + keyQA + `","task":{"type":"TurnstileTask","cloudflareTaskType":"cf_clearance","websiteURL":"https://a.example/","websiteKey":"0x4","htmlPageBase64":"PGh0bWw+","userAgent":"UA"}}`, "ERROR_BAD_PROXY", 130, `task.proxyAddress: a proxy is required for TurnstileTask with cloudflareTaskType "cf_clearance"`},
		{"cf_clearance page not base64", "createTask", `{"clientKey":"` + keyQA + `","task":{"type":"TurnstileTask","cloudflareTaskType":"cf_clearance","websiteURL":"https://a.example/","websiteKey":"0x4","htmlPageBase64":"<html>","userAgent":"UA","proxyType":"http","proxyAddress":"10.0.0.1","proxyPort":80}}`, "ERROR_BAD_PARAMETERS", 110, "params.htmlPageBase64: not valid base64"},
		{"CaptchaFox without a user agent", "createTask", `{"clientKey":"` + keyQA + `","task":{"type":"CaptchaFoxTask","websiteURL":"https://a.example/","websiteKey":"sk","proxyType":"http","proxyAddress":"10.0.0.1","proxyPort":80}}`, "ERROR_BAD_PARAMETERS", 110, "task.userAgent: required for CaptchaFoxTask; the browser user agent"},
		{"grid without instructions", "createTask", `{"clientKey":"` + keyQA + `","task":{"type":"GridTask","body":"` + pngBody + `"}}`, "ERROR_BAD_PARAMETERS", 110, "params.textinstructions: required for grid"},
		{"Lemin without its captcha id", "createTask", `{"clientKey":"` + keyQA + `","task":{"type":"LeminTaskProxyless","websiteURL":"https://a.example/"}}`, "ERROR_BAD_PARAMETERS", 110, "params.captcha_id: required for lemin; the Lemin captcha id"},
		{"unknown id", "getTaskResult", `{"clientKey":"` + keyQA + `","taskId":1}`, "ERROR_NO_SUCH_CAPCHA_ID", 16, "taskId"},
		{"a report on a task not solved", "reportIncorrect", `{"clientKey":"` + keyQA + `","taskId":1}`, "ERROR_NO_SUCH_CAPCHA_ID", 16, ""},
		{"not JSON", "createTask", `{"clientKey":`, "ERROR_BAD_PARAMETERS", 110, "could not be read"},
		{"too big", "createTask", `{"clientKey":"` + keyQA + `","task":{"type":"ImageToTextTask","body":"` + strings.Repeat("A", 70<<10) + `"}}`, "ERROR_TOO_BIG_CAPTCHA_FILESIZE", 4, "limit"},
	} {
		m := b.ct(t, tc.method, tc.body)
		desc, _ := m["errorDescription"].(string)
		if m["errorId"] != tc.id || m["errorCode"] != tc.code || desc == "" || !strings.Contains(desc, tc.in) {
			t.Errorf("%s: %v, want errorId %v %s with %q", tc.name, m, tc.id, tc.code, tc.in)
		}
	}
	resp, err := b.http.Get(b.url + "/createTask")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `"errorCode":"ERROR_NO_SUCH_METHOD"`) {
		t.Errorf("GET /createTask: %s", body)
	}
}

// A callbackUrl gets getTaskResult's JSON with the taskId, once, through
// the guarded sender; reports reach the provider by its captcha id.
func TestCreateTaskFrontCallbackAndReports(t *testing.T) {
	t.Parallel()
	got := make(chan string, 4)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- r.URL.Path + " " + r.Header.Get("Content-Type") + " " + string(body)
	}))
	t.Cleanup(recv.Close)
	b := setup(t, options{sim: fastSim, server: func(c *server.Config) {
		pc := c.Queue.Provider.(*provider.Client)
		c.Report = func(ctx context.Context, r captchaq.Result, good bool) error {
			if good {
				return pc.ReportGood(ctx, r.CaptchaID)
			}
			return pc.ReportBad(ctx, r.CaptchaID)
		}
	}})
	id := b.ctCreate(t, keyQA, `{"type":"TurnstileTaskProxyless","websiteURL":"https://shop.example/","websiteKey":"0x4AAA"}`)
	cb := b.ct(t, "createTask", `{"clientKey":"`+keyQA+`","task":{"type":"TurnstileTaskProxyless","websiteURL":"https://shop.example/","websiteKey":"0x4AAA"},"callbackUrl":"`+recv.URL+`/hook/s3cret"}`)
	call := testbound.Receive(t, "the callback", got)
	parts := strings.SplitN(call, " ", 3)
	var m map[string]any
	if parts[0] != "/hook/s3cret" || parts[1] != "application/json" || json.Unmarshal([]byte(parts[2]), &m) != nil {
		t.Fatalf("callback %q", call)
	}
	if m["taskId"] != cb["taskId"] || m["status"] != "ready" || m["solution"].(map[string]any)["token"] == "" {
		t.Errorf("callback body %v, want task %v ready", m, cb["taskId"])
	}
	b.ctWait(t, keyQA, id)
	cbID := strconv.FormatFloat(cb["taskId"].(float64), 'f', 0, 64)
	b.ctWait(t, keyQA, cbID)
	// Each task is reported once: a second report of id goes nowhere.
	for _, r := range []struct{ method, id string }{{"reportIncorrectTokenCaptcha", id}, {"reportCorrect", cbID}, {"reportCorrect", id}} {
		if m := b.ct(t, r.method, `{"clientKey":"`+keyQA+`","taskId":`+r.id+`}`); m["errorId"] != 0.0 || m["status"] != "success" {
			t.Errorf("%s %s: %v", r.method, r.id, m)
		}
	}
	if st := b.sim.Stats(); st.ReportsBad != 1 || st.ReportsGood != 1 {
		t.Errorf("reports at the provider: %d bad, %d good; want 1 and 1", st.ReportsBad, st.ReportsGood)
	}
	select {
	case c := <-got:
		t.Errorf("a second callback: %s", c)
	default:
	}
}
