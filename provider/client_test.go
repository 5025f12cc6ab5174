package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// testKey has characters that URL-encode, so redaction is tested on both
// forms.
const testKey = "k3y+Secret/Value=="

// fake speaks enough of the protocol for the client's tests: each id's
// answer part is set by the test ("TOKEN", "CAPCHA_NOT_READY", "ERROR_…").
type fake struct {
	mu      sync.Mutex
	answers map[string]string
	bulk    bool // ids= supported

	bulkReqs, singleReqs atomic.Int64
	inflight, maxFlight  atomic.Int64
	bulkSizes            []int
}

func newFake(bulk bool) *fake { return &fake{answers: map[string]string{}, bulk: bulk} }

func (f *fake) set(id, answer string) {
	f.mu.Lock()
	f.answers[id] = answer
	f.mu.Unlock()
}

func (f *fake) answer(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if a, ok := f.answers[id]; ok {
		return a
	}
	return "ERROR_WRONG_CAPTCHA_ID"
}

func (f *fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := f.inflight.Add(1)
	defer f.inflight.Add(-1)
	for {
		m := f.maxFlight.Load()
		if n <= m || f.maxFlight.CompareAndSwap(m, n) {
			break
		}
	}
	q := r.URL.Query()
	if r.URL.Path != "/res.php" || q.Get("action") != "get" {
		http.Error(w, "not here", http.StatusNotFound)
		return
	}
	if q.Get("key") != testKey {
		io.WriteString(w, "ERROR_WRONG_USER_KEY")
		return
	}
	if ids := q.Get("ids"); ids != "" {
		f.bulkReqs.Add(1)
		list := strings.Split(ids, ",")
		f.mu.Lock()
		f.bulkSizes = append(f.bulkSizes, len(list))
		f.mu.Unlock()
		if !f.bulk {
			io.WriteString(w, "ERROR_WRONG_CAPTCHA_ID") // it looked for id= and found none
			return
		}
		parts := make([]string, len(list))
		for i, id := range list {
			parts[i] = f.answer(id)
		}
		io.WriteString(w, strings.Join(parts, "|"))
		return
	}
	f.singleReqs.Add(1)
	a := f.answer(q.Get("id"))
	if a == "CAPCHA_NOT_READY" || strings.HasPrefix(a, "ERROR") {
		json.NewEncoder(w).Encode(map[string]any{"status": 0, "request": a})
		return
	}
	json.NewEncoder(w).Encode(map[string]any{"status": 1, "request": a})
}

