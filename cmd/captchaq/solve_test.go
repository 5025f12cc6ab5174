package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const solveKey = "cli-Secret-Key-123"

// protocolFake is a small in.php/res.php server: each submit gets the next
// scripted answers.
type protocolFake struct {
	mu       sync.Mutex
	submits  []url.Values
	polls    int
	submitQ  []string // answers to in.php, one per request; the last repeats
	pollQ    []string // answers to res.php, one per request; the last repeats
	rejected int      // requests with a wrong key
}

func (f *protocolFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r.ParseForm()
	if r.Form.Get("key") != solveKey {
		f.rejected++
		io.WriteString(w, `{"status":0,"request":"ERROR_WRONG_USER_KEY"}`)
		return
	}
	next := func(q []string, n int) string { return q[min(n, len(q)-1)] }
	switch r.URL.Path {
	case "/in.php":
		f.submits = append(f.submits, r.PostForm)
		io.WriteString(w, next(f.submitQ, len(f.submits)-1))
	case "/res.php":
		if r.Form.Get("id") != "4242" {
			io.WriteString(w, `{"status":0,"request":"ERROR_WRONG_CAPTCHA_ID"}`)
			return
		}
		f.polls++
		io.WriteString(w, next(f.pollQ, f.polls-1))
	default:
		http.NotFound(w, r)
	}
}

func (f *protocolFake) counts() (submits, polls, rejected int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.submits), f.polls, f.rejected
}

func jsonOK(v any) string {
	b, _ := json.Marshal(map[string]any{"status": 1, "request": v})
	return string(b)
}

func jsonErr(code string) string { return `{"status":0,"request":"` + code + `"}` }

type solveRun struct {
	code           int
	stdout, stderr string
}

func runCLI(t *testing.T, envVars map[string]string, args ...string) solveRun {
	t.Helper()
	var out, errb bytes.Buffer
	env := &environment{
		stdin: strings.NewReader(""), stdout: &out, stderr: &errb,
		getenv: func(k string) string { return envVars[k] },
	}
	code := run(context.Background(), env, args)
	r := solveRun{code: code, stdout: out.String(), stderr: errb.String()}
	if strings.Contains(r.stdout+r.stderr, solveKey) {
		t.Errorf("the key appears in the output: %+v", r)
	}
	return r
}

func newProtocolFake(t *testing.T, submitQ, pollQ []string) (*protocolFake, string) {
	f := &protocolFake{submitQ: submitQ, pollQ: pollQ}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv.URL
}

var fast = []string{"--first-poll", "0s", "--poll-interval", "1ms"}

func TestSolveTurnstile(t *testing.T) {
	t.Parallel()
	f, base := newProtocolFake(t, []string{jsonOK("4242")}, []string{jsonErr("CAPCHA_NOT_READY"), jsonErr("CAPCHA_NOT_READY"), jsonOK("0.TURNSTILE-TOKEN")})
	r := runCLI(t, map[string]string{"CAPTCHAAI_KEY": solveKey},
		append([]string{"solve", "--method", "turnstile", "--param", "sitekey=0x4AAA", "--param", "pageurl=https://shop.example/checkout", "--api-url", base}, fast...)...)
	if r.code != 0 || r.stdout != "0.TURNSTILE-TOKEN\n" || r.stderr != "" {
		t.Fatalf("run = %+v", r)
	}
	submits, polls, _ := f.counts()
	if submits != 1 || polls != 3 {
		t.Errorf("submits %d polls %d; want 1 3", submits, polls)
	}
	want := url.Values{"key": {solveKey}, "method": {"turnstile"}, "json": {"1"}, "sitekey": {"0x4AAA"}, "pageurl": {"https://shop.example/checkout"}}
	if diff := cmp.Diff(want, f.submits[0]); diff != "" {
		t.Errorf("submit (-want +got):\n%s", diff)
	}
}

func TestSolvePrintsRawAnswerForImages(t *testing.T) {
	t.Parallel()
	_, base := newProtocolFake(t, []string{"OK|4242"}, []string{"OK|x7Kp2"})
	r := runCLI(t, map[string]string{"CAPTCHAAI_KEY": solveKey, "CAPTCHAAI_URL": base},
		append([]string{"solve", "--method", "base64", "--param", "body=R0lGODlh"}, fast...)...)
	if r.code != 0 || r.stdout != "x7Kp2\n" {
		t.Fatalf("run = %+v", r)
	}
}

