package sim_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/provider/createtask"
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
	if ready["errorId"] != 0.0 || ready["status"] != "ready" || !strings.HasPrefix(tok, "0.") || sol["userAgent"] != createtask.DefaultUserAgent {
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
	waitFor(t, func() bool { return b.srv.Stats().PingbacksSent == 1 })
}
