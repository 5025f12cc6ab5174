package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/sim"
)

var workerStartedRE = regexp.MustCompile(`msg="worker started"`)

// frontClient is the client of the fronts' tests: an admin, so its event
// stream and stats cover every client.
const frontClient = "front-client-key-1"

// frontTask is task i of the fronts' tests: a Turnstile of the
// simulator's demo site on a page host of its own, so siteverify tells
// whose token a token is.
func frontTask(i int) url.Values {
	return url.Values{"key": {frontClient}, "method": {"turnstile"}, "sitekey": {sim.DemoTurnstile.SiteKey},
		"pageurl": {fmt.Sprintf("https://t%d.shop.example/login", i)}}
}

// inPHP submits v to base's in.php and returns the id; an answer other
// than OK|ID is returned as err.
func inPHP(base string, v url.Values) (string, error) {
	resp, err := http.PostForm(base+"/in.php", v)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	id, ok := strings.CutPrefix(string(body), "OK|")
	if !ok {
		return "", fmt.Errorf("in.php: %q", body)
	}
	return id, nil
}

// resPHP asks base's res.php for id once.
func resPHP(base, id string) (string, error) {
	resp, err := http.Get(base + "/res.php?" + url.Values{"key": {frontClient}, "action": {"get"}, "id": {id}}.Encode())
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body), nil
}

// resPHPAnswer polls res.php at base for id until it answers other than
// CAPCHA_NOT_READY or the call fails, and returns that answer.
func resPHPAnswer(t *testing.T, base, id string) (string, error) {
	t.Helper()
	var ans string
	var err error
	testbound.Until(t, "res.php "+id+" at "+base+" to answer", func() bool {
		ans, err = resPHP(base, id)
		return err != nil || ans != "CAPCHA_NOT_READY"
	})
	return ans, err
}

// siteverifyHost checks token at the simulator's Turnstile siteverify and
// returns the page host it was issued for ("" when it is refused).
func siteverifyHost(t *testing.T, simURL, token string) string {
	t.Helper()
	host, err := sim.VerifiedHost(context.Background(), http.DefaultClient, simURL, token)
	if err != nil {
		t.Fatal(err)
	}
	return host
}

// pingbackCounter is an HTTP receiver of pingbacks that counts them by id.
type pingbackCounter struct {
	url string
	mu  sync.Mutex
	n   map[string]int
}

func newPingbackCounter(t *testing.T) *pingbackCounter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pingbackCounter{url: "http://" + ln.Addr().String() + "/cb", n: map[string]int{}}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		p.mu.Lock()
		p.n[r.Form.Get("id")]++
		p.mu.Unlock()
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return p
}

func (p *pingbackCounter) counts() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := map[string]int{}
	for k, v := range p.n {
		m[k] = v
	}
	return m
}

