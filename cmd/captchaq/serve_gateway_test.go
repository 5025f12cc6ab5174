package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/captchaq/captchaq/amqp"
	"github.com/captchaq/captchaq/internal/brokertest"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/sim"
)

// process is a captchaq child process whose stderr is kept.
type process struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	logs strings.Builder
	done chan error
}

// startProcess runs the binary with args and env (nothing of the test's
// own environment that names a key or a broker), and waits until a log
// line matches ready, returning the match.
func startProcess(t *testing.T, bin string, env []string, ready *regexp.Regexp, args ...string) (*process, []string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CAPTCHAAI_") && !strings.HasPrefix(kv, "CAPTCHAQ_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, done: make(chan error, 1)}
	found := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.logs.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			if m := ready.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m:
				default:
				}
			}
		}
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		// Not cmd.ProcessState: the goroutine above sets it in Wait. A
		// process already ended makes Kill return os.ErrProcessDone.
		_ = cmd.Process.Kill()
		if t.Failed() {
			// What each process said, to see why the test failed.
			t.Logf("%s %s logged:\n%s", filepath.Base(bin), args[0], p.output())
		}
	})
	select {
	case m := <-found:
		return p, m
	case err := <-p.done:
		t.Fatalf("%s exited (%v) before it was ready:\n%s", args[0], err, p.output())
	case <-time.After(60 * time.Second):
		t.Fatalf("%s not ready after a minute:\n%s", args[0], p.output())
	}
	return nil, nil
}

func (p *process) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// stop sends SIGTERM and wants exit status 0.
func (p *process) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("%s after SIGTERM: %v\n%s", p.cmd.Args[1], err, p.output())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not stop within 30s of SIGTERM:\n%s", p.cmd.Args[1], p.output())
	}
}

// processFleet is a fleet of captchaq processes: a topology of the test's
// own on the real broker and a simulator, on which workers and gateway
// servers start as child processes. The topology and every gateway's reply
// queue are deleted when the test ends, after the processes stop.
type processFleet struct {
	t         *testing.T
	bin       string
	brokerURL string
	prefix    string
	sim       *sim.Server
	apiURL    string // sim's

	mu       sync.Mutex
	owners   []string
	gateways []string
}

// newProcessFleet starts a simulator with sc; prefixStart begins the
// topology's random prefix.
func newProcessFleet(t *testing.T, prefixStart string, sc sim.Config) *processFleet {
	t.Helper()
	return newProcessFleetOn(t, brokertest.Use(t), prefixStart, sc)
}

