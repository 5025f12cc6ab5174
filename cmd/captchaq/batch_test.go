package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/sim"
)

const batchKey = "batch-Secret-Key-789"

// startFastSim starts a simulator whose solve times are milliseconds and
// that never bans a fast poller, and closes it when the test ends.
func startFastSim(t *testing.T, cfg sim.Config) (*sim.Server, string) {
	t.Helper()
	if cfg.LatencyScale == 0 {
		cfg.LatencyScale = 0.005
	}
	cfg.PollBan.Disabled = true
	s, base, err := sim.Start(cfg, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, base
}

// turnstileTasks are n Turnstile tasks with ids prefix-0.. and a page URL of
// their own each, so the simulator tells their submissions apart.
func turnstileTasks(prefix string, n int) []captchaq.Task {
	tasks := make([]captchaq.Task, n)
	for i := range tasks {
		tasks[i] = captchaq.Task{
			ID:     fmt.Sprintf("%s-%d", prefix, i),
			Method: "turnstile",
			Params: map[string]string{"sitekey": "0x4AAAAAAAB3x-test", "pageurl": fmt.Sprintf("https://shop.example/%s/%d", prefix, i)},
		}
	}
	return tasks
}

func jsonl(t *testing.T, tasks []captchaq.Task) string {
	t.Helper()
	var b strings.Builder
	for _, task := range tasks {
		line, err := json.Marshal(task)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.String()
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// fingerprintOf is the simulator's fingerprint of a task's submission.
func fingerprintOf(task captchaq.Task) string {
	return sim.Fingerprint(task.Method, task.Params, nil)
}

type cliRun struct {
	code           int
	stdout, stderr string
}

// runWith runs a subcommand in-process with stdin and environment variables,
// and fails the test when the key shows in the output.
func runWith(t *testing.T, stdin string, vars map[string]string, args ...string) cliRun {
	t.Helper()
	var out, errb bytes.Buffer
	env := &environment{
		stdin: strings.NewReader(stdin), stdout: &out, stderr: &errb,
		getenv: func(k string) string { return vars[k] },
	}
	code := run(context.Background(), env, args)
	r := cliRun{code: code, stdout: out.String(), stderr: errb.String()}
	for _, k := range []string{batchKey, "wrong-Key-000"} {
		if strings.Contains(r.stdout+r.stderr, k) {
			t.Errorf("the key appears in the output:\nstdout: %s\nstderr: %s", r.stdout, r.stderr)
		}
	}
	return r
}

var keyEnv = map[string]string{"CAPTCHAAI_KEY": batchKey}

// fastQueue are the queue flags that make a batch against a fast simulator
// quick.
var fastQueue = []string{"--poll-interval", "10ms"}

// parseResults reads result JSONL; every id must appear once.
func parseResults(t *testing.T, out string) map[string]captchaq.Result {
	t.Helper()
	got := map[string]captchaq.Result{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, maxLineBytes)
	for sc.Scan() {
		var r captchaq.Result
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("result line %q: %v", sc.Text(), err)
		}
		if _, dup := got[r.ID]; dup {
			t.Errorf("result for %q written twice", r.ID)
		}
		got[r.ID] = r
	}
	return got
}

// wantAllSolved checks results hold exactly the tasks' ids, each solved
// with a token.
func wantAllSolved(t *testing.T, got map[string]captchaq.Result, tasks []captchaq.Task) {
	t.Helper()
	var want, have []string
	method := map[string]string{}
	for _, task := range tasks {
		want = append(want, task.ID)
		method[task.ID] = task.Method
	}
	for id, r := range got {
		have = append(have, id)
		if r.Status != captchaq.StatusSolved || r.Token == "" || r.Method != method[id] {
			t.Errorf("result %q = %+v; want solved %s with a token", id, r, method[id])
		}
	}
	slices.Sort(want)
	slices.Sort(have)
	if diff := cmp.Diff(want, have); diff != "" {
		t.Errorf("result ids (-want +got):\n%s", diff)
	}
}

// readResults reads and parses the result JSONL file at path.
func readResults(t *testing.T, path string) map[string]captchaq.Result {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return parseResults(t, string(b))
}

// readAllSolved reads the result file at path, checks it holds each of
// the tasks solved (wantAllSolved), and returns its results.
func readAllSolved(t *testing.T, path string, tasks []captchaq.Task) map[string]captchaq.Result {
	t.Helper()
	got := readResults(t, path)
	wantAllSolved(t, got, tasks)
	return got
}

func tokens(rs map[string]captchaq.Result) map[string]string {
	m := map[string]string{}
	for id, r := range rs {
		m[id] = r.Token
	}
	return m
}

func TestBatchSolvesEveryTaskOnce(t *testing.T) {
	t.Parallel()
	s, base := startFastSim(t, sim.Config{Threads: 10})
	tasks := turnstileTasks("once", 30)
	in := writeFile(t, "tasks.jsonl", jsonl(t, tasks))
	outPath := filepath.Join(t.TempDir(), "out.jsonl")
	db := filepath.Join(t.TempDir(), "q.db")

	r := runWith(t, "", keyEnv, append([]string{"batch", in, "--out", outPath, "--store", db, "--api-url", base, "--threads", "10"}, fastQueue...)...)
	if r.code != 0 || r.stdout != "" {
		t.Fatalf("batch = %+v", r)
	}
	got := readAllSolved(t, outPath, tasks)
	st := s.Stats()
	if st.Accepted != int64(len(tasks)) || st.Duplicates != 0 {
		t.Errorf("sim accepted %d duplicates %d; want %d 0", st.Accepted, st.Duplicates, len(tasks))
	}
	for _, task := range tasks {
		if n := s.SubmissionsOf(fingerprintOf(task)); n != 1 {
			t.Errorf("%s submitted %d times", task.ID, n)
		}
	}
	if !strings.Contains(r.stderr, "captchaq batch: 30 solved, 0 failed (0 invalid lines) of 30") {
		t.Errorf("summary: %q", r.stderr)
	}

	// A rerun on the same store solves nothing again and writes the same
	// results, complete.
	r2 := runWith(t, "", keyEnv, append([]string{"batch", in, "--out", outPath, "--store", db, "--api-url", base, "--threads", "10"}, fastQueue...)...)
	if r2.code != 0 {
		t.Fatalf("rerun = %+v", r2)
	}
	got2 := readAllSolved(t, outPath, tasks)
	if diff := cmp.Diff(tokens(got), tokens(got2)); diff != "" {
		t.Errorf("rerun tokens (-first +rerun):\n%s", diff)
	}
	if st2 := s.Stats(); st2.Accepted != st.Accepted || st2.Calls.Submit != st.Calls.Submit {
		t.Errorf("rerun reached the provider: accepted %d→%d, submit calls %d→%d", st.Accepted, st2.Accepted, st.Calls.Submit, st2.Calls.Submit)
	}
	if !strings.Contains(r2.stderr, "30 from the store") || strings.Contains(r2.stderr, "tasks/min") {
		t.Errorf("rerun summary should say the results came from the store, without a rate: %q", r2.stderr)
	}

	// results --store prints every stored result.
	rr := runWith(t, "", nil, "results", "--store", db)
	if rr.code != 0 {
		t.Fatalf("results = %+v", rr)
	}
	stored := parseResults(t, rr.stdout)
	wantAllSolved(t, stored, tasks)
	if diff := cmp.Diff(tokens(got), tokens(stored)); diff != "" {
		t.Errorf("stored tokens (-batch +results):\n%s", diff)
	}
}

func TestBatchReadsStdinAndTakesFlagsAfterFile(t *testing.T) {
	t.Parallel()
	s, base := startFastSim(t, sim.Config{Threads: 5})
	tasks := turnstileTasks("stdin", 8)
	// Stdin, result lines on stdout, flags after the positionall "-".
	r := runWith(t, jsonl(t, tasks), map[string]string{"CAPTCHAAI_KEY": batchKey, "CAPTCHAAI_URL": base},
		append([]string{"batch", "-", "--store", "memory", "--threads", "5"}, fastQueue...)...)
	if r.code != 0 {
		t.Fatalf("batch = %+v", r)
	}
	wantAllSolved(t, parseResults(t, r.stdout), tasks)
	if st := s.Stats(); st.Accepted != 8 || st.Duplicates != 0 {
		t.Errorf("sim accepted %d duplicates %d; want 8 0", st.Accepted, st.Duplicates)
	}
	if !strings.Contains(r.stderr, "captchaq batch: 8 solved, 0 failed (0 invalid lines) of 8") {
		t.Errorf("summary: %q", r.stderr)
	}
}

func TestBatchReportsInvalidLines(t *testing.T) {
	t.Parallel()
	s, base := startFastSim(t, sim.Config{Threads: 5})
	good := turnstileTasks("valid", 3)
	lines := []string{
		jsonl(t, good[:1]),
		`{"id":"broken","method":` + "\n",
		`{"id":"extra","method":"turnstile","colour":"red","params":{"sitekey":"k","pageurl":"https://a.example/"}}` + "\n",
		jsonl(t, good[1:2]),
		"\n",
		`{"id":"nourl","method":"turnstile","params":{"sitekey":"k"}}` + "\n",
		`{"id":"hc","method":"hcaptcha","params":{"sitekey":"k","pageurl":"https://a.example/"}}` + "\n",
		jsonl(t, good[2:]),
	}
	in := writeFile(t, "tasks.jsonl", strings.Join(lines, ""))
	r := runWith(t, "", keyEnv, append([]string{"batch", in, "--store", "memory", "--api-url", base}, fastQueue...)...)
	if r.code != exitTasksFailed || !strings.Contains(r.stderr, "4 of 7 tasks failed") {
		t.Fatalf("batch = %+v; want exit %d saying 4 of 7 tasks failed", r, exitTasksFailed)
	}
	got := parseResults(t, r.stdout)
	if len(got) != 7 {
		t.Errorf("%d results, want 7 (3 valid, 4 invalid): %v", len(got), got)
	}
	for _, task := range good {
		if g := got[task.ID]; g.Status != captchaq.StatusSolved || g.Token == "" {
			t.Errorf("%s = %+v, want solved", task.ID, g)
		}
	}
	invalid := []struct {
		id, line, reason, code string
	}{
		{"", "line 2", "invalid JSON", "INVALID_TASK"}, // no id: its line names it
		{"extra", "line 3", "colour", "INVALID_TASK"},
		{"nourl", "line 6", "pageurl", "INVALID_TASK"},
		{"hc", "line 7", "hcaptcha", "UNSUPPORTED_TYPE"},
	}
	for _, c := range invalid {
		g, ok := got[c.id]
		if !ok || g.Status != captchaq.StatusFailed || g.ErrorCode != c.code ||
			!strings.HasPrefix(g.Error, c.line+": ") || !strings.Contains(g.Error, c.reason) {
			t.Errorf("result %s = %+v; want failed %s naming %q and %q", c.id, g, c.code, c.line, c.reason)
		}
		if !strings.Contains(r.stderr, c.line+": ") {
			t.Errorf("stderr does not name %s: %q", c.line, r.stderr)
		}
	}
	for _, l := range strings.Split(r.stderr, "\n") {
		if strings.HasPrefix(l, "line ") {
			for _, c := range invalid {
				if strings.HasPrefix(l, c.line+": ") && !strings.Contains(l, c.reason) {
					t.Errorf("stderr %q does not say %q", l, c.reason)
				}
			}
		}
	}
	if st := s.Stats(); st.Accepted != 3 {
		t.Errorf("sim accepted %d, want 3", st.Accepted)
	}
	if !strings.Contains(r.stderr, "captchaq batch: 3 solved, 4 failed (4 invalid lines) of 7") {
		t.Errorf("summary: %q", r.stderr)
	}
}

func TestBatchWrongKeyStops(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		tasks int
		store string
	}{
		{"sqlite", 5, "file"},
		// More tasks than the queue holds (MaxQueued is 1000 at one
		// thread): reading must stop too, not wait for room forever.
		{"beyond MaxQueued", 1005, "memory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s, base := startFastSim(t, sim.Config{Threads: 5, Key: batchKey})
			in := writeFile(t, "tasks.jsonl", jsonl(t, turnstileTasks("badkey", c.tasks)))
			store := c.store
			if store == "file" {
				store = filepath.Join(t.TempDir(), "q.db")
			}
			r := runWith(t, "", map[string]string{"CAPTCHAAI_KEY": "wrong-Key-000"},
				append([]string{"batch", in, "--store", store, "--api-url", base, "--threads", "1"}, fastQueue...)...)
			if r.code != 3 {
				t.Fatalf("exit %d, want 3: %+v", r.code, r)
			}
			want := "captchaq batch: stopped: the provider refused the account (submit: ERROR_WRONG_USER_KEY: The key is not valid.); fix the key (CAPTCHAAI_KEY or CAPTCHAAI_KEY_FILE)"
			if !strings.HasPrefix(r.stderr, want) || strings.Count(r.stderr, "ERROR_WRONG_USER_KEY") != 1 {
				t.Errorf("stderr %q; want once, starting %q", r.stderr, want)
			}
			if r.stdout != "" {
				t.Errorf("results written for a wrong key: %q", r.stdout)
			}
			if st := s.Stats(); st.Accepted != 0 || st.Calls.Submit != 1 {
				t.Errorf("sim accepted %d of %d submit calls; want 0 of 1 (sending pauses at the first refusal)", st.Accepted, st.Calls.Submit)
			}
		})
	}
}

