package server_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"mime/multipart"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/captchaq/captchaq"
)

// png is a small image (the simulator reads no pixels).
var png = []byte("\x89PNG\r\n\x1a\n0000IHDR-captcha-image-bytes")

func TestFrontForms(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	numeric := regexp.MustCompile(`^[0-9]+$`)
	submitters := []struct {
		name string
		in   func(t *testing.T) string // returns the in.php body
		json bool
	}{
		{"GET json", func(t *testing.T) string {
			v := turnstile()
			v.Set("key", keyQA)
			v.Set("json", "1")
			return b.form(t, http.MethodGet, "/in.php", v)
		}, true},
		{"GET plain", func(t *testing.T) string {
			v := turnstile()
			v.Set("key", keyQA)
			return b.form(t, http.MethodGet, "/in.php", v)
		}, false},
		{"POST urlencoded base64 image json", func(t *testing.T) string {
			v := url.Values{"key": {keyQA}, "method": {"base64"}, "body": {base64.StdEncoding.EncodeToString(png)}, "json": {"1"}}
			return b.form(t, http.MethodPost, "/in.php", v)
		}, true},
		{"POST multipart file plain", func(t *testing.T) string {
			var buf bytes.Buffer
			mw := multipart.NewWriter(&buf)
			mw.WriteField("key", keyQA)
			mw.WriteField("method", "post")
			fw, _ := mw.CreateFormFile("file", "captcha.png")
			fw.Write(png)
			mw.Close()
			req, _ := http.NewRequest(http.MethodPost, b.url+"/in.php", &buf)
			req.Header.Set("Content-Type", mw.FormDataContentType())
			return b.do(t, req, http.StatusOK)
		}, false},
		{"POST JSON object base64 image json", func(t *testing.T) string {
			body := `{"key":"` + keyQA + `","method":"base64","body":"` + base64.StdEncoding.EncodeToString(png) + `","json":1,"header_acao":1,"soft_id":4587}`
			req, _ := http.NewRequest(http.MethodPost, b.url+"/in.php", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			return b.do(t, req, http.StatusOK)
		}, true},
		{"POST JSON object turnstile, key in the query plain", func(t *testing.T) string {
			req, _ := http.NewRequest(http.MethodPost, b.url+"/in.php?key="+keyQA, strings.NewReader(`{"method":"turnstile","sitekey":"0x4AAAAAAAC3DHQFLr1GavRN","pageurl":"https://example.com/login","json":false}`))
			req.Header.Set("Content-Type", "application/json; charset=utf-8")
			return b.do(t, req, http.StatusOK)
		}, false},
	}
	for _, s := range submitters {
		t.Run(s.name, func(t *testing.T) {
			body := s.in(t)
			var id string
			if s.json {
				var ans struct {
					Status  int    `json:"status"`
					Request string `json:"request"`
				}
				if err := json.Unmarshal([]byte(body), &ans); err != nil || ans.Status != 1 {
					t.Fatalf("in.php: %s", body)
				}
				id = ans.Request
			} else {
				var ok bool
				id, ok = strings.CutPrefix(body, "OK|")
				if !ok {
					t.Fatalf("in.php: %q, want OK|<id>", body)
				}
			}
			if !numeric.MatchString(id) {
				t.Fatalf("id %q is not numeric", id)
			}
			v := b.waitFinal(t, keyQA, id)
			if v.Status != captchaq.StatusSolved || v.Result.Token == "" {
				t.Fatalf("task %s: %+v", id, v)
			}
			q := url.Values{"key": {keyQA}, "action": {"get"}, "id": {id}}
			if got, want := b.form(t, http.MethodGet, "/res.php", q), "OK|"+v.Result.Token; got != want {
				t.Errorf("res.php plain = %q, want %q", got, want)
			}
			q.Set("json", "1")
			got := b.form(t, http.MethodPost, "/res.php", q)
			want, _ := json.Marshal(map[string]any{"status": 1, "request": v.Result.Token})
			if got != string(want) {
				t.Errorf("res.php json = %s, want %s", got, want)
			}
		})
	}
}

func TestFrontBulkMixedStates(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	solved := b.inOK(t, keyQA, turnstile())
	// An image over the provider's 600 KiB is refused at intake, with the
	// provider's own code.
	big := make([]byte, 700<<10)
	if got := b.form(t, http.MethodPost, "/in.php", url.Values{"key": {keyQA}, "method": {"base64"}, "body": {base64.StdEncoding.EncodeToString(big)}}); got != "ERROR_TOO_BIG_CAPTCHA_FILESIZE" {
		t.Errorf("big image: %q", got)
	}
	pending := b.inOK(t, keyQA, recaptcha())
	others := b.inOK(t, keyOther, turnstile())
	sv := b.waitFinal(t, keyQA, solved)
	b.waitFinal(t, keyOther, others)

	ids := strings.Join([]string{solved, pending, "12345", others}, ",")
	want := strings.Join([]string{sv.Result.Token, "CAPCHA_NOT_READY", "ERROR_WRONG_CAPTCHA_ID", "ERROR_WRONG_CAPTCHA_ID"}, "|")
	if got := b.form(t, http.MethodGet, "/res.php", url.Values{"key": {keyQA}, "action": {"get"}, "ids": {ids}}); got != want {
		t.Errorf("bulk plain = %q\nwant %q", got, want)
	}
	got := b.form(t, http.MethodGet, "/res.php", url.Values{"key": {keyQA}, "action": {"get"}, "ids": {ids}, "json": {"1"}})
	wantJSON, _ := json.Marshal(map[string]any{"status": 1, "request": want})
	if got != string(wantJSON) {
		t.Errorf("bulk json = %s\nwant %s", got, wantJSON)
	}
	// Single polls give the same codes; another client's task is invisible.
	for id, want := range map[string]string{pending: "CAPCHA_NOT_READY", others: "ERROR_WRONG_CAPTCHA_ID"} {
		if got := b.form(t, http.MethodGet, "/res.php", url.Values{"key": {keyQA}, "action": {"get"}, "id": {id}}); got != want {
			t.Errorf("res.php id=%s: %q, want %q", id, got, want)
		}
	}
	var apiErr map[string]string
	b.api(t, "GET", "/v1/tasks/"+others, keyQA, "", http.StatusNotFound, &apiErr)
}

func TestFrontErrors(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	with := func(v url.Values, kv ...string) url.Values {
		for i := 0; i < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v
	}
	cases := []struct {
		name string
		path string
		form url.Values
		want string
	}{
		{"unknown key", "/in.php", with(turnstile(), "key", "nope-nope-nope"), "ERROR_WRONG_USER_KEY"},
		{"unknown key res", "/res.php", url.Values{"key": {"nope-nope-nope"}, "action": {"get"}, "id": {"1"}}, "ERROR_WRONG_USER_KEY"},
		{"no method", "/in.php", url.Values{"key": {keyQA}}, "ERROR_BAD_PARAMETERS"},
		{"no googlekey", "/in.php", with(recaptcha(), "key", keyQA, "googlekey", ""), "ERROR_GOOGLEKEY"},
		{"pageurl without scheme", "/in.php", with(turnstile(), "key", keyQA, "pageurl", "shop.example/checkout"), "ERROR_PAGEURL"},
		{"post without file", "/in.php", url.Values{"key": {keyQA}, "method": {"post"}}, "ERROR_ZERO_CAPTCHA_FILESIZE"},
		{"base64 not base64", "/in.php", url.Values{"key": {keyQA}, "method": {"base64"}, "body": {"!!!"}}, "ERROR_IMAGE_TYPE_NOT_SUPPORTED"},
		{"unsupported type", "/in.php", url.Values{"key": {keyQA}, "method": {"hcaptcha"}, "sitekey": {"x"}, "pageurl": {"https://a.example"}}, "ERROR_BAD_PARAMETERS"},
		{"bad priority", "/in.php", with(turnstile(), "key", keyQA, "priority", "high"), "ERROR_BAD_PARAMETERS"},
		{"bad pingback", "/in.php", with(turnstile(), "key", keyQA, "pingback", "ftp://x"), "ERROR_BAD_PARAMETERS"},
		{"unknown action", "/res.php", url.Values{"key": {keyQA}, "action": {"frobnicate"}}, "ERROR_BAD_PARAMETERS"},
		{"no id", "/res.php", url.Values{"key": {keyQA}, "action": {"get"}}, "ERROR_WRONG_ID_FORMAT"},
		{"report unknown id", "/res.php", url.Values{"key": {keyQA}, "action": {"reportbad"}, "id": {"99"}}, "ERROR_WRONG_CAPTCHA_ID"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := b.form(t, http.MethodPost, c.path, c.form); got != c.want {
				t.Errorf("plain = %q, want %q", got, c.want)
			}
			c.form.Set("json", "1")
			var ans struct {
				Status  int    `json:"status"`
				Request string `json:"request"`
				Text    string `json:"error_text"`
			}
			json.Unmarshal([]byte(b.form(t, http.MethodGet, c.path, c.form)), &ans)
			if ans.Status != 0 || ans.Request != c.want || ans.Text == "" && c.want != "ERROR_WRONG_CAPTCHA_ID" && c.want != "ERROR_WRONG_ID_FORMAT" {
				t.Errorf("json = %+v, want status 0, %s and an error_text", ans, c.want)
			}
		})
	}
}