// newProcessFleetOn is newProcessFleet on the broker at brokerURL, for a
// test that took the broker test lock its own way (brokertest.Disrupt).
func newProcessFleetOn(t *testing.T, brokerURL, prefixStart string, sc sim.Config) *processFleet {
	t.Helper()
	var b [4]byte
	rand.Read(b[:])
	f := &processFleet{t: t, brokerURL: brokerURL, prefix: prefixStart + hex.EncodeToString(b[:])}
	ss, apiURL, err := sim.Start(sc, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.sim, f.apiURL = ss, apiURL
	// Registered before any process starts, so it runs after they stop.
	t.Cleanup(func() {
		ss.Close()
		f.mu.Lock()
		defer f.mu.Unlock()
		cfg := amqp.Config{URL: f.brokerURL, Prefix: f.prefix}
		if err := amqp.DeleteReplies(context.Background(), cfg, f.gateways...); err != nil {
			t.Errorf("DeleteReplies: %v", err)
		}
		if err := amqp.DeleteTopology(context.Background(), cfg, f.owners...); err != nil {
			t.Errorf("DeleteTopology: %v", err)
		}
	})
	f.bin = captchaqBinary(t)
	return f
}

// worker starts `captchaq worker` as owner with the provider key in its
// environment, 5 threads and more args, ready when a log line matches.
func (f *processFleet) worker(owner, providerKey string, ready *regexp.Regexp, more ...string) (*process, []string) {
	f.t.Helper()
	f.mu.Lock()
	f.owners = append(f.owners, owner)
	f.mu.Unlock()
	args := append([]string{"worker", "--amqp", f.brokerURL, "--prefix", f.prefix, "--api-url", f.apiURL, "--threads", "5", "--owner", owner}, more...)
	return startProcess(f.t, f.bin, []string{"CAPTCHAAI_KEY=" + providerKey}, ready, args...)
}

// gatewayServingRE matches serve's start line in gateway mode: its
// address, then its gateway name.
var gatewayServingRE = regexp.MustCompile(`msg=serving addr=(127\.0\.0\.1:\d+) .*mode=gateway gateway=(\S+)`)

// serve starts `captchaq serve --amqp` on the store file db with the
// clients file, and returns it, its base URL and its gateway name.
func (f *processFleet) serve(db, clients string) (*process, string, string) {
	f.t.Helper()
	return f.serveWith(db, clients, nil)
}

// serveFromEnv is serve with the broker URL in CAPTCHAQ_AMQP_URL instead
// of on the command line.
func (f *processFleet) serveFromEnv(db, clients string) (*process, string, string) {
	f.t.Helper()
	return f.serveArgs(db, clients, []string{"CAPTCHAQ_AMQP_URL=" + f.brokerURL})
}

// serveWith is serve with more environment and flags.
func (f *processFleet) serveWith(db, clients string, env []string, more ...string) (*process, string, string) {
	f.t.Helper()
	return f.serveArgs(db, clients, env, append([]string{"--amqp", f.brokerURL}, more...)...)
}

// serveArgs starts serve on the fleet's prefix with env and flags.
func (f *processFleet) serveArgs(db, clients string, env []string, more ...string) (*process, string, string) {
	f.t.Helper()
	p, m := startProcess(f.t, f.bin, env, gatewayServingRE,
		append([]string{"serve", "--prefix", f.prefix, "--store", db, "--clients", clients, "--listen", "127.0.0.1:0"}, more...)...)
	f.mu.Lock()
	if !slices.Contains(f.gateways, m[2]) {
		f.gateways = append(f.gateways, m[2])
	}
	f.mu.Unlock()
	return p, "http://" + m[1], m[2]
}

// TestServeAsGatewayProcess runs `captchaq serve --amqp` and `captchaq
// worker` as real processes on the real broker: the gateway has no
// provider key, answers in.php/res.php from the worker's results, and,
// stopped with SIGTERM while tasks are being solved and started again on
// the same store (its default name comes from the store's path), answers
// every task, each solved once.
func TestServeAsGatewayProcess(t *testing.T) {
	t.Parallel()
	const owner, workerKey, clientKey = "cli-gw-worker", "gateway-test-provider-key", "cli-client-key-1"
	// Turnstile in about 0.8 s: tasks are still at the worker when the
	// gateway stops.
	f := newProcessFleet(t, "test-cli-gw-", sim.Config{Threads: 10, LatencyScale: 0.1, Seed: 31, PollBan: sim.PollBan{Disabled: true}})
	clients := writeFile(t, "clients.json", `[{"name":"qa","key":"`+clientKey+`","admin":true}]`)
	db := filepath.Join(t.TempDir(), "gateway.db")

	worker, _ := f.worker(owner, workerKey, regexp.MustCompile(`msg="worker started"`), "--poll-interval", "20ms")
	gw1, base, name := f.serve(db, clients)
	if want, _ := amqp.GatewayNameFor(db); name != want {
		t.Errorf("gateway name %q, want %q from the store's path", name, want)
	}
	get := func(base string, v url.Values) string {
		t.Helper()
		resp, err := http.Get(base + "/res.php?" + v.Encode())
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body)
	}
	var ids []string
	for i := range 3 {
		resp, err := http.PostForm(base+"/in.php", url.Values{"key": {clientKey}, "method": {"turnstile"},
			"sitekey": {"0x4AAAAAAA"}, "pageurl": {fmt.Sprintf("https://shop.example/cli/%d", i)}})
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		id, ok := strings.CutPrefix(string(body), "OK|")
		if !ok {
			t.Fatalf("in.php: %q\n%s", body, gw1.output())
		}
		ids = append(ids, id)
	}
	// getbalance through the gateway: TestNPMClientAgainstGateway.
	gw1.stop(t)

	// Started again with the broker URL in the environment: the same
	// gateway, and its password is not on its command line (ps).
	gw2, base2, name2 := f.serveFromEnv(db, clients)
	if name2 != name {
		t.Fatalf("the restarted gateway is %q, want %q", name2, name)
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", gw2.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if u, _ := url.Parse(f.brokerURL); strings.Contains(string(cmdline), f.brokerURL) || strings.Contains(string(cmdline), "@"+u.Host) {
		t.Errorf("the gateway's command line holds the broker URL: %q", cmdline)
	}
	for _, id := range ids {
		var ans string
		testbound.Until(t, "res.php "+id+" after the restart", func() bool {
			ans = get(base2, url.Values{"key": {clientKey}, "action": {"get"}, "id": {id}})
			return ans != "CAPCHA_NOT_READY"
		})
		if token, ok := strings.CutPrefix(ans, "OK|"); !ok || len(token) < 100 {
			t.Errorf("res.php %s after the restart: %q, want OK|<token>", id, ans)
		}
	}
	var st struct {
		Broker map[string]int `json:"broker"`
	}
	req, _ := http.NewRequest("GET", base2+"/v1/stats", nil)
	req.Header.Set("Authorization", "Bearer "+clientKey) // an admin: broker depths are whole-fleet numbers
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if _, ok := st.Broker[f.prefix+".replies."+name]; !ok {
		t.Errorf("stats broker %v: no reply queue %s.replies.%s", st.Broker, f.prefix, name)
	}
	gw2.stop(t)
	worker.stop(t)
	if s := f.sim.Stats(); s.Accepted != 3 || s.Duplicates != 0 {
		t.Errorf("simulator accepted %d (duplicates %d), want 3 and 0", s.Accepted, s.Duplicates)
	}
	for _, p := range []*process{gw1, gw2, worker} {
		if strings.Contains(p.output(), workerKey) {
			t.Errorf("the provider key is in the logs:\n%s", p.output())
		}
	}
}
