package main

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/sim"
)

func TestProgressLine(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name        string
		done, total int
		m           captchaq.Metrics
		elapsed     time.Duration
		want        string
	}{
		// Results from the store at the start are no rate.
		{"first frame after a rerun", 40, 50, captchaq.Metrics{Threads: 20}, 150 * time.Microsecond, "solving 40/50  threads 0/20  -  ETA -"},
		{"first task finished at once", 1, 50, captchaq.Metrics{Solved: 1, Threads: 20, ThreadsInUse: 20}, 200 * time.Millisecond, "solving 1/50  threads 20/20  -  ETA -"},
		{"a slow task still running", 0, 1, captchaq.Metrics{Threads: 5, ThreadsInUse: 1}, 3 * time.Second, "solving 0/1  threads 1/5  -  ETA -"},
		{"steady", 10, 30, captchaq.Metrics{Solved: 9, Failed: 1, Threads: 5, ThreadsInUse: 5}, 5 * time.Second, "solving 10/30  threads 5/5  2.0 tasks/s  ETA 10s"},
		{"last task running", 99, 100, captchaq.Metrics{Solved: 99, Threads: 5, ThreadsInUse: 1}, 10 * time.Second, "solving 99/100  threads 1/5  9.9 tasks/s  ETA 1s"},
		{"stdin", 7, -1, captchaq.Metrics{Solved: 7, Threads: 5}, 7 * time.Second, "solving 7  threads 0/5  1.0 tasks/s  ETA -"},
	} {
		if got := progressLine(c.done, c.total, c.m, c.elapsed); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// TestBatchUnreachableProviderSaysSo: off a terminal, a batch whose
// provider does not answer prints retry notices instead of silence.
func TestBatchUnreachableProviderSaysSo(t *testing.T) {
	t.Parallel()
	in := writeFile(t, "tasks.jsonl", jsonl(t, turnstileTasks("down", 3)))
	sb := &strings.Builder{}
	errw := &lockedWriter{w: sb}
	text := func() string {
		errw.mu.Lock()
		defer errw.mu.Unlock()
		return sb.String()
	}
	env := &environment{stdin: strings.NewReader(""), stdout: &strings.Builder{}, stderr: errw, getenv: func(k string) string { return keyEnv[k] }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	code := make(chan int, 1)
	start := time.Now()
	go func() {
		code <- run(ctx, env, []string{"batch", in, "--store", "memory", "--api-url", "http://127.0.0.1:1"})
	}()
	waitFor(t, "a retry notice", func() bool { return strings.Contains(text(), "attempts retried in the last") })
	if waited := time.Since(start); waited > 2*retryNotice+5*time.Second {
		t.Errorf("first notice after %v", waited)
	}
	if !strings.Contains(text(), "captchaq batch: 0 of 3 done; ") || !strings.Contains(text(), "(NETWORK ") {
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
	if r.code != 0 || !strings.Contains(r.stderr, "else 5; 20 with the built-in simulator") {
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
	waitFor(t, "serve to start", func() bool { return strings.Contains(r.errText(), "serving") })
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

func TestRetryLine(t *testing.T) {
	t.Parallel()
	m := captchaq.Metrics{RetriesByReason: map[string]int64{"ERROR_NO_SLOT_AVAILABLE": 9, "NETWORK": 5}}
	if line, ok := retryLine(2, 10, m, map[string]int64{"NETWORK": 5}, 3*time.Second); ok {
		t.Errorf("only no-slot retries: %q, want no notice", line)
	}
	m.RetriesByReason["NETWORK"] = 8
	m.RetriesByReason["ERROR_BAD_DUPLICATES"] = 1
	line, ok := retryLine(2, 10, m, map[string]int64{"NETWORK": 5}, 3*time.Second)
	if want := "captchaq batch: 2 of 10 done; 4 attempts retried in the last 3s (ERROR_BAD_DUPLICATES 1, NETWORK 3); still trying"; !ok || line != want {
		t.Errorf("notice %q, want %q", line, want)
	}
}
