package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/captchaq/captchaq"
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
	waitFor(t, "20 tasks accepted by the built-in simulator", func() bool {
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
