package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq/sim"
)

// npmClientDir holds the node project that drives the npm clients
// (compat/node/compat.js); .ci/run installs it with npm ci.
var npmClientDir = filepath.Join("..", "..", "compat", "node")

// allCases are the calls compat.js makes with a client of the Solver API.
var allCases = []string{"balance", "image", "turnstile", "recaptcha", "geetest", "wrong_key", "report_good", "report_bad"}

// npmClients are the clients compat.js drives (versions pinned in
// compat/node/package.json) and the calls it makes with each: those the
// client has.
var npmClients = []struct {
	name  string
	cases []string
}{
	{"@2captcha/captcha-solver", allCases},
	{"2captcha-ts", allCases},
	{"2captcha", allCases},
	{"@infosimples/node_two_captcha", []string{"balance", "image", "recaptcha", "wrong_key", "report_good", "report_bad"}},
	{"puppeteer-extra-plugin-recaptcha", []string{"recaptcha", "wrong_key"}},
}

// reportsPerRun is how many reports one run of every client sends.
func reportsPerRun() int {
	n := 0
	for _, c := range npmClients {
		for _, k := range c.cases {
			if strings.HasPrefix(k, "report_") {
				n++
			}
		}
	}
	return n
}

// npmClient returns the node binary, or ends the test: it fails when
// CI=true (CI must have node and the packages), and skips elsewhere.
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
	for _, c := range npmClients {
		if _, err := os.Stat(filepath.Join(npmClientDir, "node_modules", c.name, "package.json")); err != nil {
			miss(c.name + " is not installed in compat/node")
		}
	}
	return node
}

// npmCase is one line of compat.js's output.
type npmCase struct {
	Client string          `json:"client"`
	Case   string          `json:"case"`
	OK     bool            `json:"ok"`
	Result json.RawMessage `json:"result"`
	Error  string          `json:"error"`
}

