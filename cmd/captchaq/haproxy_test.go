package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/brokertest"
	"github.com/captchaq/captchaq/internal/pgtest"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/sim"
)

// haproxyConfig is the config deploy/ ships.
var haproxyConfig = filepath.Join("..", "..", "deploy", "haproxy", "haproxy.cfg")

// startHAProxy runs HAProxy on the shipped config in front of replicas
// (their host:port), with the config's server lines past len(replicas)
// dropped, and returns its base URL once it answers /healthz. A missing
// haproxy fails the test when CI=true and skips it elsewhere.
func startHAProxy(t *testing.T, replicas ...string) string {
	t.Helper()
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("haproxy is not installed and CI=true (.ci/run installs it)")
		}
		t.Skip("skipping: haproxy is not installed (apt-get install haproxy)")
	}
	b, err := os.ReadFile(haproxyConfig)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "server" && f[1] > "r"+strconv.Itoa(len(replicas)) {
			continue
		}
		lines = append(lines, l)
	}
	cfg := writeFile(t, "haproxy.cfg", strings.Join(lines, "\n"))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "-db", "-f", cfg)
	cmd.Env = append(os.Environ(), "CAPTCHAQ_LISTEN="+addr)
	for i, r := range replicas {
		cmd.Env = append(cmd.Env, fmt.Sprintf("CAPTCHAQ_R%d=%s", i+1, r))
	}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	base := "http://" + addr
	if !testbound.Eventually(func() bool {
		var resp *http.Response
		resp, err = http.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true
			}
		}
		select {
		case <-done:
			t.Fatalf("haproxy exited: %s", out.String())
		default:
		}
		return false
	}) {
		t.Fatalf("haproxy at %s does not answer /healthz: %v", base, err)
	}
	return base
}

// frontRun is what a run of clients through a front saw.
type frontRun struct {
	tokens    map[int]string // by task
	ids       map[int]string // by task: the id its accepted in.php answered
	resent    map[int]int    // by task: its in.php sent again after a temporary answer
	temporary atomic.Int64   // answers a client tries again on
	failures  []string       // anything else
	mu        sync.Mutex
}

// temporary reports whether an answer is one a client tries again on: no
// answer (a replica died under the request), a balancer's 502/503/504, or
// a full queue.
func temporary(status int, body string, err error) bool {
	return err != nil || status == http.StatusBadGateway || status == http.StatusServiceUnavailable ||
		status == http.StatusGatewayTimeout || body == "ERROR_NO_SLOT_AVAILABLE" || strings.HasPrefix(body, "ERROR_NO_SLOT_AVAILABLE")
}