func TestFrontBalanceReportsPriority(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	if got := b.form(t, http.MethodGet, "/res.php", url.Values{"key": {keyQA}, "action": {"getbalance"}}); got != "15" {
		t.Errorf("getbalance = %q, want the simulator's 15", got)
	}
	if got := b.form(t, http.MethodGet, "/res.php", url.Values{"key": {keyQA}, "action": {"getbalance"}, "json": {"1"}}); got != `{"request":"15","status":1}` {
		t.Errorf("getbalance json = %s", got)
	}
	v := turnstile()
	v.Set("priority", "1")
	id := b.inOK(t, keyQA, v)
	view := b.waitFinal(t, keyQA, id)
	if view.Priority != 1 || view.Client != "qa" {
		t.Errorf("task: priority %d client %q, want 1 and qa", view.Priority, view.Client)
	}
	for _, action := range []string{"reportgood", "reportbad"} {
		if got := b.form(t, http.MethodGet, "/res.php", url.Values{"key": {keyQA}, "action": {action}, "id": {id}}); got != "OK_REPORT_RECORDED" {
			t.Errorf("%s = %q", action, got)
		}
	}
	// Another client cannot report it.
	if got := b.form(t, http.MethodGet, "/res.php", url.Values{"key": {keyOther}, "action": {"reportbad"}, "id": {id}}); got != "ERROR_WRONG_CAPTCHA_ID" {
		t.Errorf("reportbad by another client = %q", got)
	}
}