// runNPMClients runs compat.js against base with key (trusting the CA in
// caFile when it is not empty) and returns the calls by client and name:
// of every client, or of those named in only.
func runNPMClients(t *testing.T, node, base, key, caFile string, only ...string) map[string]map[string]npmCase {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{"compat.js"}, only...)...)
	cmd.Dir = npmClientDir
	cmd.Env = append(os.Environ(), "CAPTCHAQ_BASE="+base, "CAPTCHAQ_KEY="+key, "CAPTCHAQ_POLL_MS=100")
	if caFile != "" {
		cmd.Env = append(cmd.Env, "NODE_EXTRA_CA_CERTS="+caFile)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	calls := map[string]map[string]npmCase{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var c npmCase
		if json.Unmarshal(sc.Bytes(), &c) == nil && c.Case != "" {
			if calls[c.Client] == nil {
				calls[c.Client] = map[string]npmCase{}
			}
			calls[c.Client][c.Case] = c
		}
	}
	if err != nil {
		t.Errorf("node compat.js: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr.String())
	}
	return calls
}

var (
	imageAnswer     = regexp.MustCompile(`^\w{4,7}$`) // the simulator's image answers: 4 to 7 characters
	turnstileAnswer = regexp.MustCompile(`^0\.[\w.-]{100,}$`)
	recaptchaAnswer = regexp.MustCompile(`^03A[\w-]{100,}$`)
)

// checkNPMClients asserts every client (or those named in only) made
// each of its calls with the outcome the client returns for it.
func checkNPMClients(t *testing.T, calls map[string]map[string]npmCase, balance float64, only ...string) {
	t.Helper()
	for _, c := range npmClients {
		if len(only) > 0 && !slices.Contains(only, c.name) {
			continue
		}
		got := calls[c.name]
		if len(got) != len(c.cases) {
			t.Errorf("%s made %d calls, want %d (%v)", c.name, len(got), len(c.cases), c.cases)
		}
		for _, name := range c.cases {
			call, ok := got[name]
			if !ok {
				t.Errorf("%s: no %s call", c.name, name)
				continue
			}
			if err := checkNPMCall(call, balance); err != nil {
				t.Errorf("%s %s: %v (call %+v)", c.name, name, err, call)
			}
		}
	}
}

// wrongKeyTexts: a client that shows its own text for a code instead of
// the code (@infosimples/node_two_captcha's text for
// ERROR_WRONG_USER_KEY).
var wrongKeyTexts = map[string]string{
	"@infosimples/node_two_captcha": "parameter value in incorrect format, it should contain 32 symbols",
}

func checkNPMCall(c npmCase, balance float64) error {
	if c.Case == "wrong_key" {
		want := cmpOr(wrongKeyTexts[c.Client], "ERROR_WRONG_USER_KEY")
		if c.OK || !strings.Contains(c.Error, want) {
			return fmt.Errorf("want %q (ERROR_WRONG_USER_KEY)", want)
		}
		return nil
	}
	if !c.OK {
		return fmt.Errorf("failed")
	}
	switch c.Case {
	case "balance":
		if string(c.Result) != strconv.FormatFloat(balance, 'f', -1, 64) {
			return fmt.Errorf("balance %s, want %v", c.Result, balance)
		}
		return nil
	case "report_good", "report_bad":
		if string(c.Result) != `"OK_REPORT_RECORDED"` {
			return fmt.Errorf("want OK_REPORT_RECORDED")
		}
		return nil
	}
	var r struct {
		ID     string          `json:"id"`
		Answer json.RawMessage `json:"answer"`
	}
	if err := json.Unmarshal(c.Result, &r); err != nil || r.ID == "" {
		return fmt.Errorf("want an id and an answer")
	}
	if c.Case == "geetest" {
		var gt map[string]string
		if json.Unmarshal(r.Answer, &gt) != nil || gt["geetest_challenge"] == "" || gt["geetest_validate"] == "" || gt["geetest_seccode"] == "" {
			return fmt.Errorf("want the three geetest_ fields")
		}
		return nil
	}
	var s string
	re := map[string]*regexp.Regexp{"image": imageAnswer, "turnstile": turnstileAnswer, "recaptcha": recaptchaAnswer}[c.Case]
	if json.Unmarshal(r.Answer, &s) != nil || re == nil || !re.MatchString(s) {
		return fmt.Errorf("answer %s, want %v", r.Answer, re)
	}
	return nil
}

// tlsFront is how a test reaches a front over TLS: the flag and the
// data directory the front makes its CA in.
type tlsFront struct {
	on   bool
	data string
}

// flags are the front's TLS flags.
func (f tlsFront) flags() []string {
	if !f.on {
		return nil
	}
	return []string{"--tls-self-signed"}
}

// env is the front's environment.
func (f tlsFront) env() []string { return []string{"XDG_DATA_HOME=" + f.data} }

// base is the front's base URL on loopback port port.
func (f tlsFront) base(port string) string {
	if f.on {
		return "https://127.0.0.1:" + port
	}
	return "http://127.0.0.1:" + port
}

// ca is the CA file clients trust ("" over http).
func (f tlsFront) ca() string {
	if !f.on {
		return ""
	}
	return filepath.Join(f.data, "captchaq", "tls", "ca.pem")
}

// eachScheme runs test over http and over TLS, in parallel.
func eachScheme(t *testing.T, test func(t *testing.T, f tlsFront)) {
	for _, on := range []bool{false, true} {
		name := map[bool]string{false: "http", true: "https"}[on]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, tlsFront{on: on, data: t.TempDir()})
		})
	}
}

// TestNPMClientsAgainstSim drives the npm clients against `captchaq sim`
// over http and https: balance, image, Turnstile, reCAPTCHA, GeeTest, a
// wrong key and both reports, as far as each client has them.
func TestNPMClientsAgainstSim(t *testing.T) {
	t.Parallel()
	node := npmClient(t)
	bin := captchaqBinary(t)
	eachScheme(t, func(t *testing.T, f tlsFront) {
		_, m := startProcess(t, bin, f.env(), regexp.MustCompile(`listening on https?://127\.0\.0\.1:(\d+)`),
			append([]string{"sim", "--addr", "127.0.0.1:0", "--key", "npm-sim-key", "--latency-scale", "0.01", "--balance", "42.5", "--threads", "20"}, f.flags()...)...)
		checkNPMClients(t, runNPMClients(t, node, f.base(m[1]), "npm-sim-key", f.ca()), 42.5)
	})
}

