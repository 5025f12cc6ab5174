package main

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	_ "modernc.org/sqlite"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/sim"
	"github.com/captchaq/captchaq/store/sqlite"
)

// otherTasks are tasks with the same ids as turnstileTasks(prefix, n) but
// another site.
func otherTasks(prefix string, n int) []captchaq.Task {
	tasks := turnstileTasks(prefix, n)
	for i := range tasks {
		tasks[i].Params = map[string]string{"sitekey": "0x4AAAAAAAOTHER", "pageurl": "https://other.example/" + tasks[i].ID}
	}
	return tasks
}

func mustStoreName(t *testing.T, in string) string {
	t.Helper()
	name, err := batchStoreName(in, "", false)
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// Not parallel: it sets XDG_DATA_HOME, where the default stores live.
func TestBatchDefaultStoreIsPerInputFile(t *testing.T) {
	data := t.TempDir()
	t.Setenv("XDG_DATA_HOME", data)
	s, base := startFastSim(t, sim.Config{Threads: 10})
	a, b := turnstileTasks("job", 3), otherTasks("job", 3)
	inA := writeFile(t, "tasks.jsonl", jsonl(t, a))
	inB := writeFile(t, "tasks.jsonl", jsonl(t, b)) // same name, other directory
	out := filepath.Join(t.TempDir(), "out.jsonl")
	batch := func(in string, extra ...string) cliRun {
		return runWith(t, "", keyEnv, append(append([]string{"batch", in, "--out", out, "--api-url", base}, fastQueue...), extra...)...)
	}
	if r := batch(inA); r.code != 0 {
		t.Fatalf("batch A = %+v", r)
	}
	gotA := readResults(t, out)
	if r := batch(inB); r.code != 0 || strings.Contains(r.stderr, "from the store") {
		t.Fatalf("batch B = %+v", r)
	}
	gotB := readAllSolved(t, out, b)
	for id, r := range gotB {
		if r.Token == gotA[id].Token {
			t.Errorf("%s: file B got file A's token", id)
		}
	}
	for _, task := range append(a, b...) {
		if n := s.SubmissionsOf(fingerprintOf(task)); n != 1 {
			t.Errorf("%s (%s) submitted %d times, want 1", task.ID, task.Params["pageurl"], n)
		}
	}
	r := batch(inA)
	if r.code != 0 || !strings.Contains(r.stderr, "3 from the store") {
		t.Fatalf("rerun of A = %+v", r)
	}
	// results reads the store batch used for a file, while a queue holds it.
	held, err := sqlite.Open(t.Context(), filepath.Join(data, "captchaq", mustStoreName(t, inA)), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	rr := runWith(t, "", keyEnv, "results", inA)
	held.Close()
	if rr.code != 0 {
		t.Fatalf("results %s = %+v", inA, rr)
	}
	if diff := cmp.Diff(tokens(gotA), tokens(parseResults(t, rr.stdout))); diff != "" {
		t.Errorf("results of A (-batch +results):\n%s", diff)
	}
	if rr := runWith(t, "", keyEnv, "results"); rr.code != 2 || !strings.Contains(rr.stderr, mustStoreName(t, inA)) {
		t.Errorf("results with no store named = %+v, want exit 2 listing the stores", rr)
	}
	typo := filepath.Join(t.TempDir(), "typo.db")
	if rr := runWith(t, "", nil, "results", "--store", typo); rr.code != 2 || rr.stderr != "captchaq results: --store "+typo+": no such file: check the path\n" {
		t.Errorf("results --store typo = %+v", rr)
	}
	if rr := runWith(t, "", nil, "dlq", "list", "--store", typo); rr.code != 2 {
		t.Errorf("dlq list --store typo = %+v", rr)
	}
	// A task file that is not there, and one no batch ran on: exit 2,
	// naming what the user gave, not a --store they never wrote.
	if rr := runWith(t, "", nil, "results", "nosuch.jsonl"); rr.code != 2 || rr.stderr != "captchaq results: nosuch.jsonl: no such task file: name the file `captchaq batch` ran on\n" {
		t.Errorf("results nosuch.jsonl = %+v", rr)
	}
	fresh := writeFile(t, "fresh.jsonl", jsonl(t, turnstileTasks("fresh", 1)))
	if rr := runWith(t, "", nil, "results", fresh); rr.code != 2 || !strings.Contains(rr.stderr, "captchaq results: no batch of "+fresh+" on the built-in simulator has stored results on this machine (its store would be ") ||
		strings.Contains(rr.stderr, "--store: ") {
		t.Errorf("results of a file no batch ran on = %+v", rr)
	}
	if _, err := os.Stat(typo); err == nil {
		t.Error("a read-only command created the store")
	}
	if _, err := os.Stat(typo + ".lock"); err == nil {
		t.Error("a read-only command created a lock file")
	}
	ents, _ := os.ReadDir(filepath.Join(data, "captchaq"))
	var stores []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".db") {
			stores = append(stores, e.Name())
		}
	}
	if len(stores) != 2 || !strings.HasPrefix(stores[0], "batch-tasks.jsonl-") {
		t.Errorf("default stores %v, want one batch-tasks.jsonl-HASH.db for each file", stores)
	}
}