func TestBatchNoKeyFileNamed(t *testing.T) {
	t.Parallel()
	in := writeFile(t, "tasks.jsonl", jsonl(t, turnstileTasks("nokey", 1)))
	r := runWith(t, "", map[string]string{"CAPTCHAAI_KEY_FILE": filepath.Join(t.TempDir(), "missing")},
		"batch", in, "--store", "memory", "--api-url", "http://127.0.0.1:1")
	if r.code != 2 || !strings.Contains(r.stderr, "CAPTCHAAI_KEY_FILE") {
		t.Errorf("run = %+v; want exit 2 naming CAPTCHAAI_KEY_FILE", r)
	}
}

func TestBatchKeyFromFile(t *testing.T) {
	t.Parallel()
	s, base := startFastSim(t, sim.Config{Threads: 5, Key: batchKey})
	keyFile := writeFile(t, "key", batchKey+"\n")
	tasks := turnstileTasks("keyfile", 4)
	r := runWith(t, jsonl(t, tasks), map[string]string{"CAPTCHAAI_KEY_FILE": keyFile},
		append([]string{"batch", "--store", "memory", "--api-url", base}, fastQueue...)...)
	if r.code != 0 {
		t.Fatalf("batch = %+v", r)
	}
	wantAllSolved(t, parseResults(t, r.stdout), tasks)
	if st := s.Stats(); st.Accepted != 4 {
		t.Errorf("sim accepted %d, want 4", st.Accepted)
	}
}