func call(req func() (*http.Response, error)) (int, string, error) {
	resp, err := req()
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// runFrontClients solves n tasks through base with clients goroutines,
// each submitting a task (with pingback as its pingback URL unless it is
// ""), polling it to its answer, and going on; after the disruptAfter-th
// task is accepted, disrupt runs (on its own goroutine; the run waits for
// it). Tasks past disruptAfter+clients are submitted only once disrupt
// has called down (the part is down), so however slow the disruption,
// part of the run meets it.
func runFrontClients(t *testing.T, base, pingback string, n, clients, disruptAfter int, disrupt func(down func())) *frontRun {
	t.Helper()
	task := func(i int) url.Values {
		v := frontTask(i)
		if pingback != "" {
			v.Set("pingback", pingback)
		}
		return v
	}
	return runFrontTasks(t, base, task, n, clients, disruptAfter, disrupt)
}

// runFrontTasks is runFrontClients with task i's in.php form from task,
// which may also wait, to pace the run.
func runFrontTasks(t *testing.T, base string, task func(i int) url.Values, n, clients, disruptAfter int, disrupt func(down func())) *frontRun {
	t.Helper()
	run := &frontRun{tokens: map[int]string{}, ids: map[int]string{}, resent: map[int]int{}}
	fail := func(format string, args ...any) {
		run.mu.Lock()
		run.failures = append(run.failures, fmt.Sprintf(format, args...))
		run.mu.Unlock()
	}
	var accepted atomic.Int64
	var disrupted sync.WaitGroup
	isDown := make(chan struct{})
	down := sync.OnceFunc(func() { close(isDown) })
	next := atomic.Int64{}
	ctx := testbound.Context(t)
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			// The client's pace between an in.php sent again and between
			// res.php polls.
			pace := time.NewTicker(50 * time.Millisecond)
			defer pace.Stop()
			beat := func() {
				select {
				case <-pace.C:
				case <-ctx.Done():
				}
			}
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				if i >= disruptAfter+clients {
					select {
					case <-isDown:
					case <-ctx.Done():
						return
					}
				}
				var id string
				v := task(i)
				for ctx.Err() == nil {
					status, body, err := call(func() (*http.Response, error) { return http.PostForm(base+"/in.php", v) })
					if got, ok := strings.CutPrefix(body, "OK|"); ok && status == http.StatusOK {
						id = got
						run.mu.Lock()
						run.ids[i] = id
						run.mu.Unlock()
						break
					}
					if !temporary(status, body, err) {
						fail("task %d: in.php answered %d %q", i, status, body)
						return
					}
					run.temporary.Add(1)
					run.mu.Lock()
					run.resent[i]++
					run.mu.Unlock()
					beat()
				}
				if int(accepted.Add(1)) == disruptAfter {
					disrupted.Go(func() { defer down(); disrupt(down) })
				}
				for ctx.Err() == nil {
					status, body, err := call(func() (*http.Response, error) {
						return http.Get(base + "/res.php?" + url.Values{"key": {frontClient}, "action": {"get"}, "id": {id}}.Encode())
					})
					if token, ok := strings.CutPrefix(body, "OK|"); ok && status == http.StatusOK {
						run.mu.Lock()
						run.tokens[i] = token
						run.mu.Unlock()
						break
					}
					switch {
					case body == "CAPCHA_NOT_READY" && status == http.StatusOK:
					case temporary(status, body, err):
						run.temporary.Add(1)
					default:
						fail("task %d (%s): res.php answered %d %q", i, id, status, body)
						return
					}
					beat()
				}
			}
		})
	}
	testbound.WaitGroup(t, "the clients", &wg)
	testbound.WaitGroup(t, "the disruption", &disrupted)
	return run
}

// check asserts every task answered with its own token (siteverify names
// its page), and returns how many second solves the provider made
// (paid twice) and how many of them no resent in.php explains
// (unexplained): a task's in.php sent again after a temporary answer
// (no answer: a replica died under it) may have been published already,
// and the task is then solved once more for each such resend.
func (run *frontRun) check(t *testing.T, f *processFleet, n int) (paidTwice, unexplained int) {
	t.Helper()
	for _, msg := range run.failures {
		t.Error(msg)
	}
	if len(run.tokens) != n {
		t.Errorf("%d of %d tasks answered", len(run.tokens), n)
	}
	for i := range n {
		token, ok := run.tokens[i]
		if !ok {
			continue
		}
		if host, want := siteverifyHost(t, f.apiURL, token), fmt.Sprintf("t%d.shop.example", i); host != want {
			t.Errorf("task %d's token was issued for %q, want %q (its own)", i, host, want)
		}
		v := frontTask(i)
		task := captchaq.Task{Method: "turnstile", Params: map[string]string{"sitekey": v.Get("sitekey"), "pageurl": v.Get("pageurl")}}
		if s := f.sim.SubmissionsOf(fingerprintOf(task)); s > 1 {
			paidTwice += s - 1
			unexplained += max(s-1-run.resent[i], 0)
		}
	}
	return paidTwice, unexplained
}

// checkPingbacks waits until every answered task's id has had its
// pingback, and asserts that none had two: an id another task of the run
// had (an in.php the client saw fail but a replica had taken) may have
// one or none.
func (run *frontRun) checkPingbacks(t *testing.T, p *pingbackCounter) {
	t.Helper()
	missing := 0
	if !testbound.Eventually(func() bool {
		c := p.counts()
		missing = 0
		for i := range run.tokens {
			if c[run.ids[i]] == 0 {
				missing++
			}
		}
		return missing == 0
	}) {
		t.Errorf("%d answered tasks had no pingback after %v", missing, testbound.Bound)
	}
	for id, k := range p.counts() {
		if k != 1 {
			t.Errorf("id %s: %d pingbacks, want 1", id, k)
		}
	}
}