func newTestClient(t *testing.T, h http.Handler, cfg ClientConfig) *Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	cfg.BaseURL = srv.URL
	if cfg.Key == "" {
		cfg.Key = testKey
	}
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestNewClient(t *testing.T) {
	t.Parallel()
	if _, err := NewClient(ClientConfig{}); err == nil || !strings.Contains(err.Error(), "key is required") {
		t.Errorf("no key: %v", err)
	}
	for _, base := range []string{"ocr.captchaai.com", "ftp://x", "http://", "https://x.example/?key=1", "::"} {
		if _, err := NewClient(ClientConfig{Key: "k", BaseURL: base}); err == nil {
			t.Errorf("base %q accepted", base)
		}
	}
	if _, err := NewClient(ClientConfig{Key: "k", BulkPoll: BulkMode(7)}); err == nil {
		t.Error("bad bulk mode accepted")
	}
	_, err := NewClient(ClientConfig{Key: " ", BaseURL: "ftp://x", BulkPoll: BulkMode(7), PollConcurrency: -1, Methods: []string{"turnstile", "nosuch"}})
	want := `provider: key is required: set the account key (CAPTCHAAI_KEY)
provider: base URL "ftp://x" is not an absolute http(s) URL; use e.g. ` + BaseURLDefault + `
provider: BulkPoll 7: use BulkAuto, BulkOn or BulkOff
provider: PollConcurrency -1 must not be negative
provider: Methods has "nosuch": use methods of ` + strings.Join(KnownMethods, ", ")
	if err == nil || err.Error() != want {
		t.Errorf("every problem: %v\nwant: %s", err, want)
	}
	c, err := NewClient(ClientConfig{Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if c.inURL != BaseURLDefault+"/in.php" || c.resURL != BaseURLDefault+"/res.php" || c.pollConc != PollConcurrencyDefault || c.hc == nil || c.hc.Timeout != HTTPTimeoutDefault {
		t.Errorf("defaults not applied: %+v", c)
	}
	c, _ = NewClient(ClientConfig{Key: "k", BaseURL: "http://127.0.0.1:9/api/"})
	if c.inURL != "http://127.0.0.1:9/api/in.php" {
		t.Errorf("inURL = %q", c.inURL)
	}
	for s, want := range map[string]BulkMode{"auto": BulkAuto, "": BulkAuto, "ON": BulkOn, "off": BulkOff} {
		if got, err := ParseBulkMode(s); err != nil || got != want {
			t.Errorf("ParseBulkMode(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := ParseBulkMode("sometimes"); err == nil {
		t.Error("ParseBulkMode accepted nonsense")
	}
}

func TestSubmitAnswers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		status int
		body   string
		id     string
		code   string
		class  Class
	}{
		{"json string id", 200, `{"status":1,"request":"7319581"}`, "7319581", "", 0},
		{"json number id", 200, `{"status":1,"request":7319582}`, "7319582", "", 0},
		{"json big number id", 200, `{"status":1,"request":73195820000000001}`, "73195820000000001", "", 0},
		{"string status", 200, `{"status":"1","request":"abc-1"}`, "abc-1", "", 0},
		{"plain", 200, "OK|555\n", "555", "", 0},
		{"json error", 200, `{"status":0,"request":"ERROR_NO_SLOT_AVAILABLE","error_text":"No free slots"}`, "", "ERROR_NO_SLOT_AVAILABLE", ClassNoSlot},
		{"plain error", 200, "ERROR_WRONG_USER_KEY", "", "ERROR_WRONG_USER_KEY", ClassAccount},
		{"plain ban", 200, "IP_BANNED", "", "IP_BANNED", ClassAccount},
		{"rate 100x", 200, "ERROR: 1001", "", "ERROR: 1001", ClassRateLimit},
		{"html 502", 502, "<html><body>Bad Gateway</body></html>", "", CodeHTTP5xx, ClassTransient},
		{"html 200", 200, "<html>maintenance</html>", "", CodeBadAnswer, ClassTransient},
		{"empty id", 200, `{"status":1,"request":""}`, "", CodeBadAnswer, ClassTransient},
		{"id with pipe", 200, `{"status":1,"request":"1|2"}`, "", CodeBadAnswer, ClassTransient},
		{"json without request", 200, `{"status":1}`, "", CodeBadAnswer, ClassTransient},
		{"empty body", 200, "", "", CodeBadAnswer, ClassTransient},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			}), ClientConfig{})
			id, err := c.Submit(context.Background(), Turnstile{SiteKey: "0x4", PageURL: "https://a.example/"}.Task(), "")
			if id != tt.id {
				t.Errorf("id = %q, want %q", id, tt.id)
			}
			if tt.code == "" {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				return
			}
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("err = %v, want *Error", err)
			}
			if pe.Code != tt.code || pe.Class != tt.class || pe.Op != "submit" {
				t.Errorf("got code %q class %v op %q; want %q %v submit", pe.Code, pe.Class, pe.Op, tt.code, tt.class)
			}
			if tt.status >= 500 && pe.HTTPStatus != tt.status {
				t.Errorf("HTTPStatus = %d", pe.HTTPStatus)
			}
			if c.Requests() != 1 {
				t.Errorf("Requests = %d, want 1", c.Requests())
			}
		})
	}
}

