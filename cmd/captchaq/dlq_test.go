package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/amqp"
	"github.com/captchaq/captchaq/sim"
)

// TestDLQReplayReasonOnTheFleet: `dlq replay --reason` is the flag of both
// back ends, and on the fleet it selects by the fleet's own reasons as well
// as by error code.
func TestDLQReplayReasonOnTheFleet(t *testing.T) {
	t.Parallel()
	cfg, ctx := cliTopology(t)
	c, err := amqp.Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := c.NewPublisher()
	task := func(id string) captchaq.Task {
		return captchaq.Task{ID: id, Method: "turnstile", Params: map[string]string{"sitekey": "0x4", "pageurl": "https://x.example/" + id}}
	}
	for _, dl := range []struct {
		id, code, reason string
	}{
		{"bad-url", "ERROR_PAGEURL", amqp.ReasonPermanent},
		{"hard", "ERROR_CAPTCHA_UNSOLVABLE", amqp.ReasonExhausted},
		{"hard-2", "ERROR_CAPTCHA_UNSOLVABLE", amqp.ReasonExhausted},
	} {
		if err := p.DeadLetter(ctx, amqp.TaskMessage{Task: task(dl.id), Attempts: 1, LastErrorCode: dl.code}, dl.reason); err != nil {
			t.Fatal(err)
		}
	}
	p.Close()
	fleet := []string{"--amqp", cfg.URL, "--prefix", cfg.Prefix}

	r := runWith(t, "", nil, append([]string{"dlq", "replay", "--reason", "exhausted"}, fleet...)...)
	if r.code != 0 || r.stdout != "replayed 2 dead letters\n" {
		t.Fatalf("dlq replay --reason exhausted = %+v", r)
	}
	r = runWith(t, "", nil, append([]string{"dlq", "replay", "--reason", "ERROR_PAGEURL"}, fleet...)...)
	if r.code != 0 || r.stdout != "replayed 1 dead letters\n" {
		t.Fatalf("dlq replay --reason ERROR_PAGEURL = %+v", r)
	}
	r = runWith(t, "", nil, append([]string{"dlq", "list"}, fleet...)...)
	if r.code != 0 || r.stdout != "" || !strings.Contains(r.stderr, "0 dead letters") {
		t.Fatalf("dlq list after both replays = %+v", r)
	}
	// The old name is gone on every back end.
	r = runWith(t, "", nil, append([]string{"dlq", "replay", "--code", "EXPIRED"}, fleet...)...)
	if r.code != exitUsage || !strings.Contains(r.stderr, "unknown flag --code") {
		t.Fatalf("dlq replay --code = %+v; want exit 2", r)
	}
}

// TestDLQHelp: `dlq --help` lists the flags of both back ends and exits 0.
func TestDLQHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"dlq", "--help"}, {"dlq", "-h"}} {
		r := runWith(t, "", nil, args...)
		if r.code != 0 {
			t.Errorf("%v: exit %d", args, r.code)
		}
		for _, flag := range []string{"-store", "-amqp", "-prefix", "-id", "-reason", "-all", "permanent, exhausted"} {
			if !strings.Contains(r.stdout, flag) {
				t.Errorf("%v does not list %s:\n%s", args, flag, r.stdout)
			}
		}
	}
	for _, args := range [][]string{{"dlq", "list", "--store", "x.db", "--help"}, {"dlq", "replay", "--amqp", "amqp://127.0.0.1:1", "--help"}} {
		r := runWith(t, "", nil, args...)
		if r.code != 0 || !strings.Contains(r.stdout, "-reason") {
			t.Errorf("%v = %+v; want exit 0 listing -reason", args, r)
		}
	}
}

// TestDLQReplayReachesTheWorkerThatFailedIt: a task the running worker
// failed for good (the provider refused it) comes back from `dlq replay
// --amqp` and that same worker solves it; collect reports it under its id.
func TestDLQReplayReachesTheWorkerThatFailedIt(t *testing.T) {
	t.Parallel()
	cfg, _ := cliTopology(t)
	const owner = "cli-replay-worker"
	t.Cleanup(func() { _ = amqp.DeleteTopology(context.Background(), cfg, owner) })
	var refuse atomic.Bool
	refuse.Store(true)
	srv, apiURL, err := sim.Start(sim.Config{Instant: true, Seed: 7, PollBan: sim.PollBan{Disabled: true},
		RefuseSubmit: func(map[string]string) string {
			if refuse.Load() {
				return "ERROR_BAD_PARAMETERS"
			}
			return ""
		}}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	getenv := func(k string) string {
		if k == envKey {
			return "replay-test-secret-key"
		}
		return ""
	}
	fleet := []string{"--amqp", cfg.URL, "--prefix", cfg.Prefix}
	if code, stderr := enqueueInput(ctx, cfg, `{"id":"again","method":"turnstile","params":{"sitekey":"0x4AAA","pageurl":"https://shop.example/again"}}`+"\n"); code != 0 {
		t.Fatalf("enqueue exit %d:\n%s", code, stderr)
	}
	wctx, stopWorker := context.WithCancel(ctx)
	exit := make(chan int, 1)
	go func() {
		wenv := &environment{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard, getenv: getenv}
		exit <- run(wctx, wenv, append([]string{"worker", "--api-url", apiURL, "--threads", "2", "--poll-interval", "20ms", "--owner", owner}, fleet...))
	}()
	defer func() {
		stopWorker()
		if code := <-exit; code != 0 {
			t.Errorf("worker exit %d", code)
		}
	}()
	// collectOne runs `collect --count 1` for at most 60 s and returns
	// its one result line, "" when none came.
	collectOne := func() string {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		var out, errb bytes.Buffer
		env := &environment{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: getenv}
		run(cctx, env, append([]string{"collect", "--count", "1"}, fleet...))
		var r captchaq.Result
		if out.Len() == 0 {
			return ""
		}
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatalf("collect output %q: %v", out.String(), err)
		}
		return r.ID + "/" + string(r.Status) + "/" + r.ErrorCode
	}
	if got := collectOne(); got != "again/failed/ERROR_BAD_PARAMETERS" {
		t.Fatalf("first solve: %q; want again/failed/ERROR_BAD_PARAMETERS", got)
	}
	// The worker publishes the result, then the dead letter.
	c, err := amqp.Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for {
		n := 0
		if err := c.DeadLetters(ctx, func(amqp.DeadLetter) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("no dead letter before the deadline")
		case <-time.After(20 * time.Millisecond):
		}
	}
	refuse.Store(false)
	if r := runWith(t, "", nil, append([]string{"dlq", "replay", "--id", "again"}, fleet...)...); r.code != 0 || r.stdout != "replayed 1 dead letters\n" {
		t.Fatalf("dlq replay = %+v", r)
	}
	if got := collectOne(); got != "again/solved/" {
		t.Fatalf("after replay: %q; want again/solved/", got)
	}
	if st := srv.Stats(); st.Accepted != 1 {
		t.Fatalf("provider accepted %d tasks; want 1", st.Accepted)
	}
}