// TestNPMClientsAgainstServe drives them against `captchaq serve` solving
// on a simulator; every report reaches the provider.
func TestNPMClientsAgainstServe(t *testing.T) {
	t.Parallel()
	node := npmClient(t)
	bin := captchaqBinary(t)
	eachScheme(t, func(t *testing.T, f tlsFront) {
		ss, apiURL, err := sim.Start(sim.Config{Key: "npm-provider-key", LatencyScale: 0.01, Balance: 7.25, Threads: 20, PollBan: sim.PollBan{Disabled: true}}, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ss.Close() })
		clients := writeFile(t, "clients.json", `[{"name":"npm","key":"npm-client-key"}]`)
		_, m := startProcess(t, bin, append(f.env(), "CAPTCHAAI_KEY=npm-provider-key"), regexp.MustCompile(`msg=serving addr=127\.0\.0\.1:(\d+)`),
			append([]string{"serve", "--api-url", apiURL, "--clients", clients, "--store", filepath.Join(t.TempDir(), "serve.db"),
				"--listen", "127.0.0.1:0", "--poll-interval", "50ms", "--threads", "20"}, f.flags()...)...)
		checkNPMClients(t, runNPMClients(t, node, f.base(m[1]), "npm-client-key", f.ca()), 7.25)
		if st, want := ss.Stats(), int64(reportsPerRun()); st.Calls.Report != want {
			t.Errorf("reports that reached the provider: %d, want %d", st.Calls.Report, want)
		}
	})
}

// TestNPMClientsAgainstGateway drives them against `captchaq serve --amqp`
// with a `captchaq worker` on the real broker, over http and https. The
// gateway starts after the worker and is asked for the balance at once:
// it answers the worker's reading from its first request.
func TestNPMClientsAgainstGateway(t *testing.T) {
	t.Parallel()
	node := npmClient(t)
	f := newProcessFleet(t, "test-npm-gw-", sim.Config{Key: "npm-provider-key", LatencyScale: 0.01, Balance: 3.5, Threads: 40, PollBan: sim.PollBan{Disabled: true}})
	clients := writeFile(t, "clients.json", `[{"name":"npm","key":"npm-client-key"}]`)
	f.worker("npm-gw-worker", "npm-provider-key", regexp.MustCompile(`msg="worker started"`), "--poll-interval", "50ms", "--threads", "40")
	eachScheme(t, func(t *testing.T, tf tlsFront) {
		p, _, _ := f.serveWith(filepath.Join(t.TempDir(), "gw.db"), clients, tf.env(), tf.flags()...)
		port := regexp.MustCompile(`msg=serving addr=127\.0\.0\.1:(\d+)`).FindStringSubmatch(p.output())[1]
		base := tf.base(port)
		client := http.DefaultClient
		if tf.on {
			client = httpsClient(caPool(t, tf.ca()), true)
		}
		resp, err := client.Get(base + "/res.php?key=npm-client-key&action=getbalance")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "3.5" {
			t.Fatalf("the gateway's first getbalance: %q, want 3.5", body)
		}
		checkNPMClients(t, runNPMClients(t, node, base, "npm-client-key", tf.ca()), 3.5)
	})
}

// TestNPMClientVersions: docs/clients.md names the versions CI runs.
func TestNPMClientVersions(t *testing.T) {
	t.Parallel()
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	b, err := os.ReadFile(filepath.Join(npmClientDir, "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &pkg); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "clients.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range npmClients {
		v := pkg.Dependencies[c.name]
		row := "| `" + c.name + "` | " + v + " |"
		if v == "" || !strings.Contains(string(doc), row) {
			t.Errorf("docs/clients.md does not name %s at the version CI runs (%q): want a row %q", c.name, v, row)
		}
	}
}