func TestSubmitSendsFields(t *testing.T) {
	t.Parallel()
	var got url.Values
	var ctype, method string
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		method, ctype = r.Method, r.Header.Get("Content-Type")
		if r.URL.Path != "/in.php" || r.URL.RawQuery != "" {
			t.Errorf("request to %s?%s", r.URL.Path, r.URL.RawQuery)
		}
		r.ParseForm()
		got = r.PostForm
		io.WriteString(w, `{"status":1,"request":"42"}`)
	}), ClientConfig{SoftID: "1234"})
	task := Task{Method: "userrecaptcha", Params: map[string]string{
		"googlekey": "6Le", "pageurl": "https://a.example/p", "invisible": "true", "enterprise": "false",
		"proxy": "u:p@h:1", "proxytype": "socks5", "cookies": "",
	}}
	id, err := c.Submit(context.Background(), task, "https://me.example/hook")
	if err != nil || id != "42" {
		t.Fatalf("Submit = %q, %v", id, err)
	}
	want := url.Values{
		"key": {testKey}, "method": {"userrecaptcha"}, "json": {"1"}, "soft_id": {"1234"},
		"pingback": {"https://me.example/hook"}, "googlekey": {"6Le"}, "pageurl": {"https://a.example/p"},
		"invisible": {"1"}, "enterprise": {"0"}, "proxy": {"u:p@h:1"}, "proxytype": {"SOCKS5"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("form (-want +got):\n%s", diff)
	}
	if method != http.MethodPost || ctype != "application/x-www-form-urlencoded" {
		t.Errorf("%s %s", method, ctype)
	}
}

func TestSubmitInvalidMakesNoRequest(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }), ClientConfig{})
	ctx := context.Background()

	_, err := c.Submit(ctx, Turnstile{SiteKey: "s", PageURL: "shop.example/x"}.Task(), "")
	var ve *ValidationError
	if !errors.As(err, &ve) || ve.Field != "params.pageurl" {
		t.Fatalf("err = %v, want ValidationError on params.pageurl", err)
	}
	if !errors.Is(err, ErrInvalidTask) || ClassOf(err) != ClassTask {
		t.Errorf("not ErrInvalidTask/ClassTask: %v", err)
	}
	if got, want := err.Error(), `submit: params.pageurl: "shop.example/x" has no scheme; add https:// (e.g. https://shop.example/x)`; got != want {
		t.Errorf("message\n got %q\nwant %q", got, want)
	}

	_, err = c.Submit(ctx, Task{Method: "hcaptcha", Params: map[string]string{"sitekey": "s", "pageurl": "https://a.example/"}}, "")
	if !errors.Is(err, ErrUnsupportedType) || !strings.HasPrefix(err.Error(), `submit: unsupported captcha type hCaptcha (method "hcaptcha"): the provider does not support it; supported methods: base64`) {
		t.Errorf("unsupported: %v", err)
	}

	_, err = c.Submit(ctx, Turnstile{SiteKey: "s", PageURL: "https://a.example/"}.Task(), "not a url")
	if !errors.As(err, &ve) || ve.Field != "pingback" {
		t.Errorf("bad pingback: %v", err)
	}

	_, err = c.Submit(ctx, Image{File: filepath.Join(t.TempDir(), "missing.png")}.Task(), "")
	if !errors.As(err, &ve) || ve.Field != "params.file" || !strings.Contains(err.Error(), "required") {
		t.Errorf("missing file: %v", err)
	}
	if hits.Load() != 0 || c.Requests() != 0 {
		t.Errorf("requests made: server %d, client %d", hits.Load(), c.Requests())
	}
}

func TestSubmitMultipartFile(t *testing.T) {
	t.Parallel()
	img := []byte("\x89PNG\r\n\x1a\nfake image bytes")
	path := filepath.Join(t.TempDir(), "captcha.png")
	if err := os.WriteFile(path, img, 0o600); err != nil {
		t.Fatal(err)
	}
	type upload struct {
		fields   map[string]string
		filename string
		data     []byte
	}
	var got upload
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseMultipartForm(1 << 20); err != nil {
			t.Errorf("not multipart: %v", err)
			return
		}
		got.fields = map[string]string{}
		for k, v := range r.MultipartForm.Value {
			got.fields[k] = v[0]
		}
		f, h, err := r.FormFile("file")
		if err != nil {
			t.Errorf("no file part: %v", err)
			return
		}
		got.filename = h.Filename
		got.data, _ = io.ReadAll(f)
		io.WriteString(w, "OK|901")
	}), ClientConfig{})
	id, err := c.Submit(context.Background(), Image{File: path, Numeric: 1, RegSense: true}.Task(), "")
	if err != nil || id != "901" {
		t.Fatalf("Submit = %q, %v", id, err)
	}
	want := upload{
		fields:   map[string]string{"key": testKey, "method": "post", "json": "1", "numeric": "1", "regsense": "1"},
		filename: "captcha",
		data:     img,
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(upload{})); diff != "" {
		t.Errorf("upload (-want +got):\n%s", diff)
	}
}

