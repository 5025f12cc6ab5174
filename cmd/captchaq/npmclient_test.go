package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq/sim"
)

// npmClientDir holds the node project that drives the official 2captcha
// npm client (@2captcha/captcha-solver); .ci/run installs it with npm ci.
var npmClientDir = filepath.Join("..", "..", "compat", "node")

// npmClient returns the node binary, or ends the test: it fails when
// CI=true (CI must have node and the package), and skips elsewhere.
func npmClient(t *testing.T) string {
	t.Helper()
	miss := func(why string) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s (.ci/run installs it)", why)
		}
		t.Skipf("%s: run `npm ci` in compat/node to run this test", why)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		miss("node is not installed")
	}
	if _, err := os.Stat(filepath.Join(npmClientDir, "node_modules", "@2captcha", "captcha-solver", "package.json")); err != nil {
		miss("@2captcha/captcha-solver is not installed in compat/node")
	}
	return node
}

// npmCase is one line of compat.js's output.
type npmCase struct {
	Case   string          `json:"case"`
	OK     bool            `json:"ok"`
	Result json.RawMessage `json:"result"`
	Error  string          `json:"error"`
}

// runNPMClient runs compat.js against base with key and returns its cases
// by name; every call must have done what the client expects.
func runNPMClient(t *testing.T, node, base, key string) map[string]npmCase {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "compat.js")
	cmd.Dir = npmClientDir
	cmd.Env = append(os.Environ(), "CAPTCHAQ_BASE="+base, "CAPTCHAQ_KEY="+key, "CAPTCHAQ_POLL_MS=100")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	cases := map[string]npmCase{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var c npmCase
		if json.Unmarshal(sc.Bytes(), &c) == nil && c.Case != "" {
			cases[c.Case] = c
		}
	}
	if err != nil {
		t.Errorf("node compat.js: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr.String())
	}
	return cases
}

// checkNPMCases asserts each call's outcome as the client returns it.
func checkNPMCases(t *testing.T, cases map[string]npmCase, balance float64) {
	t.Helper()
	answer := func(name string) (data json.RawMessage) {
		c, ok := cases[name]
		if !ok || !c.OK {
			t.Errorf("%s: %+v, want a solve", name, c)
			return nil
		}
		var r struct {
			Status int             `json:"status"`
			Data   json.RawMessage `json:"data"`
			ID     string          `json:"id"`
		}
		if err := json.Unmarshal(c.Result, &r); err != nil || r.Status != 1 || r.ID == "" {
			t.Errorf("%s: result %s, want status 1 with an id", name, c.Result)
		}
		return r.Data
	}
	text := func(name string, re *regexp.Regexp) {
		var s string
		if data := answer(name); json.Unmarshal(data, &s) != nil || !re.MatchString(s) {
			t.Errorf("%s: answer %s, want %v", name, data, re)
		}
	}
	if c := cases["balance"]; !c.OK || string(c.Result) != strconv.FormatFloat(balance, 'f', -1, 64) {
		t.Errorf("balance: %+v, want %v", c, balance)
	}
	text("image", regexp.MustCompile(`^\w{4,6}$`))
	text("turnstile", regexp.MustCompile(`^0\.[\w.-]{100,}$`))
	text("recaptcha", regexp.MustCompile(`^03A[\w-]{100,}$`))
	var gt map[string]string
	if data := answer("geetest"); json.Unmarshal(data, &gt) != nil || gt["geetest_challenge"] == "" || gt["geetest_validate"] == "" || gt["geetest_seccode"] == "" {
		t.Errorf("geetest: answer %s, want the three geetest_ fields", data)
	}
	if c := cases["wrong_key"]; c.OK || !strings.Contains(c.Error, "ERROR_WRONG_USER_KEY") {
		t.Errorf("wrong key: %+v, want ERROR_WRONG_USER_KEY", c)
	}
	for _, name := range []string{"report_good", "report_bad"} {
		if c := cases[name]; !c.OK || string(c.Result) != `"OK_REPORT_RECORDED"` {
			t.Errorf("%s: %+v, want OK_REPORT_RECORDED", name, c)
		}
	}
}

// TestNPMClientAgainstSim drives the official npm client against
// `captchaq sim`: balance, image (a JSON POST body), Turnstile,
// reCAPTCHA, GeeTest, a wrong key and both reports.
func TestNPMClientAgainstSim(t *testing.T) {
	t.Parallel()
	node := npmClient(t)
	bin := captchaqBinary(t)
	_, m := startProcess(t, bin, nil, regexp.MustCompile(`listening on (http://127\.0\.0\.1:\d+)`),
		"sim", "--addr", "127.0.0.1:0", "--key", "npm-sim-key", "--latency-scale", "0.01", "--balance", "42.5")
	checkNPMCases(t, runNPMClient(t, node, m[1], "npm-sim-key"), 42.5)
}

// TestNPMClientAgainstServe drives it against `captchaq serve` solving on
// a simulator.
func TestNPMClientAgainstServe(t *testing.T) {
	t.Parallel()
	node := npmClient(t)
	bin := captchaqBinary(t)
	ss, apiURL, err := sim.Start(sim.Config{Key: "npm-provider-key", LatencyScale: 0.01, Balance: 7.25, PollBan: sim.PollBan{Disabled: true}}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	clients := writeFile(t, "clients.json", `[{"name":"npm","key":"npm-client-key"}]`)
	_, m := startProcess(t, bin, []string{"CAPTCHAAI_KEY=npm-provider-key"}, regexp.MustCompile(`msg=serving addr=(127\.0\.0\.1:\d+)`),
		"serve", "--api-url", apiURL, "--clients", clients, "--store", filepath.Join(t.TempDir(), "serve.db"),
		"--listen", "127.0.0.1:0", "--poll-interval", "50ms")
	checkNPMCases(t, runNPMClient(t, node, "http://"+m[1], "npm-client-key"), 7.25)
	if st := ss.Stats(); st.Calls.Report != 2 {
		t.Errorf("reports that reached the provider: %d, want 2", st.Calls.Report)
	}
}

// TestNPMClientAgainstGateway drives it against `captchaq serve --amqp`
// with a `captchaq worker` on the real broker; getbalance answers the
// balance the worker read and sent in its status beat.
func TestNPMClientAgainstGateway(t *testing.T) {
	node := npmClient(t)
	f := newProcessFleet(t, "test-npm-gw-", sim.Config{Key: "npm-provider-key", LatencyScale: 0.01, Balance: 3.5, PollBan: sim.PollBan{Disabled: true}})
	clients := writeFile(t, "clients.json", `[{"name":"npm","key":"npm-client-key"}]`)
	f.worker("npm-gw-worker", "npm-provider-key", regexp.MustCompile(`msg="worker started"`), "--poll-interval", "50ms")
	_, base, _ := f.serve(filepath.Join(t.TempDir(), "gw.db"), clients)
	// The gateway hears the balance with the worker's next status beat
	// (every 5 s): wait for that event before the client asks.
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(base + "/res.php?key=npm-client-key&action=getbalance")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) == "3.5" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("getbalance through the gateway: %q a minute after the start, want 3.5", body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	checkNPMCases(t, runNPMClient(t, node, base, "npm-client-key"), 3.5)
}
