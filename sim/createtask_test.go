package sim_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/sim"
)

// ct POSTs a createTask method's JSON body and decodes the answer, which
// must be HTTP 200 JSON.
func (b *bundle) ct(t *testing.T, method, body string) map[string]any {
	t.Helper()
	resp, err := http.Post(b.base+"/"+method, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	raw := readBody(t, resp)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("%s: HTTP %d %s: %s", method, resp.StatusCode, resp.Header.Get("Content-Type"), raw)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		t.Fatalf("%s: %s is not JSON", method, raw)
	}
	return m
}

func TestCreateTaskProtocol(t *testing.T) {
	t.Parallel()
	clock := newManualClock()
	b := setup(t, sim.Config{Key: key, Balance: 9.5, Latency: tenSeconds(), Now: clock.Now, Methods: []string{"turnstile", "userrecaptcha", "base64", "geetest"}})

	if got := b.ct(t, "getBalance", `{"clientKey":"`+key+`"}`); got["errorId"] != 0.0 || got["balance"] != 9.5 {
		t.Errorf("getBalance: %v", got)
	}
	created := b.ct(t, "createTask", `{"clientKey":"`+key+`","task":{"type":"TurnstileTaskProxyless","websiteURL":"https://shop.example/login","websiteKey":"0x4AAA"}}`)
	id, ok := created["taskId"].(float64)
	if created["errorId"] != 0.0 || !ok || id != float64(int64(id)) || id < 1e10 {
		t.Fatalf("createTask: %v, want errorId 0 and an integer taskId", created)
	}
	idText := strconv.FormatFloat(id, 'f', 0, 64)
	if got := b.ct(t, "getTaskResult", `{"clientKey":"`+key+`","taskId":`+idText+`}`); !cmp.Equal(got, map[string]any{"errorId": 0.0, "status": "processing"}) {
		t.Errorf("getTaskResult before the solve: %v", got)
	}
	clock.Advance(10 * time.Second)
	ready := b.ct(t, "getTaskResult", `{"clientKey":"`+key+`","taskId":"`+idText+`"}`)
	sol, _ := ready["solution"].(map[string]any)
	tok, _ := sol["token"].(string)
	if ready["errorId"] != 0.0 || ready["status"] != "ready" || !strings.HasPrefix(tok, "0.") || sol["userAgent"] != nil {
		t.Errorf("getTaskResult once solved: %v", ready)
	}
	if ready["solveCount"] != 1.0 || ready["endTime"].(float64)-ready["createTime"].(float64) != 10 {
		t.Errorf("getTaskResult times: %v", ready)
	}
	// The same answer as res.php gives for the id.
	if got := b.poll(t, idText).str(t); got != tok {
		t.Errorf("res.php answers %q, getTaskResult %q", got, tok)
	}
	if got := b.ct(t, "reportIncorrectTokenCaptcha", `{"clientKey":"`+key+`","taskId":`+idText+`}`); !cmp.Equal(got, map[string]any{"errorId": 0.0, "status": "success"}) {
		t.Errorf("report: %v", got)
	}
	if st := b.srv.Stats(); st.ReportsBad != 1 || st.Calls.CreateTask != 5 || st.Calls.Submit != 1 || st.Calls.PollSingle != 3 || st.Calls.Balance != 1 {
		t.Errorf("stats: %+v, %d bad reports", st.Calls, st.ReportsBad)
	}

	for _, tc := range []struct {
		name, method, body, code string
		id                       float64
	}{
		{"wrong key", "createTask", `{"clientKey":"nope","task":{"type":"TurnstileTaskProxyless"}}`, "ERROR_KEY_DOES_NOT_EXIST", 1},
		{"no key", "getBalance", `{}`, "ERROR_KEY_DOES_NOT_EXIST", 1},
		{"no task", "createTask", `{"clientKey":"` + key + `"}`, "ERROR_TASK_ABSENT", 22},
		{"unknown type", "createTask", `{"clientKey":"` + key + `","task":{"type":"AmazonTask"}}`, "ERROR_TASK_NOT_SUPPORTED", 23},
		{"a type the service does not solve", "createTask", `{"clientKey":"` + key + `","task":{"type":"HCaptchaTaskProxyless","websiteURL":"https://a.example/","websiteKey":"k"}}`, "ERROR_TASK_NOT_SUPPORTED", 23},
		{"no page URL", "createTask", `{"clientKey":"` + key + `","task":{"type":"RecaptchaV2TaskProxyless","websiteKey":"6Le"}}`, "ERROR_PAGEURL", 5},
		{"no site key", "createTask", `{"clientKey":"` + key + `","task":{"type":"RecaptchaV2TaskProxyless","websiteURL":"https://a.example/"}}`, "ERROR_RECAPTCHA_INVALID_SITEKEY", 31},
		{"empty image", "createTask", `{"clientKey":"` + key + `","task":{"type":"ImageToTextTask","body":""}}`, "ERROR_ZERO_CAPTCHA_FILESIZE", 3},
		{"unknown id", "getTaskResult", `{"clientKey":"` + key + `","taskId":12345}`, "ERROR_NO_SUCH_CAPCHA_ID", 16},
		{"no id", "reportIncorrect", `{"clientKey":"` + key + `"}`, "ERROR_NO_SUCH_CAPCHA_ID", 16},
		{"a second report", "reportIncorrect", `{"clientKey":"` + key + `","taskId":` + idText + `}`, "ERROR_DUPLICATE_REPORT", 1},
	} {
		got := b.ct(t, tc.method, tc.body)
		if got["errorId"] != tc.id || got["errorCode"] != tc.code || got["errorDescription"] == "" {
			t.Errorf("%s: %v, want errorId %v %s with a description", tc.name, got, tc.id, tc.code)
		}
	}
	resp, err := http.Get(b.base + "/getBalance")
	if err != nil {
		t.Fatal(err)
	}
	if body := readBody(t, resp); !strings.Contains(body, `"errorCode":"ERROR_NO_SUCH_METHOD"`) {
		t.Errorf("GET: %s", body)
	}
	req, _ := http.NewRequest(http.MethodOptions, b.base+"/createTask", nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Errorf("preflight: %d %v", resp.StatusCode, resp.Header)
	}
}