func TestBatchDeadLettersReplay(t *testing.T) {
	t.Parallel()
	// Every task fails for good the first time: unsolvable, one attempt.
	bad, badBase := startFastSim(t, sim.Config{Threads: 5, UnsolvableRate: 1})
	tasks := turnstileTasks("dlq", 3)
	in := writeFile(t, "tasks.jsonl", jsonl(t, tasks))
	db := filepath.Join(t.TempDir(), "q.db")
	r := runWith(t, "", keyEnv, append([]string{"batch", in, "--store", db, "--api-url", badBase, "--max-attempts", "1"}, fastQueue...)...)
	if r.code != exitTasksFailed {
		t.Fatalf("batch = %+v", r)
	}
	for id, g := range parseResults(t, r.stdout) {
		if g.Status != captchaq.StatusFailed || g.ErrorCode != "ERROR_CAPTCHA_UNSOLVABLE" {
			t.Errorf("%s = %+v, want failed unsolvable", id, g)
		}
	}
	if st := bad.Stats(); st.Accepted != 3 {
		t.Errorf("sim accepted %d, want 3", st.Accepted)
	}

	l := runWith(t, "", nil, "dlq", "list", "--store", db)
	if l.code != 0 || !strings.Contains(l.stderr, "3 dead letters") {
		t.Fatalf("dlq list = %+v", l)
	}
	var listed []string
	for _, line := range strings.Split(strings.TrimSpace(l.stdout), "\n") {
		var d struct {
			ID        string        `json:"id"`
			ErrorCode string        `json:"error_code"`
			Task      captchaq.Task `json:"task"`
		}
		if err := json.Unmarshal([]byte(line), &d); err != nil {
			t.Fatalf("dlq line %q: %v", line, err)
		}
		if d.ErrorCode != "ERROR_CAPTCHA_UNSOLVABLE" || d.Task.ID != d.ID || d.Task.Params["pageurl"] == "" {
			t.Errorf("dead letter %+v", d)
		}
		listed = append(listed, d.ID)
	}
	slices.Sort(listed)
	if diff := cmp.Diff([]string{"dlq-0", "dlq-1", "dlq-2"}, listed); diff != "" {
		t.Errorf("listed (-want +got):\n%s", diff)
	}

	rp := runWith(t, "", nil, "dlq", "replay", "--store", db, "--id", "dlq-1")
	if rp.code != 0 || rp.stdout != "replayed 1 dead letters\n" {
		t.Fatalf("dlq replay = %+v", rp)
	}

	// The rerun against a provider that solves: the replayed task is solved,
	// the two others keep their stored failure and are not sent again.
	good, goodBase := startFastSim(t, sim.Config{Threads: 5})
	r2 := runWith(t, "", keyEnv, append([]string{"batch", in, "--store", db, "--api-url", goodBase}, fastQueue...)...)
	if r2.code != exitTasksFailed {
		t.Fatalf("rerun = %+v", r2)
	}
	got := parseResults(t, r2.stdout)
	if g := got["dlq-1"]; g.Status != captchaq.StatusSolved || g.Token == "" {
		t.Errorf("replayed dlq-1 = %+v, want solved", g)
	}
	for _, id := range []string{"dlq-0", "dlq-2"} {
		if g := got[id]; g.Status != captchaq.StatusFailed || g.ErrorCode != "ERROR_CAPTCHA_UNSOLVABLE" {
			t.Errorf("%s = %+v, want its stored failure", id, g)
		}
	}
	if st := good.Stats(); st.Accepted != 1 || good.SubmissionsOf(fingerprintOf(tasks[1])) != 1 {
		t.Errorf("solving sim accepted %d, want only dlq-1", st.Accepted)
	}
	l2 := runWith(t, "", nil, "dlq", "list", "--store", db)
	if l2.code != 0 || !strings.Contains(l2.stderr, "2 dead letters") || strings.Contains(l2.stdout, `"dlq-1"`) {
		t.Errorf("dlq list after replay = %+v", l2)
	}
}