func TestPollAnswers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		status int
		body   string
		want   PollResult // ID is filled in
		errOut string     // Err code in the result
		reqErr string     // code of the returned error
	}{
		{name: "not ready", status: 200, body: `{"status":0,"request":"CAPCHA_NOT_READY"}`, want: PollResult{}},
		{name: "plain not ready", status: 200, body: "CAPCHA_NOT_READY", want: PollResult{}},
		{name: "token", status: 200, body: `{"status":1,"request":"03AGdBq2"}`,
			want: PollResult{Ready: true, Answer: Answer{Raw: "03AGdBq2", Token: "03AGdBq2"}}},
		{name: "plain text", status: 200, body: "OK|hello world",
			want: PollResult{Ready: true, Answer: Answer{Raw: "hello world", Token: "hello world"}}},
		{name: "numeric text", status: 200, body: `{"status":1,"request":4821}`,
			want: PollResult{Ready: true, Answer: Answer{Raw: "4821", Token: "4821"}}},
		{name: "geetest object", status: 200, body: `{"status":1,"request":{"geetest_challenge":"c","geetest_validate":"v","geetest_seccode":"v|jordan"}}`,
			want: PollResult{Ready: true, Answer: Answer{
				Raw:   `{"geetest_challenge":"c","geetest_validate":"v","geetest_seccode":"v|jordan"}`,
				Token: `{"geetest_challenge":"c","geetest_validate":"v","geetest_seccode":"v|jordan"}`,
				JSON:  json.RawMessage(`{"geetest_challenge":"c","geetest_validate":"v","geetest_seccode":"v|jordan"}`)}}},
		{name: "geetest string", status: 200, body: `{"status":1,"request":"{\"geetest_challenge\":\"c\"}"}`,
			want: PollResult{Ready: true, Answer: Answer{Raw: `{"geetest_challenge":"c"}`, Token: `{"geetest_challenge":"c"}`, JSON: json.RawMessage(`{"geetest_challenge":"c"}`)}}},
		{name: "bls array", status: 200, body: `{"status":1,"request":"[1,4,7]"}`,
			want: PollResult{Ready: true, Answer: Answer{Raw: `[1,4,7]`, Token: `[1,4,7]`, JSON: json.RawMessage(`[1,4,7]`)}}},
		{name: "cf clearance with user_agent", status: 200, body: `{"status":1,"request":"cfval123","user_agent":"Mozilla/5.0"}`,
			want: PollResult{Ready: true, Answer: Answer{Raw: `{"status":1,"request":"cfval123","user_agent":"Mozilla/5.0"}`, Token: "cfval123",
				JSON: json.RawMessage(`{"status":1,"request":"cfval123","user_agent":"Mozilla/5.0"}`)}}},
		{name: "cf cookies string", status: 200, body: `{"status":1,"request":"{\"cookies\":{\"cf_clearance\":\"abc\",\"__cf_bm\":\"x\"},\"userAgent\":\"UA\"}"}`,
			want: PollResult{Ready: true, Answer: Answer{Raw: `{"cookies":{"cf_clearance":"abc","__cf_bm":"x"},"userAgent":"UA"}`, Token: "abc",
				JSON: json.RawMessage(`{"cookies":{"cf_clearance":"abc","__cf_bm":"x"},"userAgent":"UA"}`)}}},
		{name: "cf cookie list", status: 200, body: `{"status":1,"request":{"cookies":[{"name":"a","value":"1"},{"name":"cf_clearance","value":"zz"}]}}`,
			want: PollResult{Ready: true, Answer: Answer{Raw: `{"cookies":[{"name":"a","value":"1"},{"name":"cf_clearance","value":"zz"}]}`, Token: "zz",
				JSON: json.RawMessage(`{"cookies":[{"name":"a","value":"1"},{"name":"cf_clearance","value":"zz"}]}`)}}},
		{name: "cf cookie header", status: 200, body: `{"status":1,"request":{"cookie":"a=1; cf_clearance=hh; b=2","userAgent":"UA"}}`,
			want: PollResult{Ready: true, Answer: Answer{Raw: `{"cookie":"a=1; cf_clearance=hh; b=2","userAgent":"UA"}`, Token: "hh",
				JSON: json.RawMessage(`{"cookie":"a=1; cf_clearance=hh; b=2","userAgent":"UA"}`)}}},
		{name: "unsolvable", status: 200, body: `{"status":0,"request":"ERROR_CAPTCHA_UNSOLVABLE"}`, errOut: "ERROR_CAPTCHA_UNSOLVABLE"},
		{name: "wrong id", status: 200, body: "ERROR_WRONG_CAPTCHA_ID", errOut: "ERROR_WRONG_CAPTCHA_ID"},
		{name: "token expired", status: 200, body: `{"status":0,"request":"ERROR_TOKEN_EXPIRED"}`, errOut: "ERROR_TOKEN_EXPIRED"},
		{name: "bad key", status: 200, body: `{"status":0,"request":"ERROR_KEY_DOES_NOT_EXIST"}`, reqErr: "ERROR_KEY_DOES_NOT_EXIST"},
		{name: "rate limited", status: 200, body: "MAX_USER_TURN", reqErr: "MAX_USER_TURN"},
		{name: "5xx", status: 503, body: "<html>down</html>", reqErr: CodeHTTP5xx},
		{name: "garbage", status: 200, body: "<html>", reqErr: CodeBadAnswer},
		{name: "empty answer", status: 200, body: `{"status":1,"request":""}`, reqErr: CodeBadAnswer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var gotQuery url.Values
			c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				gotQuery = r.URL.Query()
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			}), ClientConfig{})
			res, err := c.Poll(context.Background(), "77")
			if diff := cmp.Diff(url.Values{"key": {testKey}, "action": {"get"}, "id": {"77"}, "json": {"1"}}, gotQuery); diff != "" {
				t.Errorf("query (-want +got):\n%s", diff)
			}
			if tt.reqErr != "" {
				var pe *Error
				if !errors.As(err, &pe) || pe.Code != tt.reqErr || pe.Op != "poll" {
					t.Fatalf("err = %v, want code %s", err, tt.reqErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("err = %v", err)
			}
			if tt.errOut != "" {
				var pe *Error
				if !errors.As(res.Err, &pe) || pe.Code != tt.errOut || res.Ready || res.ID != "77" {
					t.Fatalf("result = %+v, want Err %s", res, tt.errOut)
				}
				return
			}
			tt.want.ID = "77"
			if diff := cmp.Diff(tt.want, res); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
		})
	}
}

