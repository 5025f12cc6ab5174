package server_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/server"
	"github.com/captchaq/captchaq/sim"
)

// requestForm is one way a client carries in.php/res.php fields.
type requestForm string

const (
	formQuery      requestForm = "GET query"
	formURLEncoded requestForm = "POST urlencoded"
	formMultipart  requestForm = "POST multipart"
	formJSON       requestForm = "POST JSON object"
	// As the npm client 2captcha posts its image: a JSON object under
	// node-fetch's default text/plain.
	formJSONText requestForm = "POST JSON object as text/plain"
	// As puppeteer-extra-plugin-recaptcha posts in.php: urlencoded with
	// no Content-Type, chunked.
	formUntypedChunked requestForm = "POST urlencoded untyped chunked"
)

// sendForm sends v to base+path in the given form and returns the answer
// body and its Access-Control-Allow-Origin header. In a JSON body, json
// and header_acao travel as numbers and soft_id as a number, as the npm
// client sends them.
func sendForm(t *testing.T, base, path string, how requestForm, v url.Values, file []byte) (string, string) {
	t.Helper()
	var req *http.Request
	var err error
	switch how {
	case formQuery:
		req, err = http.NewRequest(http.MethodGet, base+path+"?"+v.Encode(), nil)
	case formURLEncoded:
		req, err = http.NewRequest(http.MethodPost, base+path, strings.NewReader(v.Encode()))
		if err == nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
	case formMultipart:
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		for k, vs := range v {
			mw.WriteField(k, vs[0])
		}
		if file != nil {
			fw, _ := mw.CreateFormFile("file", "captcha.png")
			fw.Write(file)
		}
		mw.Close()
		req, err = http.NewRequest(http.MethodPost, base+path, &buf)
		if err == nil {
			req.Header.Set("Content-Type", mw.FormDataContentType())
		}
	case formUntypedChunked:
		req, err = http.NewRequest(http.MethodPost, base+path, io.MultiReader(strings.NewReader(v.Encode())))
		if err == nil {
			req.ContentLength = -1
		}
	case formJSON, formJSONText:
		obj := map[string]any{}
		for k, vs := range v {
			obj[k] = vs[0]
		}
		for _, k := range []string{"json", "header_acao"} {
			if v.Get(k) == "1" {
				obj[k] = 1
			}
		}
		obj["soft_id"] = 4587
		body, _ := json.Marshal(obj)
		req, err = http.NewRequest(http.MethodPost, base+path, bytes.NewReader(body))
		if err == nil {
			req.Header.Set("Content-Type", "application/json")
			if how == formJSONText {
				req.Header.Set("Content-Type", "text/plain;charset=UTF-8")
			}
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: HTTP %d: %s", how, path, resp.StatusCode, body)
	}
	return strings.TrimSpace(string(body)), resp.Header.Get("Access-Control-Allow-Origin")
}

// protoAnswer reads an answer in either form: status 1 or 0 and the
// request text (an ok plain answer "OK|x" reads as status 1, x).
func protoAnswer(t *testing.T, body string, asJSON bool) (int, string) {
	t.Helper()
	if !asJSON {
		if rest, ok := strings.CutPrefix(body, "OK|"); ok {
			return 1, rest
		}
		return -1, body // plain answers carry no status
	}
	var a struct {
		Status  int             `json:"status"`
		Request json.RawMessage `json:"request"`
	}
	if err := json.Unmarshal([]byte(body), &a); err != nil {
		t.Fatalf("not a JSON answer: %q", body)
	}
	var s string
	if json.Unmarshal(a.Request, &s) != nil {
		s = string(a.Request) // a structured answer
	}
	return a.Status, s
}

// TestRequestFormsByActionOnFrontAndSim: each request form × each action
// × each answer form, on the HTTP front and on the simulator, which read
// requests through one parser. The same calls get the same answers.
func TestRequestFormsByActionOnFrontAndSim(t *testing.T) {
	t.Parallel()
	// Threads enough for the reCAPTCHAs kept unsolved by every subtest.
	b := setup(t, options{threads: 50, sim: func(c *sim.Config) { c.Threads = 200 }})
	ss, simURL, err := sim.Start(sim.Config{Key: "sim-forms-key", Threads: 200, LatencyScale: 0.01, Seed: 5, PollBan: sim.PollBan{Disabled: true},
		Latency: map[provider.Kind]sim.Latency{provider.KindRecaptchaV2: slowRecaptcha}}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	targets := []struct{ name, base, key, balance string }{
		{"front", b.url, keyQA, "15"},
		{"sim", simURL, "sim-forms-key", "15"},
	}
	numeric := regexp.MustCompile(`^[0-9]+$`)
	for _, tg := range targets {
		for _, how := range []requestForm{formQuery, formURLEncoded, formMultipart, formJSON, formJSONText, formUntypedChunked} {
			for _, asJSON := range []bool{false, true} {
				name := tg.name + "/" + string(how) + "/plain"
				if asJSON {
					name = tg.name + "/" + string(how) + "/json"
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					call := func(path string, kv ...string) (int, string) {
						t.Helper()
						v := url.Values{"key": {tg.key}, "header_acao": {"1"}, "unknown_extra": {"ignored"}}
						if asJSON {
							v.Set("json", "1")
						}
						var file []byte
						for i := 0; i+1 < len(kv); i += 2 {
							if kv[i] == "file" {
								file = []byte(kv[i+1])
								continue
							}
							v.Set(kv[i], kv[i+1])
						}
						body, acao := sendForm(t, tg.base, path, how, v, file)
						if acao != "*" {
							t.Errorf("%s: Access-Control-Allow-Origin %q, want * (header_acao=1)", path, acao)
						}
						return protoAnswer(t, body, asJSON)
					}
					wantOK := func(what string, status int, got, want string) {
						t.Helper()
						if status != 1 && !(status == -1 && !asJSON) || got != want {
							t.Errorf("%s: status %d %q, want ok %q", what, status, got, want)
						}
					}
					// in.php: a token type, and an image in the form's way.
					st, tsID := call("/in.php", "method", "turnstile", "sitekey", "0x4AAAAAAA", "pageurl", "https://shop.example/forms")
					if st != 1 || !numeric.MatchString(tsID) {
						t.Fatalf("in.php turnstile: %d %q, want OK|<id>", st, tsID)
					}
					image := []string{"method", "base64", "body", base64.StdEncoding.EncodeToString(png)}
					if how == formMultipart {
						image = []string{"method", "post", "file", string(png)}
					}
					st, imgID := call("/in.php", image...)
					if st != 1 || !numeric.MatchString(imgID) {
						t.Fatalf("in.php image: %d %q, want OK|<id>", st, imgID)
					}
					// A reCAPTCHA that stays unsolved: CAPCHA_NOT_READY.
					_, slowID := call("/in.php", "method", "userrecaptcha", "googlekey", "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-", "pageurl", "https://shop.example/login")
					if st, got := call("/res.php", "action", "get", "id", slowID); got != "CAPCHA_NOT_READY" || asJSON && st != 0 {
						t.Errorf("res.php get unsolved: %d %q, want CAPCHA_NOT_READY", st, got)
					}
					// res.php get, until solved.
					tokens := map[string]string{}
					for _, id := range []string{tsID, imgID} {
						var st int
						var got string
						testbound.Eventually(func() bool {
							st, got = call("/res.php", "action", "get", "id", id)
							return got != "CAPCHA_NOT_READY"
						})
						if st != 1 || got == "" || strings.HasPrefix(got, "ERROR_") {
							t.Fatalf("res.php get %s: %d %q, want OK|<answer>", id, st, got)
						}
						tokens[id] = got
					}
					st, got := call("/res.php", "action", "get", "ids", tsID+","+imgID+","+slowID)
					wantOK("bulk ids=", st, got, tokens[tsID]+"|"+tokens[imgID]+"|CAPCHA_NOT_READY")
					st, got = call("/res.php", "action", "getbalance")
					wantOK("getbalance", st, got, tg.balance)
					st, got = call("/res.php", "action", "reportgood", "id", tsID)
					wantOK("reportgood", st, got, "OK_REPORT_RECORDED")
					st, got = call("/res.php", "action", "reportbad", "id", imgID)
					wantOK("reportbad", st, got, "OK_REPORT_RECORDED")
					if st, got := call("/res.php", "action", "get", "id", "999999999999"); got != "ERROR_WRONG_CAPTCHA_ID" || asJSON && st != 0 {
						t.Errorf("unknown id: %d %q, want ERROR_WRONG_CAPTCHA_ID", st, got)
					}
					if st, got := call("/in.php", "key", "wrong-"+tg.key, "method", "turnstile", "sitekey", "0x4AAAAAAA", "pageurl", "https://shop.example/forms"); got != "ERROR_WRONG_USER_KEY" || asJSON && st != 0 {
						t.Errorf("wrong key: %d %q, want ERROR_WRONG_USER_KEY", st, got)
					}
				})
			}
		}
	}
}

// TestWrongKeyInQueryReadsNoBody: with the key in the query string, a
// wrong key is answered before the body is read, on the front and on the
// simulator, so a large body costs nothing; a right key with a body over
// the cap is refused after reading no more than the cap.
func TestWrongKeyInQueryReadsNoBody(t *testing.T) {
	t.Parallel()
	b := setup(t, options{server: func(c *server.Config) { c.MaxBodyBytes = 1 << 20 }})
	ss, err := sim.New(sim.Config{Key: "sim-forms-key"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	const size = 10 << 20
	for _, tc := range []struct {
		name    string
		h       http.Handler
		key     string
		code    string
		maxRead int
	}{
		{"front wrong key", b.srv.Handler(), "not-a-key", "ERROR_WRONG_USER_KEY", 0},
		{"sim wrong key", ss, "not-a-key", "ERROR_WRONG_USER_KEY", 0},
		{"front big body", b.srv.Handler(), keyQA, "ERROR_TOO_BIG_CAPTCHA_FILESIZE", 1<<20 + 1},
		{"sim big body", ss, "sim-forms-key", "ERROR_TOO_BIG_CAPTCHA_FILESIZE", 4<<20 + 1},
	} {
		body := &countingReader{left: size}
		req := httptest.NewRequest(http.MethodPost, "/in.php?json=1&key="+tc.key, body)
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		tc.h.ServeHTTP(rec, req)
		if st, code := protoAnswer(t, rec.Body.String(), true); st != 0 || code != tc.code {
			t.Errorf("%s: %s, want %s", tc.name, rec.Body.String(), tc.code)
		}
		if read := size - body.left; read > tc.maxRead {
			t.Errorf("%s: %d body bytes read, want at most %d", tc.name, read, tc.maxRead)
		}
	}
}

// countingReader yields left bytes of '{', then EOF.
type countingReader struct{ left int }

func (r *countingReader) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	n := min(len(p), r.left)
	for i := range p[:n] {
		p[i] = ' '
	}
	r.left -= n
	return n, nil
}
