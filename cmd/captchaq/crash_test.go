package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/sim"
	"github.com/captchaq/captchaq/store/sqlite"
)

// The crash tests run `captchaq batch` as a child process, kill it with
// SIGKILL at chosen moments, run the same command again and check from the
// simulator's counters and the store that no task was lost and none that
// had a provider id was submitted again.

// parallelTests is how many parallel tests run at once unless -parallel
// is given: at least GOMAXPROCS.
const parallelTests = 4

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

func TestMain(m *testing.M) {
	// The tests here mostly wait: for child processes, simulators, the
	// broker and the test locks. go test runs GOMAXPROCS parallel tests
	// at once (two on a two-core machine), so two of them waiting for
	// the broker lock held up the whole package; unless -parallel says
	// otherwise, parallelTests run at once.
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		_ = flag.Set("test.parallel", strconv.Itoa(max(parallelTests, runtime.GOMAXPROCS(0))))
	}
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// captchaqBinary builds the command once per test binary.
func captchaqBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			goTool = "/usr/local/go/bin/go"
		}
		if binDir, binErr = os.MkdirTemp("", "captchaq-crash-"); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "captchaq")
		out, err := exec.Command(goTool, "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

const (
	crashTasks   = 200
	crashThreads = 20
)

// crashRig is one batch on disk against one simulator that outlives every
// child process.
type crashRig struct {
	t                   *testing.T
	sim                 *sim.Server
	base                string
	tasks               []captchaq.Task
	in, out, db, binary string

	// allowance[id] counts the kills at which the store held no provider
	// id for the task: only a submit answered but not yet checkpointed at
	// such a moment may be sent again, as the protocol cannot say which
	// id a killed request got.
	allowance map[string]int
	// pinned[id] is the task's submission count when the store first held
	// its provider id (or result); it must never grow after that.
	pinned map[string]int
}

func newCrashRig(t *testing.T, prefix string) *crashRig {
	t.Helper()
	// Turnstile at scale 0.04: solves take 160–600 ms, so a run of 200
	// tasks on 20 threads lasts a few seconds.
	s, base := startFastSim(t, sim.Config{Threads: crashThreads, LatencyScale: 0.04, Seed: 7})
	dir := t.TempDir()
	r := &crashRig{
		t: t, sim: s, base: base, tasks: turnstileTasks(prefix, crashTasks),
		out: filepath.Join(dir, "out.jsonl"), db: filepath.Join(dir, "q.db"),
		binary: captchaqBinary(t), allowance: map[string]int{}, pinned: map[string]int{},
	}
	r.in = filepath.Join(dir, "tasks.jsonl")
	if err := os.WriteFile(r.in, []byte(jsonl(t, r.tasks)), 0o600); err != nil {
		t.Fatal(err)
	}
	return r
}

// start runs the batch command as a child process.
func (r *crashRig) start() (*exec.Cmd, *bytes.Buffer, <-chan error) {
	r.t.Helper()
	cmd := exec.Command(r.binary, "batch", r.in, "--out", r.out, "--store", r.db,
		"--api-url", r.base, "--threads", fmt.Sprint(crashThreads), "--poll-interval", "50ms")
	cmd.Env = append(os.Environ(), "CAPTCHAAI_KEY="+batchKey)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	return cmd, &stderr, exited
}

// killWhen runs the command and SIGKILLs it as soon as cond holds; it fails
// the test if the run ends first.
func (r *crashRig) killWhen(what string, cond func(sim.Stats, int) bool) {
	r.t.Helper()
	// The child truncates it too, but maybe after the first look.
	if err := os.Remove(r.out); err != nil && !os.IsNotExist(err) {
		r.t.Fatal(err)
	}
	cmd, stderr, exited := r.start()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			r.t.Fatalf("%s: the run ended (%v) before the kill point; stderr:\n%s", what, err, stderr)
		case <-tick.C:
		}
		st := r.sim.Stats()
		if !cond(st, r.outLines()) {
			continue
		}
		if err := syscall.Kill(cmd.Process.Pid, syscall.SIGKILL); err != nil {
			r.t.Fatal(err)
		}
		err := <-exited
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			r.t.Fatalf("%s: the run ended with %v, not by SIGKILL; stderr:\n%s", what, err, stderr)
		}
		after := r.sim.Stats()
		r.t.Logf("%s: killed at accepted %d fetched %d, %d result lines", what, after.Accepted, after.Fetched, r.outLines())
		// Even a killed run writes each result at most once; its last
		// line may be cut short.
		if b, err := os.ReadFile(r.out); err == nil {
			parseResults(r.t, string(b[:bytes.LastIndexByte(b, '\n')+1]))
		}
		r.inspect(what)
		return
	}
}

// inspect reads the store the killed process left: tasks with a provider
// id or a result are pinned at their submission count; the others may have
// had a submit answered but not yet stored.
func (r *crashRig) inspect(what string) {
	r.t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, r.db, sqlite.Config{})
	if err != nil {
		r.t.Fatalf("%s: opening the store after the kill: %v", what, err)
	}
	defer st.Close()
	held := map[string]bool{}
	err = st.Pending(ctx, func(rec captchaq.Record) error {
		if rec.Status == captchaq.StatusInFlight && rec.CaptchaID != "" {
			held[rec.Task.ID] = true
		}
		return nil
	})
	if err != nil {
		r.t.Fatal(err)
	}
	err = st.Results(ctx, func(res captchaq.Result) error {
		held[res.ID] = true
		return nil
	})
	if err != nil {
		r.t.Fatal(err)
	}
	for _, task := range r.tasks {
		n := r.sim.SubmissionsOf(fingerprintOf(task))
		if !held[task.ID] {
			r.allowance[task.ID]++
			continue
		}
		if _, ok := r.pinned[task.ID]; !ok {
			r.pinned[task.ID] = n
		}
	}
	r.t.Logf("%s: the store held a provider id or result for %d tasks", what, len(held))
}