// TestReplicasAreOneFront runs two `captchaq serve --amqp` replicas on one
// PostgreSQL database and one worker, as real processes: they take one
// name; ids handed out by either never collide; a task taken by one is
// answered by the other; an event stream on one hears every result,
// whichever replica stored it; each task has its own token (siteverify
// names its page) and one pingback.
func TestReplicasAreOneFront(t *testing.T) {
	t.Parallel()
	db := pgStoreURL(t)
	f := newProcessFleet(t, "test-cli-front-", sim.Config{Threads: 10, LatencyScale: 0.1, Seed: 29, PollBan: sim.PollBan{Disabled: true}})
	clients := writeFile(t, "clients.json", `[{"name":"qa","key":"`+frontClient+`","admin":true}]`)
	worker, _ := f.worker("cli-front-worker", "front-provider-key", workerStartedRE, "--poll-interval", "20ms")
	pingbacks := newPingbackCounter(t)
	serve := func() (*process, string, string) {
		p, m := startProcess(f.t, f.bin, nil, gatewayServingRE, "serve", "--amqp", f.brokerURL, "--prefix", f.prefix,
			"--store", db, "--clients", clients, "--listen", "127.0.0.1:0", "--pingback-allow", "127.0.0.0/8")
		f.mu.Lock()
		f.gateways = append(f.gateways, m[2])
		f.mu.Unlock()
		return p, "http://" + m[1], m[2]
	}
	a, baseA, nameA := serve()
	b, baseB, nameB := serve()
	if nameA != nameB {
		t.Fatalf("replicas on one database are gateways %q and %q, want one name", nameA, nameB)
	}
	bases := []string{baseA, baseB}

	// B's event stream, open before the first task.
	req, _ := http.NewRequest("GET", baseB+"/v1/events", nil)
	req.Header.Set("Authorization", "Bearer "+frontClient)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	streamed := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var r struct {
				ID string `json:"id"`
			}
			if json.Unmarshal([]byte(data), &r) == nil {
				streamed <- r.ID
			}
		}
	}()

	const n = 12
	ids := make([]string, n)
	for i := range n {
		v := frontTask(i)
		v.Set("pingback", pingbacks.url)
		id, err := inPHP(bases[i%2], v)
		if err != nil {
			t.Fatalf("task %d: %v", i, err)
		}
		ids[i] = id
	}
	seen := map[string]int{}
	for i, id := range ids {
		if j, dup := seen[id]; dup {
			t.Fatalf("tasks %d and %d got one id %s", j, i, id)
		}
		seen[id] = i
	}
	// Each answered by the replica that did not take it.
	for i, id := range ids {
		other := bases[(i+1)%2]
		ans, err := resPHPAnswer(t, other, id)
		token, ok := strings.CutPrefix(ans, "OK|")
		if err != nil || !ok {
			t.Fatalf("res.php %s (task %d) at the other replica: %q, %v", id, i, ans, err)
		}
		if host, want := siteverifyHost(t, f.apiURL, token), fmt.Sprintf("t%d.shop.example", i); host != want {
			t.Errorf("task %d's token was issued for %q, want %q (its own)", i, host, want)
		}
	}
	heard := map[string]bool{}
	for len(heard) < n {
		id := testbound.Receive(t, fmt.Sprintf("results on B's event stream (%d of %d heard)", len(heard), n), streamed)
		heard[id] = true
	}
	for _, id := range ids {
		if !heard[id] {
			t.Errorf("B's event stream did not carry %s", id)
		}
	}
	// One pingback a task, from whichever replica stored its answer.
	testbound.Eventually(func() bool { return len(pingbacks.counts()) >= n })
	c := pingbacks.counts()
	for _, id := range ids {
		if c[id] != 1 {
			t.Errorf("task %s: %d pingbacks, want 1", id, c[id])
		}
	}
	resp.Body.Close() // an open event stream holds a server's shutdown
	a.stop(t)
	b.stop(t)
	worker.stop(t)
	if s := f.sim.Stats(); s.Accepted != n || s.Duplicates != 0 {
		t.Errorf("simulator accepted %d (duplicates %d), want %d and 0", s.Accepted, s.Duplicates, n)
	}
	for _, p := range []*process{a, b} {
		noPassword(t, "a replica's log", p.output())
	}
}

// waitOutput waits until p has logged a line matching re, and returns
// the match.
func waitOutput(t *testing.T, p *process, re *regexp.Regexp) []string {
	t.Helper()
	var m []string
	if !testbound.Eventually(func() bool { m = re.FindStringSubmatch(p.output()); return m != nil }) {
		t.Fatalf("no log line matches %s after %v:\n%s", re, testbound.Bound, p.output())
	}
	return m
}

// Local mode (serve without --amqp) on a shared database: one active queue.
// A second serve is refused with the fix; a standby waits, and takes over
// when the active one is SIGKILLed, answering the task it had taken.
func TestLocalServeOneActivePerDatabase(t *testing.T) {
	t.Parallel()
	_, simURL := startFastSim(t, sim.Config{Threads: 5, LatencyScale: 0.5})
	db := pgStoreURL(t)
	clients := writeFile(t, "clients.json", `[{"name":"qa","key":"`+frontClient+`","admin":true}]`)
	bin := captchaqBinary(t)
	env := []string{"CAPTCHAAI_KEY=local-provider-key"}
	args := func(more ...string) []string {
		return append([]string{"serve", "--store", db, "--clients", clients, "--listen", "127.0.0.1:0", "--api-url", simURL, "--poll-interval", "50ms"}, more...)
	}
	active, m := startProcess(t, bin, env, servingRE, args()...)
	base := "http://" + m[1]

	second := exec.Command(bin, args()...)
	second.Env = append(os.Environ(), env...)
	out, err := second.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 || !strings.Contains(string(out), "has an active queue already: pid ") || !strings.Contains(string(out), "--standby") {
		t.Fatalf("a second serve on the database: %v\n%s\nwant it refused, naming the active one and --standby", err, out)
	}
	noPassword(t, "the refusal", string(out))

	standby, _ := startProcess(t, bin, env, regexp.MustCompile(`msg="standby: waiting`), args("--standby")...)
	id, err := inPHP(base, frontTask(0))
	if err != nil {
		t.Fatal(err)
	}
	if err := active.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	m = waitOutput(t, standby, servingRE)
	base = "http://" + m[1]
	ans, err := resPHPAnswer(t, base, id)
	if token, ok := strings.CutPrefix(ans, "OK|"); err != nil || !ok {
		t.Fatalf("res.php %s at the standby that took over: %q, %v", id, ans, err)
	} else if host := siteverifyHost(t, simURL, token); host != "t0.shop.example" {
		t.Errorf("the token was issued for %q, want t0.shop.example", host)
	}
	standby.stop(t)
	noPassword(t, "the standby's log", standby.output())
}