// frontFleet starts a fleet, a database and one worker, and returns a
// function that starts a replica on them (with args added to serve's).
func frontFleet(t *testing.T, prefix, db string) (*processFleet, func(args ...string) (*process, string)) {
	t.Helper()
	return frontFleetOn(t, brokertest.Use(t), prefix, db)
}

// frontFleetOn is frontFleet on the broker at brokerURL, for a test that
// took the broker test lock its own way (brokertest.Disrupt).
func frontFleetOn(t *testing.T, brokerURL, prefix, db string) (*processFleet, func(args ...string) (*process, string)) {
	t.Helper()
	f := newProcessFleetOn(t, brokerURL, prefix, sim.Config{Threads: 10, LatencyScale: 0.1, Seed: 7, PollBan: sim.PollBan{Disabled: true}})
	clients := writeFile(t, "clients.json", `[{"name":"qa","key":"`+frontClient+`","admin":true}]`)
	f.worker("cli-front-worker", "front-provider-key", workerStartedRE, "--poll-interval", "20ms")
	return f, func(args ...string) (*process, string) {
		p, m := startProcess(f.t, f.bin, nil, gatewayServingRE, append([]string{"serve", "--amqp", f.brokerURL, "--prefix", f.prefix,
			"--store", db, "--clients", clients, "--listen", "127.0.0.1:0", "--pingback-allow", "127.0.0.0/8"}, args...)...)
		f.mu.Lock()
		f.gateways = append(f.gateways, m[2])
		f.mu.Unlock()
		return p, m[1]
	}
}

// TestFrontBehindHAProxyReplicaKilled: two replicas behind HAProxy (the
// shipped config) and one worker; 60 tasks through the balancer, one
// replica SIGKILLed once 20 are accepted: every task answered with its
// own token, clients see only answers they try again on meanwhile, and at
// most one second solve for each in.php a client had to send again (one
// the dead replica had published but not answered: with six clients,
// more than one may be on its way when the replica dies).
func TestFrontBehindHAProxyReplicaKilled(t *testing.T) {
	t.Parallel()
	f, replica := frontFleet(t, "test-cli-hap-", pgStoreURL(t))
	a, addrA := replica()
	_, addrB := replica()
	base := startHAProxy(t, addrA, addrB)
	const n = 60
	run := runFrontClients(t, base, "", n, 6, 20, func(down func()) {
		if err := a.cmd.Process.Kill(); err != nil {
			t.Error(err)
		}
	})
	paidTwice, unexplained := run.check(t, f, n)
	if unexplained > 0 {
		t.Errorf("%d of %d second solves without a resent in.php of their task, want none", unexplained, paidTwice)
	}
	t.Logf("60 tasks, replica killed after 20: %d answered, %d temporary answers, %d solved twice", len(run.tokens), run.temporary.Load(), paidTwice)
}

// TestFrontPostgresRestarted: the same front, PostgreSQL restarted once 20
// of 40 tasks are accepted: nothing is lost, each token is its task's, no
// id has two pingbacks.
func TestFrontPostgresRestarted(t *testing.T) {
	admin := pgtest.Disrupt(t)
	db := pgtest.CreateDatabase(t, admin)
	f, replica := frontFleet(t, "test-cli-pgr-", db)
	_, addrA := replica()
	_, addrB := replica()
	base := startHAProxy(t, addrA, addrB)
	pingbacks := newPingbackCounter(t)
	const n = 40
	run := runFrontClients(t, base, pingbacks.url, n, 4, 20, func(down func()) {
		// The restart stops the server at once, then waits for it to
		// come back: the part counts as down 100 ms into the restart.
		go func() { time.Sleep(100 * time.Millisecond); down() }()
		if err := pgtest.Restart(); err != nil {
			t.Error(err)
		}
	})
	paidTwice, _ := run.check(t, f, n)
	run.checkPingbacks(t, pingbacks)
	t.Logf("40 tasks, PostgreSQL restarted after 20: %d answered, %d temporary answers, %d solved twice", len(run.tokens), run.temporary.Load(), paidTwice)
}

