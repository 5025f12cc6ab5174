package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/sim"
)

const solveKey = "cli-Secret-Key-123"

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

var (
	solveEnv  = map[string]string{"CAPTCHAAI_KEY": solveKey}
	turnstile = []string{"solve", "--method", "turnstile", "--param", "sitekey=0x4AAA", "--param", "pageurl=https://shop.example/checkout"}
)

// solve runs on the queue: one submit, the answer fetched by the queue's
// poller, the token on stdout and nothing else.
func TestSolveTurnstile(t *testing.T) {
	t.Parallel()
	s, base := startFastSim(t, sim.Config{Threads: 5, Key: solveKey})
	r := runCLI(t, solveEnv, append(turnstile, "--api-url", base)...)
	if r.code != 0 || r.stderr != "" || !regexp.MustCompile(`^0\.[A-Za-z0-9_.-]{100,}\n$`).MatchString(r.stdout) {
		t.Fatalf("run = %+v", r)
	}
	if st := s.Stats(); st.Accepted != 1 || st.Fetched != 1 || st.Duplicates != 0 {
		t.Errorf("simulator accepted %d fetched %d duplicates %d; want 1 1 0", st.Accepted, st.Fetched, st.Duplicates)
	}
}

func TestSolvePrintsTheTextOfImages(t *testing.T) {
	t.Parallel()
	_, base := startFastSim(t, sim.Config{Threads: 5})
	r := runCLI(t, map[string]string{"CAPTCHAAI_KEY": solveKey, "CAPTCHAAI_URL": base},
		"solve", "--method", "base64", "--param", "body=R0lGODlh", "--param", "numeric=1")
	if r.code != 0 || !regexp.MustCompile(`^[0-9]{4,7}\n$`).MatchString(r.stdout) {
		t.Fatalf("run = %+v", r)
	}
}

// With neither a key nor a provider URL, solve runs on the built-in
// simulator, as batch does, and says so.
func TestSolveOnTheBuiltInSimulator(t *testing.T) {
	t.Parallel()
	r := runCLI(t, map[string]string{}, "solve", "--method", "base64", "--param", "body=R0lGODlh")
	if r.code != 0 || r.stderr != "captchaq: no CAPTCHAAI_KEY set: solving against the built-in simulator (set CAPTCHAAI_KEY to use CaptchaAI)\n" ||
		!regexp.MustCompile(`^[A-Za-z0-9]{4,7}\n$`).MatchString(r.stdout) {
		t.Fatalf("run = %+v", r)
	}
}

// A full plan answers "no free thread": the queue waits for a thread and
// submits again, as it does for a batch.
func TestSolveWaitsForAThread(t *testing.T) {
	t.Parallel()
	lat := map[provider.Kind]sim.Latency{provider.KindRecaptchaV2: {Median: 300 * time.Millisecond, Min: 300 * time.Millisecond, Max: 300 * time.Millisecond}}
	s, base := startFastSim(t, sim.Config{Threads: 1, Key: solveKey, Latency: lat, LatencyScale: 1})
	// Another client holds the plan's one thread for 300 ms.
	resp, err := postForm(base+"/in.php", url.Values{"key": {solveKey}, "method": {"userrecaptcha"}, "googlekey": {"6Le"}, "pageurl": {"https://a.example/other"}})
	if err != nil || !strings.HasPrefix(resp, "OK|") {
		t.Fatalf("the other client's submit: %q %v", resp, err)
	}
	r := runCLI(t, solveEnv, "solve", "--method", "userrecaptcha", "--param", "googlekey=6Le", "--param", "pageurl=https://a.example/", "--api-url", base)
	if r.code != 0 || r.stdout == "" {
		t.Fatalf("run = %+v", r)
	}
	if st := s.Stats(); st.NoSlot < 1 || st.Accepted != 2 || st.PeakThreadsInUse != 1 {
		t.Errorf("no-slot answers %d, accepted %d, peak threads %d; want at least 1, 2, 1", st.NoSlot, st.Accepted, st.PeakThreadsInUse)
	}
}

