package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/sim"
)

func TestProgressLine(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name        string
		done, total int
		m           captchaq.Metrics
		elapsed     time.Duration
		eta         string
		term, log   string
	}{
		// Results from the store at the start are no rate.
		{"first frame after a rerun", 40, 50, captchaq.Metrics{Threads: 20}, 150 * time.Microsecond, "8s",
			"solving 40/50  threads 0/20  -  ETA 8s", "captchaq batch: 40 of 50 done, threads 0/20, -, ETA 8s"},
		{"first task finished at once", 1, 50, captchaq.Metrics{Solved: 1, Threads: 20, ThreadsInUse: 20}, 200 * time.Millisecond, "25s",
			"solving 1/50  threads 20/20  -  ETA 25s", "captchaq batch: 1 of 50 done, threads 20/20, -, ETA 25s"},
		{"steady", 10, 30, captchaq.Metrics{Solved: 9, Failed: 1, Threads: 5, ThreadsInUse: 5}, 5 * time.Second, "16s",
			"solving 10/30  threads 5/5  2.0 tasks/s  ETA 16s", "captchaq batch: 10 of 30 done, threads 5/5, 2.0 tasks/s, ETA 16s"},
		{"paused", 3, 30, captchaq.Metrics{Solved: 3, Threads: 5, Paused: true, PausedReason: "ERROR_ZERO_BALANCE"}, 3 * time.Second, "-",
			"solving 3/30  threads 0/5  1.0 tasks/s  ETA -", "captchaq batch: 3 of 30 done, threads 0/5, 1.0 tasks/s, ETA -; paused: ERROR_ZERO_BALANCE"},
		{"stdin", 7, -1, captchaq.Metrics{Solved: 7, Threads: 5}, 7 * time.Second, "-",
			"solving 7  threads 0/5  1.0 tasks/s  ETA -", "captchaq batch: 7 done, threads 0/5, 1.0 tasks/s, ETA -"},
	} {
		if got := progressLine(c.done, c.total, c.m, c.elapsed, c.eta); got != c.term {
			t.Errorf("%s: %q, want %q", c.name, got, c.term)
		}
		if got := logLine(c.done, c.total, c.m, c.elapsed, c.eta); got != c.log {
			t.Errorf("%s: %q, want %q", c.name, got, c.log)
		}
	}
}

// Off a terminal, a batch prints a line every few seconds with its count
// and the ETA of the model: a Turnstile's 8 s less the time it has been in
// flight.
func TestBatchProgressOffATerminal(t *testing.T) {
	t.Parallel()
	seven := sim.Latency{Median: 7 * time.Second, Min: 7 * time.Second, Max: 7 * time.Second}
	_, base := startFastSim(t, sim.Config{Threads: 5, LatencyScale: 1, Latency: map[provider.Kind]sim.Latency{provider.KindTurnstile: seven}})
	in := writeFile(t, "tasks.jsonl", jsonl(t, turnstileTasks("slow", 3)))
	r := runWith(t, "", keyEnv, "batch", in, "--store", "memory", "--api-url", base)
	if r.code != 0 {
		t.Fatalf("batch = %+v", r)
	}
	line := regexp.MustCompile(`(?m)^captchaq batch: 0 of 3 done, threads 3/5, -, ETA ([1-7])s$`)
	if !line.MatchString(r.stderr) {
		t.Errorf("no progress line of the model's ETA in:\n%s", r.stderr)
	}
}