func TestSolveCloudflarePrintsClearance(t *testing.T) {
	t.Parallel()
	_, base := newProtocolFake(t, []string{jsonOK(4242)}, []string{`{"status":1,"request":"cfv-1","user_agent":"UA"}`})
	r := runCLI(t, map[string]string{"CAPTCHAAI_KEY": solveKey},
		append([]string{"solve", "--method", "cloudflare_challenge", "--param", "pageurl=https://a.example/", "--param", "proxy=u:p@h:8080", "--param", "proxytype=HTTP", "--api-url", base}, fast...)...)
	if r.code != 0 || r.stdout != "cfv-1\n" {
		t.Fatalf("run = %+v", r)
	}
}

func TestSolveRetriesNoSlot(t *testing.T) {
	t.Parallel()
	// The first submit meets a full plan; solve waits RetryAfter (5 s) and
	// tries again. A real wait, but only one.
	f, base := newProtocolFake(t, []string{jsonErr("ERROR_NO_SLOT_AVAILABLE"), jsonOK("4242")}, []string{jsonOK("TOK")})
	r := runCLI(t, map[string]string{"CAPTCHAAI_KEY": solveKey},
		append([]string{"solve", "--method", "userrecaptcha", "--param", "googlekey=6Le", "--param", "pageurl=https://a.example/", "--api-url", base}, fast...)...)
	if r.code != 0 || r.stdout != "TOK\n" {
		t.Fatalf("run = %+v", r)
	}
	if submits, _, _ := f.counts(); submits != 2 {
		t.Errorf("submits %d, want 2", submits)
	}
}