func TestExamplesTasksParse(t *testing.T) {
	t.Parallel()
	f, err := os.Open("../../examples/tasks.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, maxLineBytes)
	var valid, invalid []string
	for n := 1; sc.Scan(); n++ {
		task, err := captchaq.ParseTask(sc.Bytes())
		if err == nil {
			err = task.ProviderTask().Validate()
		}
		if err != nil {
			invalid = append(invalid, fmt.Sprintf("%d %s: %v", n, task.ID, err))
			continue
		}
		valid = append(valid, task.ID)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(invalid) != 1 || !strings.HasPrefix(invalid[0], fmt.Sprintf("%d bad-1: ", len(valid)+1)) || !strings.Contains(invalid[0], "hcaptcha") {
		t.Errorf("invalid lines %q; want only the last, bad-1 (hcaptcha)", invalid)
	}
	if len(valid) != 23 {
		t.Errorf("%d valid tasks, want 23: %v", len(valid), valid)
	}
}

func TestBatchBuiltInSimulator(t *testing.T) {
	t.Parallel()
	task := `{"id":"img-1","method":"base64","params":{"body":"iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="}}` + "\n"
	for _, c := range []struct {
		name string
		args []string
		note bool
	}{
		{"no key, no URL", nil, true},
		{"--sim", []string{"--sim"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			// The default poll interval: the built-in simulator bans an IP
			// that polls one id more than 20 times in 10 s, as CaptchaAI does.
			r := runWith(t, task, nil, append([]string{"batch", "--store", "memory"}, c.args...)...)
			if r.code != 0 {
				t.Fatalf("batch = %+v", r)
			}
			got := parseResults(t, r.stdout)
			if g := got["img-1"]; len(got) != 1 || g.Status != captchaq.StatusSolved || g.Token == "" {
				t.Errorf("results %+v, want img-1 solved", got)
			}
			if note := strings.Contains(r.stderr, "no CAPTCHAAI_KEY set: solving against the built-in simulator"); note != c.note {
				t.Errorf("stderr %q: simulator note shown %v, want %v", r.stderr, note, c.note)
			}
		})
	}
}

func TestBatchNoKeyWithURL(t *testing.T) {
	t.Parallel()
	for _, vars := range []map[string]string{{"CAPTCHAAI_URL": "http://127.0.0.1:1"}, nil} {
		args := []string{"batch", "--store", "memory"}
		if vars == nil {
			args = append(args, "--api-url", "http://127.0.0.1:1")
		}
		r := runWith(t, "", vars, args...)
		if r.code != 2 || !strings.Contains(r.stderr, "no provider key: set CAPTCHAAI_KEY") {
			t.Errorf("%v %v: run = %+v; want exit 2 asking for CAPTCHAAI_KEY", vars, args, r)
		}
	}
}

func TestBatchBadArguments(t *testing.T) {
	t.Parallel()
	in := writeFile(t, "tasks.jsonl", jsonl(t, turnstileTasks("args", 1)))
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{in, in}, 2, "one input file at most, got 2"},
		{[]string{in, "--threads", "-1"}, 2, "--threads must be at least 1, got -1"},
		{[]string{in, "--plan", "GOLD"}, 2, "--plan: "},
		{[]string{filepath.Join(t.TempDir(), "missing.jsonl")}, 2, "tasks file: open "},
		{[]string{in, "--out", filepath.Join(t.TempDir(), "no", "dir", "out.jsonl")}, 1, "--out: open "},
		{[]string{in, "--bogus"}, 2, "unknown flag --bogus"},
		// After "--" everything is a file name, even what looks like a flag.
		{[]string{"--", in, "--threads", "3"}, 2, "one input file at most, got 3"},
	} {
		r := runWith(t, "", keyEnv, append([]string{"batch", "--store", "memory"}, c.args...)...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) || r.stdout != "" {
			t.Errorf("batch %v = %+v; want exit %d and %q", c.args, r, c.code, c.want)
		}
	}
}