// `dlq list TASKS.jsonl` reads the store of that file's batch, also with
// CAPTCHAQ_AMQP_URL exported for the fleet's commands; naming both a task
// file and --amqp is a usage error.
func TestDLQTaskFileWithTheFleetsURLExported(t *testing.T) {
	t.Parallel()
	_, bad := startFastSim(t, sim.Config{Threads: 5, UnsolvableRate: 1})
	tasks := writeFile(t, "tasks.jsonl", jsonl(t, turnstileTasks("dlq", 3)))
	data := t.TempDir()
	vars := map[string]string{"CAPTCHAAI_KEY": batchKey, "XDG_DATA_HOME": data}
	b := startBinary(t, vars, "", "batch", tasks, "--api-url", bad, "--max-attempts", "1", "--poll-interval", "10ms")
	if code := b.wait(t); code != exitTasksFailed {
		t.Fatalf("batch exited %d: %s", code, b.errText())
	}
	withFleet := map[string]string{"CAPTCHAAI_KEY": batchKey, "XDG_DATA_HOME": data, "CAPTCHAQ_AMQP_URL": "amqp://guest:guest@127.0.0.1:1/"}

	l := startBinary(t, withFleet, "", "dlq", "list", tasks)
	if code := l.wait(t); code != 0 || !strings.Contains(l.errText(), "3 dead letters") {
		t.Fatalf("dlq list TASKS.jsonl exited %d: %s", code, l.errText())
	}
	var ids []string
	for _, line := range strings.Split(strings.TrimSpace(l.stdout.String()), "\n") {
		var d struct {
			ID        string `json:"id"`
			ErrorCode string `json:"error_code"`
		}
		if err := json.Unmarshal([]byte(line), &d); err != nil {
			t.Fatalf("dlq line %q: %v", line, err)
		}
		if d.ErrorCode != "ERROR_CAPTCHA_UNSOLVABLE" {
			t.Errorf("dead letter %s: error code %q", d.ID, d.ErrorCode)
		}
		ids = append(ids, d.ID)
	}
	// In the store's order: batch stores its chunks from several readers
	// at once (StreamFunc), so not always the file's.
	if strings.Join(slices.Sorted(slices.Values(ids)), ",") != "dlq-0,dlq-1,dlq-2" {
		t.Errorf("listed %v, want dlq-0, dlq-1, dlq-2 once each", ids)
	}

	// Flags before the file, and a flag's value that is not the file.
	r := startBinary(t, withFleet, "", "dlq", "replay", "--id", "dlq-1", tasks)
	if code := r.wait(t); code != 0 || r.stdout.String() != "replayed 1 dead letters\n" {
		t.Fatalf("dlq replay --id dlq-1 TASKS.jsonl exited %d: %q %s", code, r.stdout.String(), r.errText())
	}

	both := startBinary(t, withFleet, "", "dlq", "list", tasks, "--amqp", "amqp://guest:guest@127.0.0.1:1/")
	if code := both.wait(t); code != 2 || !strings.Contains(both.errText(), "give --amqp, or a task file or --store, not both") {
		t.Errorf("dlq list TASKS.jsonl --amqp exited %d: %s", code, both.errText())
	}
}

func TestDLQTaskFileArgument(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"list", "t.jsonl"}, "t.jsonl"},
		{[]string{"replay", "--id", "a", "t.jsonl"}, "t.jsonl"},
		{[]string{"replay", "--id=a", "t.jsonl", "--all"}, "t.jsonl"},
		{[]string{"replay", "--reason", "EXPIRED"}, ""},
		{[]string{"list", "--amqp", "amqp://x/", "--prefix", "p"}, ""},
		{[]string{"list", "--", "-odd.jsonl"}, "-odd.jsonl"},
		{[]string{"list"}, ""},
	} {
		if got := dlqTaskFile(c.args); got != c.want {
			t.Errorf("dlqTaskFile(%q) = %q, want %q", c.args, got, c.want)
		}
	}
}