func TestSolveFailures(t *testing.T) {
	t.Parallel()
	keyFile := filepath.Join(t.TempDir(), "key")
	os.WriteFile(keyFile, []byte("  "+solveKey+"\n"), 0o600)
	emptyFile := filepath.Join(t.TempDir(), "empty")
	os.WriteFile(emptyFile, []byte("\n"), 0o600)
	slow := map[provider.Kind]sim.Latency{provider.KindTurnstile: {Median: time.Hour, Min: time.Hour, Max: time.Hour}}

	tests := []struct {
		name     string
		sim      sim.Config
		env      map[string]string
		args     []string
		code     int
		stderr   string // exact
		requests bool   // whether any request may reach the simulator
	}{
		{name: "missing field", env: solveEnv,
			args: []string{"solve", "--method", "turnstile", "--param", "pageurl=https://a.example/"}, code: 2,
			stderr: "captchaq solve: params.sitekey: required for turnstile; the widget's site key (data-sitekey in the page)\n"},
		{name: "url without scheme", env: solveEnv,
			args: []string{"solve", "--method", "turnstile", "--param", "sitekey=s", "--param", "pageurl=shop.example/x"}, code: 2,
			stderr: `captchaq solve: params.pageurl: "shop.example/x" has no scheme; add https:// (e.g. https://shop.example/x)` + "\n"},
		{name: "unsupported", env: solveEnv,
			args: []string{"solve", "--method", "hcaptcha", "--param", "sitekey=s"}, code: 2,
			stderr: `captchaq solve: validate: unsupported captcha type hCaptcha (method "hcaptcha"): the provider does not support it; supported methods: base64, bls, captchafox, cloudflare_challenge, friendly_captcha, geetest, lemin, post, turnstile, userrecaptcha` + "\n"},
		{name: "no method", env: solveEnv, args: []string{"solve"}, code: 2,
			stderr: "captchaq solve: --method is required, e.g. --method turnstile\n"},
		{name: "bad param", env: solveEnv, args: []string{"solve", "--method", "turnstile", "--param", "sitekey"}, code: 2,
			stderr: "captchaq solve: invalid value \"sitekey\" for flag -param: \"sitekey\": write key=value, e.g. --param pageurl=https://example.com/login\n" +
				"Run 'captchaq solve --help' for the flags.\n"},
		{name: "no key", env: map[string]string{}, args: turnstile, code: 2,
			stderr: "captchaq solve: no provider key: set CAPTCHAAI_KEY to the account key, or CAPTCHAAI_KEY_FILE to a file that holds it\n"},
		{name: "empty key file", env: map[string]string{"CAPTCHAAI_KEY_FILE": emptyFile}, args: turnstile, code: 2,
			stderr: "captchaq solve: CAPTCHAAI_KEY_FILE: \"" + emptyFile + "\" is empty; put the account key in it\n"},
		{name: "missing key file", env: map[string]string{"CAPTCHAAI_KEY_FILE": "/nonexistent/key"}, args: turnstile, code: 2,
			stderr: "captchaq solve: CAPTCHAAI_KEY_FILE: cannot read \"/nonexistent/key\": no such file or directory\n"},
		{name: "wrong key", sim: sim.Config{Key: solveKey}, env: map[string]string{"CAPTCHAAI_KEY": "not-the-key"}, args: turnstile, code: 3, requests: true,
			stderr: "captchaq solve: stopped: the provider refused the account (…); fix the key (CAPTCHAAI_KEY or CAPTCHAAI_KEY_FILE), plan or IP allow-list, then run the same command again; --store memory kept no task: the rerun starts afresh\n"},
		{name: "unsolvable", sim: sim.Config{UnsolvableRate: 1}, env: map[string]string{"CAPTCHAAI_KEY_FILE": keyFile}, args: append(slicesClone(turnstile), "--max-attempts", "2"), code: 4, requests: true,
			stderr: "captchaq solve: failed after 2 attempts: poll: ERROR_CAPTCHA_UNSOLVABLE: The captcha could not be solved.\n"},
		{name: "timeout", sim: sim.Config{Latency: slow, LatencyScale: 1}, env: solveEnv, args: append(slicesClone(turnstile), "--timeout", "300ms"), code: 4, requests: true,
			stderr: "captchaq solve: no answer within 300ms; raise --timeout\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := tt.sim
			cfg.Threads = 5
			s, base := startFastSim(t, cfg)
			r := runCLI(t, tt.env, append(slicesClone(tt.args), "--api-url", base)...)
			if r.code != tt.code || r.stdout != "" {
				t.Errorf("code %d stdout %q; want %d and nothing", r.code, r.stdout, tt.code)
			}
			got := r.stderr
			if !lineMatches(tt.stderr, got) {
				t.Errorf("stderr\n got %q\nwant %q", got, tt.stderr)
			}
			if st := s.Stats(); !tt.requests && st.Calls.Submit+st.Calls.PollSingle+st.Calls.PollBulk != 0 {
				t.Errorf("requests were made: %+v", st.Calls)
			}
		})
	}
}

// lineMatches reports whether got is want, with … standing for any text.
func lineMatches(want, got string) bool {
	parts := strings.Split(want, "…")
	for i := range parts {
		parts[i] = regexp.QuoteMeta(parts[i])
	}
	return regexp.MustCompile(`^(?s)` + strings.Join(parts, `.*`) + `$`).MatchString(got)
}

// postForm posts v and returns the answer's body.
func postForm(u string, v url.Values) (string, error) {
	resp, err := http.PostForm(u, v)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
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