func TestParseInterspersed(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args       []string
		out        string
		threads    int
		positional []string
	}{
		{[]string{"a.jsonl", "--out", "r.jsonl", "--threads", "4"}, "r.jsonl", 4, []string{"a.jsonl"}},
		{[]string{"--threads", "4", "a.jsonl", "--out", "r.jsonl"}, "r.jsonl", 4, []string{"a.jsonl"}},
		{[]string{"-", "--out=r.jsonl"}, "r.jsonl", 0, []string{"-"}},
		{[]string{"--out", "r.jsonl", "--", "-odd.jsonl", "--threads", "4"}, "r.jsonl", 0, []string{"-odd.jsonl", "--threads", "4"}},
		{[]string{"a.jsonl", "b.jsonl", "--threads", "2"}, "", 2, []string{"a.jsonl", "b.jsonl"}},
	} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		out, threads := fs.String("out", "", ""), fs.Int("threads", 0, "")
		if err := parseInterspersed(fs, c.args); err != nil {
			t.Errorf("%v: %v", c.args, err)
			continue
		}
		if *out != c.out || *threads != c.threads || !slices.Equal(fs.Args(), c.positional) {
			t.Errorf("%v: out %q threads %d args %q; want %q %d %q", c.args, *out, *threads, fs.Args(), c.out, c.threads, c.positional)
		}
	}
}