func TestSolveFailures(t *testing.T) {
	t.Parallel()
	keyFile := filepath.Join(t.TempDir(), "key")
	os.WriteFile(keyFile, []byte("  "+solveKey+"\n"), 0o600)
	emptyFile := filepath.Join(t.TempDir(), "empty")
	os.WriteFile(emptyFile, []byte("\n"), 0o600)
	turnstile := []string{"solve", "--method", "turnstile", "--param", "sitekey=s", "--param", "pageurl=https://a.example/"}

	tests := []struct {
		name     string
		env      map[string]string
		args     []string
		pollQ    []string
		code     int
		stderr   string // exact
		requests bool   // whether any request may reach the server
	}{
		{name: "missing field", env: map[string]string{"CAPTCHAAI_KEY": solveKey},
			args: []string{"solve", "--method", "turnstile", "--param", "pageurl=https://a.example/"}, code: 2,
			stderr: "captchaq solve: params.sitekey: required for turnstile; the widget's site key (data-sitekey in the page)\n"},
		{name: "url without scheme", env: map[string]string{"CAPTCHAAI_KEY": solveKey},
			args: []string{"solve", "--method", "turnstile", "--param", "sitekey=s", "--param", "pageurl=shop.example/x"}, code: 2,
			stderr: `captchaq solve: params.pageurl: "shop.example/x" has no scheme; add https:// (e.g. https://shop.example/x)` + "\n"},
		{name: "unsupported", env: map[string]string{"CAPTCHAAI_KEY": solveKey},
			args: []string{"solve", "--method", "hcaptcha", "--param", "sitekey=s"}, code: 2,
			stderr: `captchaq solve: validate: unsupported captcha type hCaptcha (method "hcaptcha"): the provider does not support it; supported methods: base64, bls, captchafox, cloudflare_challenge, friendly_captcha, geetest, lemin, post, turnstile, userrecaptcha` + "\n"},
		{name: "no method", env: map[string]string{"CAPTCHAAI_KEY": solveKey}, args: []string{"solve"}, code: 2,
			stderr: "captchaq solve: --method is required, e.g. --method turnstile\n"},
		{name: "bad param", env: map[string]string{"CAPTCHAAI_KEY": solveKey}, args: []string{"solve", "--method", "turnstile", "--param", "sitekey"}, code: 2,
			stderr: "invalid value \"sitekey\" for flag -param: \"sitekey\": write key=value, e.g. --param pageurl=https://example.com/login\n"},
		{name: "no key", env: map[string]string{}, args: turnstile, code: 2,
			stderr: "captchaq solve: no provider key: set CAPTCHAAI_KEY to the account key, or CAPTCHAAI_KEY_FILE to a file that holds it\n"},
		{name: "empty key file", env: map[string]string{"CAPTCHAAI_KEY_FILE": emptyFile}, args: turnstile, code: 2,
			stderr: "captchaq solve: CAPTCHAAI_KEY_FILE: \"" + emptyFile + "\" is empty; put the account key in it\n"},
		{name: "missing key file", env: map[string]string{"CAPTCHAAI_KEY_FILE": "/nonexistent/key"}, args: turnstile, code: 2,
			stderr: "captchaq solve: CAPTCHAAI_KEY_FILE: cannot read \"/nonexistent/key\": no such file or directory\n"},
		{name: "wrong key", env: map[string]string{"CAPTCHAAI_KEY": "not-the-key"}, args: turnstile, code: 3, requests: true,
			stderr: "captchaq solve: submit: ERROR_WRONG_USER_KEY: the account key is malformed; check CAPTCHAAI_KEY (the account cannot be used: check the key, the plan and the allowed IPs)\n"},
		{name: "unsolvable", env: map[string]string{"CAPTCHAAI_KEY_FILE": keyFile}, args: turnstile, code: 4, requests: true,
			pollQ:  []string{jsonErr("CAPCHA_NOT_READY"), jsonErr("ERROR_CAPTCHA_UNSOLVABLE")},
			stderr: "captchaq solve: captcha 4242 failed: poll: ERROR_CAPTCHA_UNSOLVABLE: the provider could not solve it\n"},
		{name: "timeout", env: map[string]string{"CAPTCHAAI_KEY": solveKey}, args: append(slicesClone(turnstile), "--timeout", "50ms"), code: 4, requests: true,
			pollQ:  []string{jsonErr("CAPCHA_NOT_READY")},
			stderr: "captchaq solve: no answer for captcha 4242 within 50ms; raise --timeout\n"},
		{name: "interval too slow", env: map[string]string{"CAPTCHAAI_KEY": solveKey}, args: append(slicesClone(turnstile), "--poll-interval", "10s"), code: 2,
			stderr: "captchaq solve: --poll-interval 10s must be above 0 and at most 5s\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pollQ := tt.pollQ
			if pollQ == nil {
				pollQ = []string{jsonOK("TOK")}
			}
			f, base := newProtocolFake(t, []string{jsonOK("4242")}, pollQ)
			args := append(slicesClone(tt.args), "--api-url", base)
			if tt.name != "interval too slow" {
				args = append(args, fast...)
			}
			r := runCLI(t, tt.env, args...)
			if r.code != tt.code || r.stdout != "" {
				t.Errorf("code %d stdout %q; want %d and nothing", r.code, r.stdout, tt.code)
			}
			got := r.stderr
			if tt.name == "bad param" {
				got = firstLine(got)
			}
			if got != tt.stderr {
				t.Errorf("stderr\n got %q\nwant %q", got, tt.stderr)
			}
			submits, polls, rejected := f.counts()
			if !tt.requests && submits+polls+rejected != 0 {
				t.Errorf("requests were made: %d %d %d", submits, polls, rejected)
			}
		})
	}
}

func TestProviderURLPrecedence(t *testing.T) {
	t.Parallel()
	env := &environment{getenv: func(k string) string { return map[string]string{"CAPTCHAAI_URL": "http://env.example"}[k] }}
	if got := providerURL(env, "http://flag.example"); got != "http://flag.example" {
		t.Errorf("flag: %q", got)
	}
	if got := providerURL(env, ""); got != "http://env.example" {
		t.Errorf("env: %q", got)
	}
	none := &environment{getenv: func(string) string { return "" }}
	if got := providerURL(none, ""); got != "https://ocr.captchaai.com" {
		t.Errorf("default: %q", got)
	}
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i+1]
	}
	return s
}