// TestFrontBrokerRestarted: the same front, RabbitMQ stopped once 20 of 40
// tasks are accepted and started again a second later (under the broker
// test lock, held exclusively): the replicas and the worker reconnect;
// nothing is lost, each token is its task's, a task is solved again only
// for an in.php whose publish the stop cut off after the broker took it,
// which its client sent again, no id has two pingbacks.
func TestFrontBrokerRestarted(t *testing.T) {
	if _, err := exec.LookPath("rabbitmqctl"); err != nil {
		t.Fatal("rabbitmqctl is needed to restart the broker")
	}
	// The database first: every test takes the PostgreSQL lock before
	// the broker's (see pgStoreURL).
	db := pgStoreURL(t)
	brokerURL := brokertest.Disrupt(t)
	f, replica := frontFleetOn(t, brokerURL, "test-cli-brr-", db)
	_, addrA := replica()
	_, addrB := replica()
	base := startHAProxy(t, addrA, addrB)
	pingbacks := newPingbackCounter(t)
	restarted := atomic.Bool{}
	t.Cleanup(func() {
		if !restarted.Load() {
			_ = exec.Command("rabbitmqctl", "start_app").Run()
		}
	})
	const n = 40
	run := runFrontClients(t, base, pingbacks.url, n, 4, 20, func(down func()) {
		if out, err := exec.Command("rabbitmqctl", "stop_app").CombinedOutput(); err != nil {
			t.Errorf("rabbitmqctl stop_app: %v\n%s", err, out)
		}
		down()
		time.Sleep(time.Second) // the broker stays down a while: submits meet it
		if out, err := exec.Command("rabbitmqctl", "start_app").CombinedOutput(); err != nil {
			t.Errorf("rabbitmqctl start_app: %v\n%s", err, out)
			return
		}
		restarted.Store(true)
	})
	paidTwice, unexplained := run.check(t, f, n)
	if unexplained > 0 {
		t.Errorf("%d of %d second solves without a resent in.php of their task, want none", unexplained, paidTwice)
	}
	run.checkPingbacks(t, pingbacks)
	t.Logf("40 tasks, RabbitMQ restarted after 20: %d answered, %d temporary answers, %d solved twice", len(run.tokens), run.temporary.Load(), paidTwice)
}

// TestNPMClientThroughBalancer drives the official npm client through
// HAProxy in front of two replicas: every call lands on either replica,
// for tasks either took. getbalance answers once both replicas have heard
// the worker's balance.
func TestNPMClientThroughBalancer(t *testing.T) {
	t.Parallel()
	node := npmClient(t)
	db := pgStoreURL(t)
	f := newProcessFleet(t, "test-npm-hap-", sim.Config{Key: "npm-provider-key", LatencyScale: 0.01, Balance: 3.5, PollBan: sim.PollBan{Disabled: true}})
	clients := writeFile(t, "clients.json", `[{"name":"npm","key":"npm-client-key"}]`)
	f.worker("npm-hap-worker", "npm-provider-key", workerStartedRE, "--poll-interval", "50ms")
	var addrs []string
	for range 2 {
		_, m := startProcess(f.t, f.bin, nil, gatewayServingRE, "serve", "--amqp", f.brokerURL, "--prefix", f.prefix,
			"--store", db, "--clients", clients, "--listen", "127.0.0.1:0")
		f.mu.Lock()
		f.gateways = append(f.gateways, m[2])
		f.mu.Unlock()
		addrs = append(addrs, m[1])
	}
	// Each replica hears the balance with the worker's next status beat.
	for _, addr := range addrs {
		var body string
		var err error
		if !testbound.Eventually(func() bool {
			_, body, err = call(func() (*http.Response, error) {
				return http.Get("http://" + addr + "/res.php?key=npm-client-key&action=getbalance")
			})
			return err == nil && body == "3.5"
		}) {
			t.Fatalf("getbalance at %s: %q, %v; want 3.5", addr, body, err)
		}
	}
	const official = "@2captcha/captcha-solver"
	checkNPMClients(t, runNPMClients(t, node, startHAProxy(t, addrs...), "npm-client-key", "", official), 3.5, official)
}