// A createTask callbackUrl gets getTaskResult's JSON with the task's id.
func TestCreateTaskCallback(t *testing.T) {
	t.Parallel()
	got := make(chan string, 2)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- r.Header.Get("Content-Type") + " " + string(body)
	}))
	t.Cleanup(recv.Close)
	b := setup(t, sim.Config{Key: key, Instant: true})
	created := b.ct(t, "createTask", `{"clientKey":"`+key+`","task":{"type":"ImageToTextTask","body":"R0lGODlhAQABAAAAACw=","numeric":1,"minLength":4,"maxLength":4},"callbackUrl":"`+recv.URL+`/cb"}`)
	call := testbound.Receive(t, "the callback", got)
	ctype, body, _ := strings.Cut(call, " ")
	var m map[string]any
	if ctype != "application/json" || json.Unmarshal([]byte(body), &m) != nil {
		t.Fatalf("callback %q", call)
	}
	text, _ := m["solution"].(map[string]any)["text"].(string)
	if m["taskId"] != created["taskId"] || m["status"] != "ready" || len(text) != 4 || strings.Trim(text, "0123456789") != "" {
		t.Errorf("callback body %v, want task %v ready with 4 digits", m, created["taskId"])
	}
	testbound.Until(t, "the pingback sent", func() bool { return b.srv.Stats().PingbacksSent == 1 })
}

// TestTaskResultGap: with Config.TaskResultGap, as CapMonster Cloud has it,
// a getTaskResult sooner than the gap after the task's last answered one
// is answered ERROR_TOO_MUCH_REQUESTS and counted; it neither counts as a
// poll nor moves the gap; other tasks keep their own gaps; res.php polls
// are not under the rule.
func TestTaskResultGap(t *testing.T) {
	t.Parallel()
	clock := newManualClock()
	b := setup(t, sim.Config{Key: key, Latency: tenSeconds(), Now: clock.Now, TaskResultGap: 2 * time.Second})
	create := func() string {
		created := b.ct(t, "createTask", `{"clientKey":"`+key+`","task":{"type":"TurnstileTaskProxyless","websiteURL":"https://shop.example/login","websiteKey":"0x4AAA"}}`)
		id, _ := created["taskId"].(float64)
		return strconv.FormatFloat(id, 'f', 0, 64)
	}
	a, other := create(), create()
	result := func(id string) map[string]any {
		return b.ct(t, "getTaskResult", `{"clientKey":"`+key+`","taskId":`+id+`}`)
	}
	processing := map[string]any{"errorId": 0.0, "status": "processing"}
	if got := result(a); !cmp.Equal(got, processing) {
		t.Fatalf("first getTaskResult: %v", got)
	}
	clock.Advance(1999 * time.Millisecond)
	got := result(a)
	if got["errorId"] != 1.0 || got["errorCode"] != "ERROR_TOO_MUCH_REQUESTS" || !strings.Contains(got["errorDescription"].(string), "at most once every 2s") {
		t.Fatalf("getTaskResult 1.999 s later: %v, want ERROR_TOO_MUCH_REQUESTS", got)
	}
	if got := result(other); !cmp.Equal(got, processing) {
		t.Fatalf("another task's first getTaskResult: %v", got)
	}
	if got := b.get(t, "/res.php", url.Values{"key": {key}, "action": {"get"}, "id": {a}}); got != "CAPCHA_NOT_READY" {
		t.Fatalf("res.php poll of the same task: %q", got)
	}
	clock.Advance(time.Millisecond)
	if got := result(a); !cmp.Equal(got, processing) {
		t.Fatalf("getTaskResult 2 s after the last answered one: %v", got)
	}
	if st := b.srv.Stats(); st.TooManyRequests != 1 || st.Bans != 0 || st.Calls.PollSingle != 5 || st.IDsPolled != 4 {
		t.Errorf("stats: %d too many, %d bans, %d single polls, %d ids polled; want 1, 0, 5, 4", st.TooManyRequests, st.Bans, st.Calls.PollSingle, st.IDsPolled)
	}
}

// With ProxyIPOnly the service takes a proxy's address only as a public
// IP address: a host name or a local address is answered ERROR_BAD_PROXY
// (errorId 130) with ProxyIPOnlyText; a public address is taken.
func TestCreateTaskProxyIPOnly(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{Key: key, Latency: tenSeconds(), ProxyIPOnly: true})
	for _, c := range []struct {
		addr string
		ok   bool
	}{{"203.0.113.7", true}, {"2001:db8::7", true}, {"proxy.example", false}, {"10.0.0.5", false}, {"127.0.0.1", false}, {"fe80::1", false}} {
		got := b.ct(t, "createTask", `{"clientKey":"`+key+`","task":{"type":"TurnstileTask","websiteURL":"https://a.example/","websiteKey":"0x4AAA",`+
			`"proxyType":"http","proxyAddress":"`+c.addr+`","proxyPort":3128,"proxyLogin":"u","proxyPassword":"p"}}`)
		if c.ok && got["errorId"] != 0.0 || !c.ok && (got["errorId"] != 130.0 || got["errorCode"] != "ERROR_BAD_PROXY" || got["errorDescription"] != sim.ProxyIPOnlyText) {
			t.Errorf("%s: %v", c.addr, got)
		}
	}
}