func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = strconv.Itoa(1000 + i)
	}
	return out
}

func TestPollManyBulk(t *testing.T) {
	t.Parallel()
	f := newFake(true)
	f.set("1", "TOKEN-1")
	f.set("2", "CAPCHA_NOT_READY")
	f.set("3", "ERROR_CAPTCHA_UNSOLVABLE")
	c := newTestClient(t, f, ClientConfig{})
	res, err := c.PollMany(context.Background(), []string{"1", "2", "3"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 3 || res[0].ID != "1" || !res[0].Ready || res[0].Answer.Token != "TOKEN-1" ||
		res[1].ID != "2" || res[1].Ready || res[1].Err != nil ||
		res[2].ID != "3" || !errors.Is(res[2].Err, ErrCaptchaUnsolvable) {
		t.Fatalf("results = %+v", res)
	}
	if f.bulkReqs.Load() != 1 || f.singleReqs.Load() != 0 || c.Requests() != 1 {
		t.Errorf("bulk %d single %d client %d; want 1 0 1", f.bulkReqs.Load(), f.singleReqs.Load(), c.Requests())
	}

	// 250 ids: chunks of 100, 100, 50, answers in order.
	all := ids(250)
	for _, id := range all {
		f.set(id, "T"+id)
	}
	res, err = c.PollMany(context.Background(), all)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.ID != all[i] || r.Answer.Token != "T"+all[i] {
			t.Fatalf("result %d = %+v", i, r)
		}
	}
	f.mu.Lock()
	sizes := slices.Clone(f.bulkSizes)
	f.mu.Unlock()
	if diff := cmp.Diff([]int{3, 100, 100, 50}, sizes); diff != "" {
		t.Errorf("bulk sizes (-want +got):\n%s", diff)
	}
	if !c.BulkSupported() {
		t.Error("bulk disabled on a provider that supports it")
	}
}

func TestPollManySingleIDUsesID(t *testing.T) {
	t.Parallel()
	f := newFake(true)
	f.set("9", "TOK")
	c := newTestClient(t, f, ClientConfig{})
	res, err := c.PollMany(context.Background(), []string{"9"})
	if err != nil || len(res) != 1 || res[0].Answer.Token != "TOK" {
		t.Fatalf("%+v %v", res, err)
	}
	if f.bulkReqs.Load() != 0 || f.singleReqs.Load() != 1 {
		t.Errorf("bulk %d single %d", f.bulkReqs.Load(), f.singleReqs.Load())
	}
}

func TestPollManyFallsBackWithoutBulk(t *testing.T) {
	t.Parallel()
	for _, variant := range []string{"error answer", "wrong count"} {
		t.Run(variant, func(t *testing.T) {
			t.Parallel()
			f := newFake(false)
			var h http.Handler = f
			if variant == "wrong count" {
				// A provider that answers ids= with only the first id's answer.
				h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if ids := r.URL.Query().Get("ids"); ids != "" {
						f.bulkReqs.Add(1)
						io.WriteString(w, f.answer(strings.Split(ids, ",")[0])+"|x")
						return
					}
					f.ServeHTTP(w, r)
				})
			}
			list := ids(5)
			for _, id := range list {
				f.set(id, "T"+id)
			}
			c := newTestClient(t, h, ClientConfig{PollConcurrency: 2})
			for round := range 2 {
				res, err := c.PollMany(context.Background(), list)
				if err != nil {
					t.Fatal(err)
				}
				for i, r := range res {
					if r.ID != list[i] || r.Answer.Token != "T"+list[i] {
						t.Fatalf("round %d result %d = %+v", round, i, r)
					}
				}
			}
			// One ids= request detected the lack of support; every later poll
			// went one id per request.
			if f.bulkReqs.Load() != 1 || f.singleReqs.Load() != 10 || c.Requests() != 11 {
				t.Errorf("bulk %d single %d client %d; want 1 10 11", f.bulkReqs.Load(), f.singleReqs.Load(), c.Requests())
			}
			if c.BulkSupported() {
				t.Error("bulk still considered supported")
			}
			if m := f.maxFlight.Load(); m > 2 {
				t.Errorf("%d requests in flight, PollConcurrency is 2", m)
			}
		})
	}
}