func TestBatchLongestFirst(t *testing.T) {
	t.Parallel()
	_, base := startFastSim(t, sim.Config{Threads: 1})
	img := func(id string) captchaq.Task {
		return captchaq.Task{ID: id, Method: "base64", Params: map[string]string{"body": "aW1hZ2UtIiArIGlk" + id}}
	}
	rc := captchaq.Task{ID: "rc", Method: "userrecaptcha", Params: map[string]string{"googlekey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-", "pageurl": "https://shop.example/rc"}}
	ts := turnstileTasks("ts", 2)
	tasks := []captchaq.Task{img("i0"), ts[0], rc, img("i1"), ts[1]}
	in := writeFile(t, "tasks.jsonl", jsonl(t, tasks))
	// One thread: answers come back in submit order.
	r := runWith(t, "", keyEnv, append([]string{"batch", in, "--order", "longest-first", "--store", "memory", "--api-url", base, "--threads", "1"}, fastQueue...)...)
	if r.code != 0 {
		t.Fatalf("batch = %+v", r)
	}
	got := parseResults(t, r.stdout)
	if len(got) != len(tasks) {
		t.Fatalf("%d results for %d tasks:\n%s", len(got), len(tasks), r.stdout)
	}
	var bySubmit []captchaq.Result
	for _, res := range got {
		if res.Status != captchaq.StatusSolved {
			t.Errorf("result %+v; want solved", res)
		}
		bySubmit = append(bySubmit, res)
	}
	slices.SortFunc(bySubmit, func(a, b captchaq.Result) int { return a.SubmittedAt.Compare(b.SubmittedAt) })
	// reCAPTCHA first, then both Turnstiles (in either order), then both
	// images (in either order).
	var classes []string
	for _, res := range bySubmit {
		classes = append(classes, res.ID[:2])
	}
	if want := []string{"rc", "ts", "ts", "i0", "i1"}; !slices.Equal(classes[:3], want[:3]) || classes[3] != "i0" && classes[3] != "i1" || classes[4] == classes[3] {
		t.Errorf("submit order %v; want rc, the Turnstiles, then the images", classes)
	}

	bad := runWith(t, "", keyEnv, "batch", in, "--order", "shortest", "--store", "memory", "--api-url", base)
	if bad.code != 2 || !strings.Contains(bad.stderr, `--order "shortest": use input or longest-first`) {
		t.Errorf("bad --order = %+v", bad)
	}
}

