package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/store/sqlite"
)

// The default setup (no key, no flags: the built-in simulator and the
// store in the data directory), killed with SIGKILL while tasks are at the
// simulator, then run again: the rerun polls the ids the store kept at the
// simulator started again on its state file, instead of paying for those
// tasks a second time.
func TestBatchKill9OnTheBuiltInSimulator(t *testing.T) {
	t.Parallel()
	tasks := turnstileTasks("resume", 24)
	in := writeFile(t, "tasks.jsonl", jsonl(t, tasks))
	out := filepath.Join(t.TempDir(), "results.jsonl")
	data := t.TempDir()
	vars := map[string]string{"XDG_DATA_HOME": data}

	first := startBinary(t, vars, "", "batch", in, "--out", out)
	var journal string
	testbound.Until(t, "20 tasks accepted by the built-in simulator", func() bool {
		m, _ := filepath.Glob(filepath.Join(data, "captchaq", "batch-sim-*.db.sim"))
		if len(m) != 1 {
			return false
		}
		journal = m[0]
		return len(acceptedBySim(t, journal)) >= 20
	})
	if err := syscall.Kill(first.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	first.wait(t)

	// What the store held at the kill: a task with a provider id must not
	// be submitted again; one without may have had a submit answered in the
	// moment before its id was committed (the protocol cannot find that id
	// again), so it may be sent once more.
	held := map[string]bool{}
	rd, err := sqlite.OpenReader(context.Background(), strings.TrimSuffix(journal, ".sim"))
	if err != nil {
		t.Fatal(err)
	}
	err = rd.Pending(context.Background(), func(rec captchaq.Record) error {
		if rec.CaptchaID != "" {
			held[rec.Task.ID] = true
		}
		return nil
	})
	rd.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(held) < 10 {
		t.Fatalf("the store held provider ids for %d tasks at the kill, want most of the 20 accepted", len(held))
	}

	second := startBinary(t, vars, "", "batch", in, "--out", out)
	if code := second.wait(t); code != 0 {
		t.Fatalf("the rerun exited %d: %s", code, second.errText())
	}
	if e := second.errText(); strings.Contains(e, "retried") || strings.Contains(e, "ERROR_WRONG_CAPTCHA_ID") ||
		!strings.Contains(e, "24 solved, 0 failed") {
		t.Errorf("the rerun's stderr:\n%s", e)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	wantAllSolved(t, parseResults(t, string(b)), tasks)

	accepted := acceptedBySim(t, journal)
	again := 0
	for _, task := range tasks {
		n := accepted[fingerprintOf(task)]
		switch {
		case held[task.ID] && n != 1:
			t.Errorf("%s had its provider id stored at the kill and was submitted %d times", task.ID, n)
		case n < 1 || n > 2:
			t.Errorf("%s was submitted %d times", task.ID, n)
		case n == 2:
			again++
		}
	}
	t.Logf("%d tasks held an id at the kill; %d submitted again (answered in the moment before their id was stored)", len(held), again)
}

// acceptedBySim counts the built-in simulator's accepts by task fingerprint
// from its state file.
func acceptedBySim(t *testing.T, path string) map[string]int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	n := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e struct {
			Fingerprint string `json:"fingerprint"`
		}
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			n[e.Fingerprint]++
		}
	}
	return n
}

// The README's first command, `captchaq batch examples/tasks.jsonl --out
// results.jsonl` with no key (the built-in simulator, the store in the data
// directory), killed with SIGKILL once every valid task is at the simulator
// and before the slow ones are answered, then run again as the README
// says: no task is paid for twice (the simulator accepted each task's
// in.php exactly once over both runs), and the rerun's summary says what
// it took over from the killed run. The moment is chosen so that no submit
// is in flight at the kill: a kill between the simulator's answer to a
// submit and the store's commit of its id may cost that one task a second
// submit (TestBatchKill9OnTheBuiltInSimulator covers that moment).
func TestReadmeFirstCommandKill9PaysNothingTwice(t *testing.T) {
	t.Parallel()
	readmeFirstCommandStopped(t, syscall.SIGKILL)
}

