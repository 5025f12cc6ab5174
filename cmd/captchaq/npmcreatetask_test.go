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

	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/sim"
)

// createTaskClients are the npm clients of the createTask protocol that
// compat/node/createtask.js drives; .ci/run installs them with npm ci.
var createTaskClients = []string{"@zennolab_com/capmonstercloud-client", "anticaptcha"}

// npmCreateTaskClients returns the node binary, or ends the test: it
// fails when CI=true, and skips elsewhere.
func npmCreateTaskClients(t *testing.T) string {
	t.Helper()
	node := npmClient(t)
	for _, pkg := range createTaskClients {
		if _, err := os.Stat(filepath.Join(npmClientDir, "node_modules", pkg, "package.json")); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is not installed in compat/node (.ci/run installs it)", pkg)
			}
			t.Skipf("%s is not installed in compat/node: run `npm ci` there to run this test", pkg)
		}
	}
	return node
}

// ctCase is one line of createtask.js's output.
type ctCase struct {
	Client string          `json:"client"`
	Case   string          `json:"case"`
	OK     bool            `json:"ok"`
	Result json.RawMessage `json:"result"`
	Error  string          `json:"error"`
}

// simUserAgent is the user agent the simulator solves Turnstiles with.
// Through serve it reaches the clients from res.php polls of one id: an
// ids= poll answers tokens alone, so those simulators take none.
const simUserAgent = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) SimWorker/1.0"

// runNodeScript runs script in compat/node against base with key and
// returns its calls by "client/case".
func runNodeScript(t *testing.T, node, script, base, key string) map[string]ctCase {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Dir = npmClientDir
	cmd.Env = append(os.Environ(), "CAPTCHAQ_BASE="+base, "CAPTCHAQ_KEY="+key)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Errorf("node %s: %v\nstdout:\n%s\nstderr:\n%s", script, err, out, stderr.String())
	}
	cases := map[string]ctCase{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var c ctCase
		if json.Unmarshal(sc.Bytes(), &c) == nil && c.Case != "" {
			cases[c.Client+"/"+c.Case] = c
		}
	}
	return cases
}

// runCreateTaskClients runs createtask.js against base with key and
// checks each call's outcome as the clients return it.
func runCreateTaskClients(t *testing.T, node, base, key string, balance float64) {
	t.Helper()
	cases := runNodeScript(t, node, "createtask.js", base, key)
	for _, client := range []string{"capmonster", "anticaptcha"} {
		solution := func(name string) map[string]string {
			c := cases[client+"/"+name]
			var sol map[string]string
			if !c.OK || json.Unmarshal(c.Result, &sol) != nil {
				t.Errorf("%s %s: %+v, want a solution", client, name, c)
			}
			return sol
		}
		if c := cases[client+"/balance"]; !c.OK || string(c.Result) != strconv.FormatFloat(balance, 'f', -1, 64) {
			t.Errorf("%s balance: %+v, want %v", client, c, balance)
		}
		if s := solution("image"); !regexp.MustCompile(`^\d{4,7}$`).MatchString(s["text"]) || len(s) != 1 {
			t.Errorf("%s image: %v, want {text} of digits (numeric: 1)", client, s)
		}
		if s := solution("recaptcha"); !strings.HasPrefix(s["gRecaptchaResponse"], "03A") || len(s["gRecaptchaResponse"]) < 400 || s["token"] != s["gRecaptchaResponse"] {
			t.Errorf("%s reCAPTCHA v2: %v, want gRecaptchaResponse and token", client, s)
		}
		if s := solution("turnstile"); !strings.HasPrefix(s["token"], "0.") || s["userAgent"] != simUserAgent {
			t.Errorf("%s Turnstile: %v, want token and the userAgent it was solved with, %q", client, s, simUserAgent)
		}
		if c := cases[client+"/wrong_key"]; c.OK || !strings.Contains(c.Error, "KEY_DOES_NOT_EXIST") {
			t.Errorf("%s wrong key: %+v, want KEY_DOES_NOT_EXIST", client, c)
		}
	}
}

// CapMonster Cloud's official client and anticaptcha against `captchaq
// sim`.
func TestNPMCreateTaskClientsAgainstSim(t *testing.T) {
	t.Parallel()
	node := npmCreateTaskClients(t)
	_, m := startProcess(t, captchaqBinary(t), nil, regexp.MustCompile(`listening on (http://127\.0\.0\.1:\d+)`),
		"sim", "--addr", "127.0.0.1:0", "--key", "ct-sim-key", "--latency-scale", "0.01", "--balance", "42.5", "--user-agent", simUserAgent)
	runCreateTaskClients(t, node, m[1], "ct-sim-key", 42.5)
}

// The same against `captchaq serve` solving on a simulator through
// in.php: the clients' createTask calls are translated at the door.
func TestNPMCreateTaskClientsAgainstServe(t *testing.T) {
	t.Parallel()
	node := npmCreateTaskClients(t)
	ss, apiURL, err := sim.Start(sim.Config{Key: "ct-provider-key", LatencyScale: 0.01, Balance: 7.25, PollBan: sim.PollBan{Disabled: true}, UserAgent: simUserAgent, NoBulk: true}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	clients := writeFile(t, "clients.json", `[{"name":"ct","key":"ct-client-key"}]`)
	_, m := startProcess(t, captchaqBinary(t), []string{"CAPTCHAAI_KEY=ct-provider-key"}, regexp.MustCompile(`msg=serving addr=(127\.0\.0\.1:\d+)`),
		"serve", "--api-url", apiURL, "--clients", clients, "--store", filepath.Join(t.TempDir(), "serve.db"),
		"--listen", "127.0.0.1:0", "--poll-interval", "50ms")
	runCreateTaskClients(t, node, "http://"+m[1], "ct-client-key", 7.25)
	if st := ss.Stats(); st.Calls.CreateTask != 0 || st.Accepted != 6 {
		t.Errorf("at the provider: %d accepted, %d createTask calls; want the 6 tasks sent by in.php", st.Accepted, st.Calls.CreateTask)
	}
}

// The same against `captchaq serve --amqp` with a `captchaq worker` on the
// real broker.
func TestNPMCreateTaskClientsAgainstGateway(t *testing.T) {
	t.Parallel()
	node := npmCreateTaskClients(t)
	f := newProcessFleet(t, "test-npm-ct-gw-", sim.Config{Key: "ct-provider-key", LatencyScale: 0.01, Balance: 3.5, PollBan: sim.PollBan{Disabled: true}, UserAgent: simUserAgent, NoBulk: true})
	clients := writeFile(t, "clients.json", `[{"name":"ct","key":"ct-client-key"}]`)
	f.worker("ct-gw-worker", "ct-provider-key", regexp.MustCompile(`msg="worker started"`), "--poll-interval", "50ms")
	_, base, _ := f.serve(filepath.Join(t.TempDir(), "gw.db"), clients)
	// getBalance answers once the worker's status beat brought the
	// balance to the gateway.
	var body []byte
	if !testbound.Eventually(func() bool {
		resp, err := http.Post(base+"/getBalance", "application/json", strings.NewReader(`{"clientKey":"ct-client-key"}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		return strings.Contains(string(body), `"balance":3.5`)
	}) {
		t.Fatalf("getBalance through the gateway: %s after %v, want 3.5", body, testbound.Bound)
	}
	runCreateTaskClients(t, node, base, "ct-client-key", 3.5)
}