func TestPollManyBulkModes(t *testing.T) {
	t.Parallel()
	list := ids(4)

	f := newFake(true)
	for _, id := range list {
		f.set(id, "T"+id)
	}
	off := newTestClient(t, f, ClientConfig{BulkPoll: BulkOff})
	if _, err := off.PollMany(context.Background(), list); err != nil {
		t.Fatal(err)
	}
	if f.bulkReqs.Load() != 0 || f.singleReqs.Load() != 4 {
		t.Errorf("BulkOff: bulk %d single %d", f.bulkReqs.Load(), f.singleReqs.Load())
	}

	g := newFake(false)
	on := newTestClient(t, g, ClientConfig{BulkPoll: BulkOn})
	_, err := on.PollMany(context.Background(), list)
	if !errors.Is(err, ErrBadAnswer) || !strings.Contains(err.Error(), "bulk poll: one answer") {
		t.Errorf("BulkOn on a provider without bulk: %v", err)
	}
	if g.singleReqs.Load() != 0 || !on.BulkSupported() {
		t.Errorf("BulkOn fell back")
	}
}

func TestPollManyRequestError(t *testing.T) {
	t.Parallel()
	f := newFake(true)
	c := newTestClient(t, f, ClientConfig{Key: "wrong"})
	res, err := c.PollMany(context.Background(), ids(3))
	if !errors.Is(err, ErrWrongUserKey) || res != nil {
		t.Fatalf("res %v err %v", res, err)
	}
	if !c.BulkSupported() {
		t.Error("an account error disabled bulk polling")
	}
	// Per-id mode reports the same.
	c2 := newTestClient(t, f, ClientConfig{Key: "wrong", BulkPoll: BulkOff})
	if res, err := c2.PollMany(context.Background(), ids(3)); !errors.Is(err, ErrWrongUserKey) || ClassOf(err) != ClassAccount || res != nil {
		t.Fatalf("per id: %v", err)
	}
}