// The same, stopped with Ctrl-C (SIGINT): the batch exits 130 and the
// rerun pays for nothing twice either.
func TestReadmeFirstCommandCtrlCPaysNothingTwice(t *testing.T) {
	t.Parallel()
	readmeFirstCommandStopped(t, syscall.SIGINT)
}

func readmeFirstCommandStopped(t *testing.T, sig syscall.Signal) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "examples", "tasks.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "examples"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "examples", "tasks.jsonl"), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	// The valid tasks, by the simulator's fingerprint (the eight images
	// share one); the last line is the unsupported hCaptcha one.
	want := map[string]int{}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	for i, l := range lines {
		task, err := readTask([]byte(l))
		if err != nil {
			t.Fatalf("examples/tasks.jsonl line %d: %v", i+1, err)
		}
		if i == len(lines)-1 {
			if task.Method != "hcaptcha" {
				t.Fatalf("the last line of examples/tasks.jsonl is %s, want the unsupported hcaptcha one", task.Method)
			}
			continue
		}
		want[fingerprintOf(task)]++
	}
	valid := len(lines) - 1
	vars := map[string]string{"XDG_DATA_HOME": filepath.Join(dir, "data")}
	args := []string{"batch", "examples/tasks.jsonl", "--out", "results.jsonl"}

	first := startBinaryIn(t, dir, vars, "", args...)
	// The first run's exit code: -1 when a signal ended it, -2 when it
	// could not be waited for.
	exited := make(chan int, 1)
	go func() {
		var ee *exec.ExitError
		switch err := first.cmd.Wait(); {
		case err == nil:
			exited <- 0
		case errors.As(err, &ee):
			exited <- ee.ExitCode()
		default:
			exited <- -2
		}
	}()
	var journal string
	var atKill []captchaq.Record // the store's unfinished tasks at the kill
	testbound.Until(t, "every valid task at the simulator, with its id in the store, before the batch ends", func() bool {
		select {
		case code := <-exited:
			t.Fatalf("the first run ended (exit %d) before every task was at the simulator with an unfinished one left: %s", code, first.errText())
		default:
		}
		m, _ := filepath.Glob(filepath.Join(dir, "data", "captchaq", "batch-sim-*.db.sim"))
		if len(m) != 1 {
			return false
		}
		journal = m[0]
		n := 0
		for _, c := range acceptedBySim(t, journal) {
			n += c
		}
		if n < valid {
			return false
		}
		pending := pendingIn(t, strings.TrimSuffix(journal, ".sim"))
		for _, rec := range pending {
			if rec.CaptchaID == "" {
				return false // its submit was answered, its id not stored yet
			}
		}
		if len(pending) == 0 {
			t.Fatalf("the first run finished every task before the kill: %s", first.errText())
		}
		atKill = pending
		return true
	})
	if err := syscall.Kill(first.cmd.Process.Pid, sig); err != nil {
		t.Fatal(err)
	}
	code := <-exited
	switch {
	case sig == syscall.SIGKILL && code != -1:
		t.Fatalf("the first run exited %d, want killed: %s", code, first.errText())
	case sig == syscall.SIGINT && (code != exitInterrupted || !strings.Contains(first.errText(), "run the same command again to resume")):
		t.Fatalf("the first run exited %d after SIGINT, want %d and what to do: %s", code, exitInterrupted, first.errText())
	}
	// The store only gains ids and results after the check above, and the
	// process is gone: what it holds now is at least what was checked.
	after := pendingIn(t, strings.TrimSuffix(journal, ".sim"))
	if len(after) > len(atKill) {
		t.Fatalf("%d unfinished tasks after the %v, %d before", len(after), sig, len(atKill))
	}
	for _, rec := range after {
		if rec.CaptchaID == "" {
			t.Fatalf("task %s has no provider id in the store after the %v", rec.Task.ID, sig)
		}
	}

	second := startBinaryIn(t, dir, vars, "", args...)
	if code := second.wait(t); code != exitTasksFailed {
		t.Fatalf("the rerun exited %d, want %d (the hCaptcha line): %s", code, exitTasksFailed, second.errText())
	}
	e := second.errText()
	stored := valid - len(after)
	resumed := fmt.Sprintf("; %d from the store; %d resumed from an earlier run, %d of them polled by the provider ids it stored (not submitted again); %d finished in this run",
		stored, len(after), len(after), len(after))
	if !strings.Contains(e, fmt.Sprintf("captchaq batch: %d solved, 1 failed (1 invalid lines) of %d in ", valid, valid+1)) ||
		!strings.Contains(e, resumed) || strings.Contains(e, "retried") || strings.Contains(e, "ERROR_") {
		t.Errorf("the rerun's stderr:\n%s\nwant its summary to say %q", e, resumed)
	}
	b, err := os.ReadFile(filepath.Join(dir, "results.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	results := parseResults(t, string(b))
	solved := 0
	for _, r := range results {
		if r.Status == captchaq.StatusSolved && r.Token != "" {
			solved++
		}
	}
	if len(results) != valid+1 || solved != valid {
		t.Errorf("results.jsonl has %d lines, %d solved with a token; want %d and %d", len(results), solved, valid+1, valid)
	}

	// Each task's answer came from the one submit the simulator accepted
	// for it: its captcha id is in the simulator's state, on one attempt,
	// and no two tasks share one.
	simIDs := simCaptchaIDs(t, journal)
	if len(simIDs) != valid {
		t.Errorf("the simulator accepted %d submits over both runs, want %d (one per valid task)", len(simIDs), valid)
	}
	byID := map[string]string{}
	for _, r := range results {
		if r.Status != captchaq.StatusSolved {
			continue
		}
		if !simIDs[r.CaptchaID] || r.Attempts != 1 || byID[r.CaptchaID] != "" {
			t.Errorf("%s: captcha id %q (accepted by the simulator: %v, also %q's), attempts %d; want its own accepted id on attempt 1",
				r.ID, r.CaptchaID, simIDs[r.CaptchaID], byID[r.CaptchaID], r.Attempts)
		}
		byID[r.CaptchaID] = r.ID
	}
	accepted := acceptedBySim(t, journal)
	for fp, n := range want {
		if accepted[fp] != n {
			t.Errorf("the simulator accepted %d submits of the task(s) with fingerprint %s over both runs, want %d", accepted[fp], fp, n)
		}
	}
	if len(accepted) != len(want) {
		t.Errorf("the simulator accepted %d distinct tasks, want %d: %v", len(accepted), len(want), accepted)
	}
	summaryAt := strings.Index(e, fmt.Sprintf("captchaq batch: %d solved", valid))
	t.Logf("%v with %d of %d tasks at the simulator; the rerun: %s", sig, len(after), valid, e[max(summaryAt, 0):])
}

// simCaptchaIDs is the set of captcha ids the built-in simulator accepted,
// from its state file.
func simCaptchaIDs(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var e struct {
			ID json.Number `json:"id"`
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil || e.ID == "" {
			t.Fatalf("the simulator's state line %q: %v", line, err)
		}
		ids[e.ID.String()] = true
	}
	return ids
}

// pendingIn reads a store's unfinished tasks, without a lock: the queue
// may have it open.
func pendingIn(t *testing.T, path string) []captchaq.Record {
	t.Helper()
	rd, err := sqlite.OpenReader(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var recs []captchaq.Record
	if err := rd.Pending(context.Background(), func(rec captchaq.Record) error {
		recs = append(recs, rec)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return recs
}