// finish runs the command to completion and checks the whole outcome.
func (r *crashRig) finish() {
	r.t.Helper()
	began := time.Now()
	cmd, stderr, exited := r.start()
	if err := <-exited; err != nil {
		r.t.Fatalf("final run: %v (exit %d); stderr:\n%s", err, cmd.ProcessState.ExitCode(), stderr)
	}
	// stderr is a pipe here: the progress lines of a run longer than 5 s
	// (no retries: nothing was lost), then the summary line.
	lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
	progressLine := regexp.MustCompile(fmt.Sprintf(`^captchaq batch: \d+ of %d done, threads \d+/%d, [^;]*$`, crashTasks, crashThreads))
	for _, l := range lines[:len(lines)-1] {
		if !progressLine.MatchString(l) {
			r.t.Errorf("final stderr: %q is not a progress line", l)
		}
	}
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, fmt.Sprintf("captchaq batch: %d solved, 0 failed (0 invalid lines) of %d in ", crashTasks, crashTasks)) {
		r.t.Errorf("final stderr should end with the summary line: %q", stderr.String())
	}
	got := readAllSolved(r.t, r.out, r.tasks)

	// What --out says is what the store keeps.
	stored := runWith(r.t, "", nil, "results", "--store", r.db)
	if stored.code != 0 {
		r.t.Fatalf("results = %+v", stored)
	}
	storedTokens := tokens(parseResults(r.t, stored.stdout))
	for id, res := range got {
		if storedTokens[id] != res.Token {
			r.t.Errorf("%s: out token differs from the stored one", id)
		}
	}

	extra := 0
	for _, task := range r.tasks {
		n := r.sim.SubmissionsOf(fingerprintOf(task))
		if p, ok := r.pinned[task.ID]; ok && n != p {
			r.t.Errorf("%s had a provider id or result in the store at %d submissions, and was submitted %d times in all", task.ID, p, n)
		}
		if n < 1 || n > 1+r.allowance[task.ID] {
			r.t.Errorf("%s submitted %d times; want 1, or at most %d more for kills before its id was stored", task.ID, n, r.allowance[task.ID])
		}
		extra += n - 1
	}
	st := r.sim.Stats()
	if st.Duplicates != int64(extra) || st.Accepted != int64(crashTasks+extra) {
		r.t.Errorf("sim accepted %d duplicates %d; want %d and %d", st.Accepted, st.Duplicates, crashTasks+extra, extra)
	}
	r.t.Logf("final run took %s: %s", time.Since(began).Round(time.Millisecond), strings.TrimSpace(stderr.String()))
	r.t.Logf("final: %d tasks solved once each; %d second submissions of tasks killed between the provider's answer and the checkpoint", crashTasks, extra)

	// A rerun of the finished batch sends nothing and writes every result again.
	before := r.sim.Stats()
	cmd, stderr, exited = r.start()
	if err := <-exited; err != nil {
		r.t.Fatalf("rerun: %v; stderr:\n%s", err, stderr)
	}
	if diff := mapDiff(tokens(got), tokens(readResults(r.t, r.out))); diff != "" {
		r.t.Errorf("rerun results differ: %s", diff)
	}
	if after := r.sim.Stats(); after.Calls.Submit != before.Calls.Submit || after.Accepted != before.Accepted {
		r.t.Errorf("rerun of a finished batch submitted: %d→%d submit calls", before.Calls.Submit, after.Calls.Submit)
	}
	if !strings.Contains(stderr.String(), fmt.Sprintf("%d from the store", crashTasks)) || strings.Contains(stderr.String(), "tasks/min") {
		r.t.Errorf("rerun summary: %q", stderr)
	}
	_ = cmd
}

func mapDiff(a, b map[string]string) string {
	var d []string
	for k, v := range a {
		if b[k] != v {
			d = append(d, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			d = append(d, k)
		}
	}
	return strings.Join(d, ", ")
}

// outLines counts complete result lines in the output file so far.
func (r *crashRig) outLines() int {
	b, err := os.ReadFile(r.out)
	if err != nil {
		return 0
	}
	return bytes.Count(b, []byte("\n"))
}

func TestBatchSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	type kill struct {
		what string
		// cond sees the simulator's stats and the output's line count;
		// base is the stats when the run started.
		cond func(base, now sim.Stats, lines int) bool
	}
	atStart := kill{"at start", func(_, _ sim.Stats, _ int) bool { return true }}
	midSubmit := kill{"mid-submit", func(base, now sim.Stats, _ int) bool { return now.Accepted > base.Accepted }}
	midPoll := kill{"mid-poll", func(base, now sim.Stats, _ int) bool {
		return now.Accepted >= base.Accepted+crashThreads
	}}
	midWrite := func(n int) kill {
		return kill{fmt.Sprintf("mid-write (%d lines)", n), func(_, _ sim.Stats, lines int) bool { return lines >= n && lines < crashTasks }}
	}
	for _, c := range []struct {
		name  string
		kills []kill
	}{
		{"at start", []kill{atStart, atStart}},
		{"mid-submit", []kill{midSubmit, midSubmit}},
		{"mid-poll", []kill{midPoll, midPoll}},
		{"mid-write", []kill{midWrite(40), midWrite(120)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := newCrashRig(t, strings.ReplaceAll(c.name, " ", "-"))
			for i, k := range c.kills {
				base := r.sim.Stats()
				r.killWhen(fmt.Sprintf("kill %d %s", i+1, k.what), func(now sim.Stats, lines int) bool { return k.cond(base, now, lines) })
			}
			r.finish()
		})
	}
}