// TestBatchUnreachableProviderSaysSo: off a terminal, a batch whose
// provider does not answer (kept going with --patient) prints retry
// notices that name the provider's URL and the cause, with no ETA.
func TestBatchUnreachableProviderSaysSo(t *testing.T) {
	t.Parallel()
	in := writeFile(t, "tasks.jsonl", jsonl(t, turnstileTasks("down", 3)))
	errw := &testbound.Buffer{}
	text := errw.String
	env := &environment{stdin: strings.NewReader(""), stdout: &strings.Builder{}, stderr: errw, getenv: func(k string) string { return keyEnv[k] }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	code := make(chan int, 1)
	start := time.Now()
	go func() {
		code <- run(ctx, env, []string{"batch", in, "--store", "memory", "--api-url", "http://127.0.0.1:1", "--patient"})
	}()
	testbound.Until(t, "a retry notice", func() bool { return strings.Contains(text(), "attempts retried in the last") })
	if waited := time.Since(start); waited > 2*progressEvery+5*time.Second {
		t.Errorf("first notice after %v", waited)
	}
	if !strings.Contains(text(), "captchaq batch: 0 of 3 done, threads ") || !strings.Contains(text(), "(NETWORK ") ||
		!regexp.MustCompile(`, ETA -; \d+ attempts retried in the last \d+s \(NETWORK \d+\); still trying; the provider never answered: \d+ failures in a row over \d+s, the last: submit: NETWORK: cannot reach the provider: Post "http://127.0.0.1:1/in.php": dial tcp 127.0.0.1:1: connect: connection refused`).MatchString(text()) {
		t.Errorf("notice: %q", text())
	}
	cancel()
	if c := <-code; c != exitInterrupted {
		t.Errorf("exit %d after cancel, want %d", c, exitInterrupted)
	}
}

// TestHelpSaysWhatRuns: batch --help gives the thread defaults that run,
// and the run on the built-in simulator uses the 20 it names.
func TestHelpSaysWhatRuns(t *testing.T) {
	t.Parallel()
	r := runWith(t, "", nil, "batch", "--help")
	if r.code != 0 || !strings.Contains(r.stdout, "else 5; 20 with the built-in simulator") {
		t.Errorf("batch --help = %+v", r)
	}
	img := captchaq.Task{ID: "img", Method: "base64", Params: map[string]string{"body": "aW1hZ2U="}}
	in := writeFile(t, "tasks.jsonl", jsonl(t, []captchaq.Task{img}))
	r = runWith(t, "", nil, "batch", in, "--store", "memory")
	if r.code != 0 || !strings.Contains(r.stderr, "threads 20") {
		t.Errorf("batch on the built-in simulator = %+v; want threads 20 in the summary", r)
	}
}

// TestServeLogsItsStorePath: local serve names the file it keeps tasks in,
// and exits 0 after SIGTERM's graceful stop.
func TestServeLogsItsStorePath(t *testing.T) {
	t.Parallel()
	_, base := startFastSim(t, sim.Config{})
	clients := writeFile(t, "clients.json", `[{"name":"qa","key":"client-key-1"}]`)
	db := filepath.Join(t.TempDir(), "serve.db")
	r := startBinary(t, keyEnv, "", "serve", "--clients", clients, "--listen", "127.0.0.1:0", "--store", db, "--api-url", base)
	testbound.Until(t, "serve to start", func() bool { return strings.Contains(r.errText(), "serving") })
	if !strings.Contains(r.errText(), "store="+db) {
		t.Errorf("serve log does not name its store %s:\n%s", db, r.errText())
	}
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := r.wait(t); code != 0 {
		t.Errorf("serve exit %d after SIGTERM, want 0:\n%s", code, r.errText())
	}
}

func TestRetryNote(t *testing.T) {
	t.Parallel()
	m := captchaq.Metrics{RetriesByReason: map[string]int64{"ERROR_NO_SLOT_AVAILABLE": 9, "NETWORK": 5}}
	if note, ok := retryNote(m, map[string]int64{"NETWORK": 5}, 5*time.Second); ok {
		t.Errorf("only no-slot retries: %q, want no note", note)
	}
	m.RetriesByReason["NETWORK"] = 8
	m.RetriesByReason["ERROR_BAD_DUPLICATES"] = 1
	note, ok := retryNote(m, map[string]int64{"NETWORK": 5}, 5*time.Second)
	if want := "4 attempts retried in the last 5s (ERROR_BAD_DUPLICATES 1, NETWORK 3); still trying"; !ok || note != want {
		t.Errorf("note %q, want %q", note, want)
	}
}

// TestServeOfflineUsesTheBuiltInSimulator: serve with no key, no
// --api-url and no CAPTCHAAI_URL solves against the built-in simulator,
// as batch does, says so, and keeps its tasks in a store file of its own;
// an unchanged in.php client gets a token from it.
func TestServeOfflineUsesTheBuiltInSimulator(t *testing.T) {
	t.Parallel()
	clients := writeFile(t, "clients.json", `[{"name":"qa","key":"client-key-1"}]`)
	r := startBinary(t, nil, "", "serve", "--clients", clients, "--listen", "127.0.0.1:0")
	addr := regexp.MustCompile(`msg=serving addr=(\S+)`)
	testbound.Until(t, "serve to start", func() bool { return addr.MatchString(r.errText()) })
	log := r.errText()
	for _, want := range []string{
		`msg="no CAPTCHAAI_KEY set: solving against the built-in simulator (set CAPTCHAAI_KEY to use CaptchaAI, or --api-url for another provider)"`,
		`provider="built-in simulator"`,
		"captchaq-serve-sim.db",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("serve's log lacks %s:\n%s", want, log)
		}
	}
	base := "http://" + addr.FindStringSubmatch(log)[1]
	get := func(path string) string {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	sub := get("/in.php?key=client-key-1&method=turnstile&sitekey=0x4AAAAAAAA&pageurl=https://shop.example/")
	id, ok := strings.CutPrefix(sub, "OK|")
	if !ok {
		t.Fatalf("in.php answered %q, want OK|id", sub)
	}
	var res string
	testbound.Until(t, "the simulator's token", func() bool {
		res = get("/res.php?key=client-key-1&action=get&id=" + id)
		return res != "CAPCHA_NOT_READY"
	})
	if !strings.HasPrefix(res, "OK|") || len(res) < 20 {
		t.Errorf("res.php answered %q, want OK|token", res)
	}
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := r.wait(t); code != 0 {
		t.Errorf("serve exit %d after SIGTERM, want 0:\n%s", code, r.errText())
	}
}