func TestBatchSharedStoreRefusesOtherTaskUnderKnownID(t *testing.T) {
	t.Parallel()
	s, base := startFastSim(t, sim.Config{Threads: 10})
	a, b := turnstileTasks("job", 3), otherTasks("job", 3)
	inA, inB := writeFile(t, "a.jsonl", jsonl(t, a)), writeFile(t, "b.jsonl", jsonl(t, b))
	db := filepath.Join(t.TempDir(), "shared.db")
	out := filepath.Join(t.TempDir(), "out.jsonl")
	batch := func(in string) cliRun {
		return runWith(t, "", keyEnv, append([]string{"batch", in, "--out", out, "--store", db, "--api-url", base}, fastQueue...)...)
	}
	if r := batch(inA); r.code != 0 {
		t.Fatalf("batch A = %+v", r)
	}
	gotA := readResults(t, out)
	r := batch(inB)
	if r.code != exitTasksFailed || !strings.Contains(r.stderr, "3 refused: their ids name other tasks (ID_CONFLICT)") ||
		!strings.HasSuffix(r.stderr, "\ncaptchaq batch: 3 tasks refused (ID_CONFLICT): their ids name other tasks an earlier run left in "+db+"; give them ids of their own, or use a store of their own (--store PATH)\n") {
		t.Fatalf("batch B on A's store = %+v", r)
	}
	for id, res := range readResults(t, out) {
		if res.Status != captchaq.StatusFailed || res.ErrorCode != captchaq.CodeIDConflict || res.Token != "" ||
			!strings.Contains(res.Error, `id "`+id+`" already names another task (params.pageurl differs, params.sitekey differs)`) {
			t.Errorf("B's %s = %+v", id, res)
		}
	}
	for _, task := range b {
		if n := s.SubmissionsOf(fingerprintOf(task)); n != 0 {
			t.Errorf("refused %s reached the provider %d times", task.ID, n)
		}
	}

	// A's tokens expire: a rerun solves them again and says so.
	sdb, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sdb.Exec(`UPDATE tasks SET result_expires_at = '2020-01-01T00:00:00.000000000Z' WHERE status = 'solved'`); err != nil {
		t.Fatal(err)
	}
	sdb.Close()
	rr := runWith(t, "", nil, "results", "--store", db)
	if n := strings.Count(rr.stdout, `"expired":true`); rr.code != 0 || n != 3 {
		t.Errorf("results after expiry: %d marked expired, want 3: %+v", n, rr)
	}
	r = batch(inA)
	if r.code != 0 || !strings.Contains(r.stderr, "3 solved again: their tokens had expired") {
		t.Fatalf("rerun after expiry = %+v", r)
	}
	again := readAllSolved(t, out, a)
	for id, res := range again {
		if res.Token == gotA[id].Token {
			t.Errorf("%s: the expired token was handed out again", id)
		}
	}
	for _, task := range a {
		if n := s.SubmissionsOf(fingerprintOf(task)); n != 2 {
			t.Errorf("%s submitted %d times, want 2", task.ID, n)
		}
	}
}

func TestServeRefusesABatchStore(t *testing.T) {
	t.Parallel()
	_, base := startFastSim(t, sim.Config{Threads: 5})
	db := filepath.Join(t.TempDir(), "q.db")
	in := writeFile(t, "a.jsonl", jsonl(t, turnstileTasks("own", 2)))
	if r := runWith(t, "", keyEnv, append([]string{"batch", in, "--store", db, "--api-url", base}, fastQueue...)...); r.code != 0 {
		t.Fatalf("batch = %+v", r)
	}
	clients := writeFile(t, "clients.json", `[{"name":"qa","key":"qa-key-123456"}]`)
	r := runWith(t, "", map[string]string{"CAPTCHAAI_KEY": batchKey, "CAPTCHAAI_URL": base},
		"serve", "--clients", clients, "--store", db, "--listen", "127.0.0.1:0")
	if r.code == 0 || !strings.Contains(r.stderr, "holds the tasks of batch, not of serve") || !strings.Contains(r.stderr, "--store PATH") {
		t.Fatalf("serve on a batch store = %+v", r)
	}
}