func TestPollManyBadIDs(t *testing.T) {
	t.Parallel()
	f := newFake(true)
	f.set("5", "OK5")
	c := newTestClient(t, f, ClientConfig{})
	res, err := c.PollMany(context.Background(), []string{"", "5", "a,b"})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(res[0].Err, ErrWrongIDFormat) || res[1].Answer.Token != "OK5" || !errors.Is(res[2].Err, ErrWrongIDFormat) {
		t.Fatalf("%+v", res)
	}
	if c.Requests() != 1 || f.singleReqs.Load() != 1 {
		t.Errorf("requests %d", c.Requests())
	}
}

// TestConcurrentUse runs many callers on one Client while it discovers
// that bulk polling is unsupported (run with -race).
func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	f := newFake(false)
	list := ids(6)
	for _, id := range list {
		f.set(id, "T"+id)
	}
	c := newTestClient(t, f, ClientConfig{})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			res, err := c.PollMany(context.Background(), list)
			if err != nil {
				errs <- err
				return
			}
			for i, r := range res {
				if r.Answer.Token != "T"+list[i] {
					errs <- fmt.Errorf("result %d = %+v", i, r)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := c.Requests(); got != f.bulkReqs.Load()+f.singleReqs.Load() {
		t.Errorf("client counted %d requests, server saw %d", got, f.bulkReqs.Load()+f.singleReqs.Load())
	}
	if f.singleReqs.Load() != 16*6 {
		t.Errorf("single requests %d, want %d", f.singleReqs.Load(), 16*6)
	}
}

func TestAccountActions(t *testing.T) {
	t.Parallel()
	type call struct{ Action, ID string }
	var mu sync.Mutex
	var calls []call
	answers := map[string]string{
		"getbalance":  `{"status":1,"request":"12.5"}`,
		"reportbad":   `{"status":1,"request":"OK_REPORT_RECORDED"}`,
		"reportgood":  "OK_REPORT_RECORDED",
		"threadsinfo": `{"status":1,"request":{"threads":15,"working_threads":4,"free_threads":11,"plan":"STANDARD"}}`,
	}
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		mu.Lock()
		calls = append(calls, call{Action: q.Get("action"), ID: q.Get("id")})
		mu.Unlock()
		io.WriteString(w, answers[q.Get("action")])
	}), ClientConfig{})
	ctx := context.Background()
	if b, err := c.Balance(ctx); err != nil || b != 12.5 {
		t.Errorf("Balance = %v, %v", b, err)
	}
	if err := c.ReportBad(ctx, "11"); err != nil {
		t.Errorf("ReportBad: %v", err)
	}
	if err := c.ReportGood(ctx, "12"); err != nil {
		t.Errorf("ReportGood: %v", err)
	}
	ti, err := c.ThreadsInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := ThreadsInfo{Threads: 15, Busy: 4, Free: 11, Plan: "STANDARD", Raw: answers["threadsinfo"]}
	if diff := cmp.Diff(want, ti); diff != "" {
		t.Errorf("ThreadsInfo (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]call{{"getbalance", ""}, {"reportbad", "11"}, {"reportgood", "12"}, {"threadsinfo", ""}}, calls); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

func TestAccountActionErrors(t *testing.T) {
	t.Parallel()
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("action") {
		case "getbalance":
			io.WriteString(w, "ERROR_WRONG_USER_KEY")
		case "reportbad":
			io.WriteString(w, `{"status":0,"request":"ERROR_REPORT_NOT_RECORDED"}`)
		default:
			w.WriteHeader(500)
		}
	}), ClientConfig{})
	ctx := context.Background()
	if _, err := c.Balance(ctx); !errors.Is(err, ErrWrongUserKey) {
		t.Errorf("Balance: %v", err)
	}
	if err := c.ReportBad(ctx, "1"); !errors.Is(err, ErrReportNotRecorded) {
		t.Errorf("ReportBad: %v", err)
	}
	if err := c.ReportGood(ctx, "1"); !errors.Is(err, ErrHTTP5xx) {
		t.Errorf("ReportGood: %v", err)
	}
	if _, err := c.ThreadsInfo(ctx); !errors.Is(err, ErrHTTP5xx) {
		t.Errorf("ThreadsInfo: %v", err)
	}
}

