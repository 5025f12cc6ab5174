package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/amqp"
	"github.com/captchaq/captchaq/internal/brokertest"
	"github.com/captchaq/captchaq/sim"
)

// TestWorkerSolvesEnqueuedTasksAndServesMetrics runs the fleet's three
// commands in-process against the real broker and a simulator: enqueue 20
// tasks, a worker with --metrics-addr, collect 20 results; /metrics counts
// exactly those 20 solves; cancelling the context (as SIGTERM does) stops
// the worker with exit 0.
func TestWorkerSolvesEnqueuedTasksAndServesMetrics(t *testing.T) {
	t.Parallel()
	url := brokertest.Use(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "test-cli-worker-" + hex.EncodeToString(b[:])
	const owner = "cli-worker"
	t.Cleanup(func() { _ = amqp.DeleteTopology(context.Background(), amqp.Config{URL: url, Prefix: prefix}, owner) })
	srv, apiURL, err := sim.Start(sim.Config{Threads: 5, LatencyScale: 0.01, Seed: 21, PollBan: sim.PollBan{Disabled: true}}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const key = "worker-test-secret-key"
	getenv := func(k string) string {
		if k == envKey {
			return key
		}
		return ""
	}

	// 20 tasks, each with its own fingerprint.
	var in strings.Builder
	want := make([]string, 20)
	for i := range want {
		want[i] = fmt.Sprintf("w-%02d", i)
		fmt.Fprintf(&in, `{"id":%q,"method":"turnstile","params":{"sitekey":"0x4AAA%02d","pageurl":"https://shop.example/%d"}}`+"\n", want[i], i, i)
	}
	var enqErr bytes.Buffer
	env := &environment{stdin: strings.NewReader(in.String()), stdout: io.Discard, stderr: &enqErr, getenv: getenv}
	if code := run(ctx, env, []string{"enqueue", "--amqp", url, "--prefix", prefix, "-"}); code != 0 {
		t.Fatalf("enqueue exit %d:\n%s", code, enqErr.String())
	}

	// The worker logs the metrics address it listens on.
	wctx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	pr, pw := io.Pipe()
	wenv := &environment{stdin: strings.NewReader(""), stdout: io.Discard, stderr: pw, getenv: getenv}
	exit := make(chan int, 1)
	go func() {
		exit <- run(wctx, wenv, []string{"worker", "--amqp", url, "--prefix", prefix, "--api-url", apiURL,
			"--threads", "5", "--poll-interval", "20ms", "--owner", owner, "--metrics-addr", "127.0.0.1:0"})
		pw.Close()
	}()
	addrRE := regexp.MustCompile(`msg="serving metrics" addr=(127\.0\.0\.1:\d+)`)
	addr := make(chan string, 1)
	logs := make(chan string, 1)
	go func() {
		var all strings.Builder
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			all.WriteString(sc.Text() + "\n")
			if m := addrRE.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
		logs <- all.String()
	}()
	var metricsAddr string
	select {
	case metricsAddr = <-addr:
	case code := <-exit:
		pw.Close()
		t.Fatalf("worker exited with %d before serving metrics:\n%s", code, <-logs)
	case <-ctx.Done():
		t.Fatal("the worker never logged its metrics address")
	}

	var out, colErr bytes.Buffer
	cenv := &environment{stdin: strings.NewReader(""), stdout: &out, stderr: &colErr, getenv: getenv}
	if code := run(ctx, cenv, []string{"collect", "--amqp", url, "--prefix", prefix, "--count", "20"}); code != 0 {
		t.Fatalf("collect exit %d:\n%s", code, colErr.String())
	}
	var got []string
	dec := json.NewDecoder(&out)
	for dec.More() {
		var r captchaq.Result
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		if r.Status != captchaq.StatusSolved || r.Token == "" || r.Attempts != 1 {
			t.Errorf("result %s: status %s token %q attempts %d, want solved with a token on attempt 1", r.ID, r.Status, r.Token, r.Attempts)
		}
		got = append(got, r.ID)
	}
	sort.Strings(got)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("results for %v, want %v", got, want)
	}

	// A result is on the broker just before the worker counts it: wait
	// for the count, then check every series exactly.
	metricsURL := "http://" + metricsAddr + "/metrics"
	const solved = `
# HELP captchaq_tasks_solved_total Tasks solved.
# TYPE captchaq_tasks_solved_total counter
captchaq_tasks_solved_total 20
`
	for {
		err := testutil.ScrapeAndCompare(metricsURL, strings.NewReader(solved), "captchaq_tasks_solved_total")
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal(err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	const series = `
# HELP captchaq_tasks_submitted_total Tasks taken into the queue.
# TYPE captchaq_tasks_submitted_total counter
captchaq_tasks_submitted_total 20
# HELP captchaq_tasks_solved_total Tasks solved.
# TYPE captchaq_tasks_solved_total counter
captchaq_tasks_solved_total 20
# HELP captchaq_tasks_failed_total Tasks failed for good.
# TYPE captchaq_tasks_failed_total counter
captchaq_tasks_failed_total 0
# HELP captchaq_threads_plan The plan's threads.
# TYPE captchaq_threads_plan gauge
captchaq_threads_plan 5
# HELP captchaq_threads_window Threads the queue may use now: the plan's unless the provider said no free thread lately.
# TYPE captchaq_threads_window gauge
captchaq_threads_window 5
# HELP captchaq_threads_in_use Threads taken: tasks at the provider or being submitted.
# TYPE captchaq_threads_in_use gauge
captchaq_threads_in_use 0
# HELP captchaq_queue_depth Tasks waiting for a thread, by priority.
# TYPE captchaq_queue_depth gauge
captchaq_queue_depth{priority="5"} 0
# HELP captchaq_oldest_waiting_seconds The longest wait among tasks waiting for a thread.
# TYPE captchaq_oldest_waiting_seconds gauge
captchaq_oldest_waiting_seconds 0
# HELP captchaq_paused 1 while an account error stops all sending.
# TYPE captchaq_paused gauge
captchaq_paused 0
# HELP captchaq_worker_tasks_held Tasks this worker holds unfinished on the broker.
# TYPE captchaq_worker_tasks_held gauge
captchaq_worker_tasks_held 0
# HELP captchaq_fleet_threads_plan The plan's threads, shared by every worker on the prefix.
# TYPE captchaq_fleet_threads_plan gauge
captchaq_fleet_threads_plan 5
`
	if err := testutil.ScrapeAndCompare(metricsURL, strings.NewReader(series), "captchaq_tasks_submitted_total",
		"captchaq_tasks_solved_total", "captchaq_tasks_failed_total", "captchaq_retries_total",
		"captchaq_threads_plan", "captchaq_threads_window", "captchaq_threads_in_use", "captchaq_queue_depth",
		"captchaq_oldest_waiting_seconds", "captchaq_paused", "captchaq_worker_tasks_held", "captchaq_fleet_threads_plan"); err != nil {
		t.Error(err)
	}
	lintScrape(t, metricsURL)
	if st := srv.Stats(); st.Accepted != 20 || st.Duplicates != 0 {
		t.Errorf("simulator accepted %d submits (%d duplicates), want 20 and 0", st.Accepted, st.Duplicates)
	}

	stopWorker()
	var code int
	select {
	case code = <-exit:
	case <-time.After(60 * time.Second):
		t.Fatal("the worker did not stop after its context ended")
	}
	text := <-logs
	if code != 0 {
		t.Fatalf("worker exit %d after cancel, want 0:\n%s", code, text)
	}
	if !strings.Contains(text, `msg="worker stopped" owner=cli-worker handed_back=0 left_to_checkpoints=0 grace_exceeded=false`) {
		t.Errorf("worker log lacks a clean stop:\n%s", text)
	}
	for _, s := range []string{text, enqErr.String(), colErr.String()} {
		if strings.Contains(s, key) {
			t.Fatalf("the provider key shows in the output:\n%s", s)
		}
	}
}

// lintScrape fails t for every promlint problem of the page at url.
func lintScrape(t *testing.T, url string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	problems, err := promlint.New(resp.Body).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// TestWorkerBadInvocations: mistakes are exit 2 with a message that names
// the fix, before anything connects.
func TestWorkerBadInvocations(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		key  string
		want string
	}{
		{"stray argument", []string{"--amqp", "amqp://127.0.0.1:1/", "tasks.jsonl"}, "k", `unexpected argument "tasks.jsonl"`},
		{"no broker", nil, "k", "--amqp: give the broker URL"},
		{"no key", []string{"--amqp", "amqp://127.0.0.1:1/"}, "", "set CAPTCHAAI_KEY"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var errb bytes.Buffer
			env := &environment{stdin: strings.NewReader(""), stdout: io.Discard, stderr: &errb,
				getenv: func(k string) string {
					if k == envKey {
						return tt.key
					}
					return ""
				}}
			if code := run(context.Background(), env, append([]string{"worker"}, tt.args...)); code != 2 {
				t.Fatalf("exit %d, want 2; stderr:\n%s", code, errb.String())
			}
			if !strings.Contains(errb.String(), tt.want) {
				t.Fatalf("stderr lacks %q:\n%s", tt.want, errb.String())
			}
		})
	}
}

// worker polls with the queue's default scheduler unless --poll-interval
// is given: the queue says which cadence it follows as it starts.
func TestWorkerPollCadence(t *testing.T) {
	t.Parallel()
	url := brokertest.Use(t)
	srv, apiURL, err := sim.Start(sim.Config{LatencyScale: 0.01, Seed: 21}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	getenv := func(k string) string {
		if k == envKey {
			return "worker-cadence-secret-key"
		}
		return ""
	}
	pollingRE := regexp.MustCompile(`msg=polling (.*)`)
	for i, c := range []struct {
		flags []string
		want  string
	}{
		{nil, "schedule=default poll_gap=500ms"},
		{[]string{"--poll-interval", "250ms"}, "schedule=fixed poll_interval=250ms"},
	} {
		var b [4]byte
		_, _ = rand.Read(b[:])
		prefix := "test-cli-cadence-" + hex.EncodeToString(b[:])
		owner := fmt.Sprint("cadence-", i)
		t.Cleanup(func() { _ = amqp.DeleteTopology(context.Background(), amqp.Config{URL: url, Prefix: prefix}, owner) })
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		pr, pw := io.Pipe()
		env := &environment{stdin: strings.NewReader(""), stdout: io.Discard, stderr: pw, getenv: getenv}
		exit := make(chan int, 1)
		go func() {
			exit <- run(ctx, env, append([]string{"worker", "--amqp", url, "--prefix", prefix, "--api-url", apiURL,
				"--threads", "2", "--owner", owner}, c.flags...))
			pw.Close()
		}()
		var got string
		var all strings.Builder
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			all.WriteString(sc.Text() + "\n")
			if m := pollingRE.FindStringSubmatch(sc.Text()); m != nil && got == "" {
				got = m[1]
				cancel()
			}
		}
		cancel()
		if code := <-exit; code != 0 {
			t.Errorf("worker %v exited %d:\n%s", c.flags, code, all.String())
		}
		if got != c.want {
			t.Errorf("worker %v: polling %q, want %q:\n%s", c.flags, got, c.want, all.String())
		}
	}
}