// TestBatchLongestFirstExampleFile: on examples/tasks.jsonl, longest-first
// orders by solve time within each priority: priority still comes first.
func TestBatchLongestFirstExampleFile(t *testing.T) {
	t.Parallel()
	_, base := startFastSim(t, sim.Config{Threads: 1})
	in := filepath.Join("..", "..", "examples", "tasks.jsonl")
	r := runWith(t, "", keyEnv, append([]string{"batch", in, "--order", "longest-first", "--store", "memory", "--api-url", base, "--threads", "1"}, fastQueue...)...)
	if r.code != exitTasksFailed { // the file's last line is an hCaptcha task, refused
		t.Fatalf("batch = %+v", r)
	}
	var solved []captchaq.Result
	for _, res := range parseResults(t, r.stdout) {
		if res.Status == captchaq.StatusSolved {
			solved = append(solved, res)
		}
	}
	slices.SortFunc(solved, func(a, b captchaq.Result) int { return a.SubmittedAt.Compare(b.SubmittedAt) })
	tasks := map[string]captchaq.Task{}
	raw, err := os.ReadFile(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		task, err := captchaq.ParseTask([]byte(line))
		if err != nil {
			t.Fatal(err)
		}
		tasks[task.ID] = task
	}
	if len(solved) != len(tasks)-1 {
		t.Fatalf("%d solved, want %d", len(solved), len(tasks)-1)
	}
	priority := func(task captchaq.Task) int {
		if task.Priority == 0 {
			return captchaq.PriorityDefault
		}
		return task.Priority
	}
	var order []string
	for i, res := range solved {
		order = append(order, res.ID)
		if i == 0 {
			continue
		}
		prev, cur := tasks[solved[i-1].ID], tasks[res.ID]
		if pp, cp := priority(prev), priority(cur); pp > cp || pp == cp && prev.ExpectedSolveTime() < cur.ExpectedSolveTime() {
			t.Errorf("%s (priority %d, %v) submitted before %s (priority %d, %v); want priority first, then the longest",
				prev.ID, pp, prev.ExpectedSolveTime(), cur.ID, cp, cur.ExpectedSolveTime())
		}
	}
	// Within priority 5, the reCAPTCHAs before the shorter GeeTest.
	if i, j := slices.Index(order, "signup-recaptcha-1"), slices.Index(order, "monitor-geetest-1"); i < 0 || j < i {
		t.Errorf("submit order %v; want the reCAPTCHAs before the GeeTest", order)
	}
}