// An id names one task of a file: a later line with it is refused as a
// repeat (exit 2, bad input), naming the id and the first line, and the
// first line's task is solved; the output holds one result line per id.
// Lines are named by their numbers, a line with no id too, and their
// messages come in line order though the lines are checked concurrently
// (line 3 is refused by validation, line 4 already by the reader). A rerun
// on the same store refuses the repeat the same way: it is no id conflict
// with the store, and no --store hint is given.
func TestBatchRefusesAnIDItsFileRepeats(t *testing.T) {
	t.Parallel()
	s, base := startFastSim(t, sim.Config{Threads: 5})
	first := captchaq.Task{ID: "img-1", Method: "base64", Params: map[string]string{"body": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="}}
	repeat := captchaq.Task{ID: "img-1", Method: "base64", Params: map[string]string{"body": "R0lGODlhAQABAAAAACw="}}
	ts := turnstileTasks("ts", 1)[0]
	in := writeFile(t, "tasks.jsonl", jsonl(t, []captchaq.Task{first, ts})+
		`{"id":"nourl","method":"turnstile","params":{"sitekey":"0x4AAAAAAAB3x"}}`+"\n"+
		`{"id":`+"\n"+
		jsonl(t, []captchaq.Task{repeat}))
	db := filepath.Join(t.TempDir(), "q.db")
	out := filepath.Join(t.TempDir(), "out.jsonl")
	wantLines := []string{
		`line 3: captchaq: task "nourl": params.pageurl: required for turnstile; the URL of the page that shows the captcha`,
		`line 4: task: invalid JSON at byte 6: unexpected end of JSON input`,
		`line 5: id "img-1" is already on line 1: give this task an id of its own, or drop the line`,
	}
	const wantErr = "captchaq batch: 1 lines refused: their ids are on earlier lines of the file (see above); an id names one task of a file"
	for run, stored := range []string{"", "; 2 from the store"} {
		r := runWith(t, "", keyEnv, append([]string{"batch", in, "--out", out, "--store", db, "--api-url", base, "--progress=false"}, fastQueue...)...)
		lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
		if r.code != exitUsage || len(lines) != 5 {
			t.Fatalf("run %d: exit %d, want %d; stderr:\n%s", run, r.code, exitUsage, r.stderr)
		}
		if diff := cmp.Diff(wantLines, lines[:3]); diff != "" {
			t.Errorf("run %d: stderr's lines (-want +got):\n%s", run, diff)
		}
		if sum := lines[3]; !strings.HasPrefix(sum, "captchaq batch: 2 solved, 2 failed (2 invalid lines) of 4 in ") ||
			!strings.Contains(sum, "; 1 lines refused: their ids are on earlier lines"+stored) {
			t.Errorf("run %d: summary %q", run, sum)
		}
		if lines[4] != wantErr {
			t.Errorf("run %d: error %q, want %q", run, lines[4], wantErr)
		}
		got := readResults(t, out) // one line per id
		type outcome struct{ Status, Error, Code string }
		have := map[string]outcome{}
		for id, res := range got {
			have[id] = outcome{string(res.Status), res.Error, res.ErrorCode}
		}
		want := map[string]outcome{
			"":      {"failed", "line 4: task: invalid JSON at byte 6: unexpected end of JSON input", captchaq.CodeInvalidTask},
			"img-1": {"solved", "", ""},
			"nourl": {"failed", wantLines[0], captchaq.CodeInvalidTask},
			"ts-0":  {"solved", "", ""},
		}
		if diff := cmp.Diff(want, have); diff != "" {
			t.Errorf("run %d: results (-want +got):\n%s", run, diff)
		}
	}
	if n, m := s.SubmissionsOf(fingerprintOf(first)), s.SubmissionsOf(fingerprintOf(repeat)); n != 1 || m != 0 {
		t.Errorf("line 1's task submitted %d times, line 5's %d; want 1 and 0", n, m)
	}
}

// The lines of a batch are checked concurrently (parsed and their ids
// checked by the reader, validated by the queue's intake, many chunks at
// once), and their messages still come in line order.
func TestBatchReportsLinesInOrder(t *testing.T) {
	t.Parallel()
	_, base := startFastSim(t, sim.Config{Threads: 5})
	const lines = 3000
	var in strings.Builder
	var want []string
	for n := 1; n <= lines; n++ {
		switch n % 3 {
		case 1:
			in.WriteString(`{"id":` + "\n")
			want = append(want, fmt.Sprintf("line %d: task: invalid JSON at byte 6: unexpected end of JSON input", n))
		case 2:
			fmt.Fprintf(&in, `{"id":"nourl-%d","method":"turnstile","params":{"sitekey":"0x4AAAAAAAB3x"}}`+"\n", n)
			want = append(want, fmt.Sprintf(`line %d: captchaq: task "nourl-%d": params.pageurl: required for turnstile; the URL of the page that shows the captcha`, n, n))
		case 0:
			fmt.Fprintf(&in, `{"id":"nourl-%d","method":"turnstile","params":{"sitekey":"0x4AAAAAAAB3x"}}`+"\n", n-1)
			want = append(want, fmt.Sprintf(`line %d: id "nourl-%d" is already on line %d: give this task an id of its own, or drop the line`, n, n-1, n-1))
		}
	}
	r := runWith(t, in.String(), keyEnv, append([]string{"batch", "-", "--store", "memory", "--api-url", base, "--progress=false"}, fastQueue...)...)
	got := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	if r.code != exitUsage || len(got) != lines+2 {
		t.Fatalf("exit %d, want %d; %d stderr lines, want %d", r.code, exitUsage, len(got), lines+2)
	}
	if diff := cmp.Diff(want, got[:lines]); diff != "" {
		t.Errorf("stderr's lines (-want +got):\n%s", diff)
	}
	if got[lines+1] != "captchaq batch: 1000 lines refused: their ids are on earlier lines of the file (see above); an id names one task of a file" {
		t.Errorf("error %q", got[lines+1])
	}
}