func TestParseThreadsInfoShapes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		body              string
		threads, busy, fr int
		plan              string
		err               string
	}{
		{body: `{"threads":5,"working_threads":2,"free_threads":3}`, threads: 5, busy: 2, fr: 3},
		{body: `{"status":1,"request":"{\"Threads\":\"50\",\"Busy\":\"7\"}"}`, threads: 50, busy: 7, fr: 43},
		{body: `{"status":1,"request":{"free_threads":10,"working_threads":5}}`, threads: 15, busy: 5, fr: 10},
		{body: `{"data":{"total_threads":200,"used":10,"package":"ENTERPRISE"}}`, threads: 200, busy: 10, fr: 190, plan: "ENTERPRISE"},
		{body: `{"status":1,"request":"hello"}`, err: "threadsinfo: BAD_ANSWER: threadsinfo answer has an unknown shape (no thread count found)"},
		{body: `[1,2,3]`, err: "unknown shape"},
		{body: `5|3`, err: "unknown shape"},
		{body: `{"status":0,"request":"ERROR_KEY_DOES_NOT_EXIST"}`, err: "threadsinfo: ERROR_KEY_DOES_NOT_EXIST"},
	}
	for _, tt := range tests {
		ti, err := parseThreadsInfo(200, []byte(tt.body))
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: err = %v, want %q", tt.body, err, tt.err)
			}
			continue
		}
		if err != nil || ti.Threads != tt.threads || ti.Busy != tt.busy || ti.Free != tt.fr || ti.Plan != tt.plan {
			t.Errorf("%s: %+v %v", tt.body, ti, err)
		}
	}
}

func TestPollManyBulkKeepsJSONAnswersWhole(t *testing.T) {
	t.Parallel()
	f := newFake(true)
	gt := `{"geetest_challenge":"c1","geetest_validate":"v1","geetest_seccode":"v1|jordan"}`
	f.set("1", gt)
	f.set("2", "CAPCHA_NOT_READY")
	f.set("3", `[1,4|`) // not JSON, and not joined into anything
	c := newTestClient(t, f, ClientConfig{})
	res, err := c.PollMany(context.Background(), []string{"1", "2"})
	if err != nil {
		t.Fatal(err)
	}
	want := []PollResult{
		{ID: "1", Ready: true, Answer: Answer{Raw: gt, Token: gt, JSON: json.RawMessage(gt)}, Bulk: true},
		{ID: "2", Bulk: true},
	}
	if diff := cmp.Diff(want, res); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	if !c.BulkSupported() || f.singleReqs.Load() != 0 {
		t.Error("a GeeTest answer disabled bulk polling")
	}
	if got := splitBulk(`[1,4|T2`); len(got) != 2 || got[0] != "[1,4" || got[1] != "T2" {
		t.Errorf("splitBulk of broken JSON = %q", got)
	}
}

func BenchmarkSplitBulkHostile(b *testing.B) {
	text := strings.Repeat("{|", 200_000)
	for b.Loop() {
		splitBulk(text)
	}
}
