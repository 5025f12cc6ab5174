package sim_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq/sim"
)

// A simulator started again on its StateFile answers the ids the first one
// gave out, when they were due, holds their threads until then, and counts
// the same task submitted again as a duplicate.
func TestStateFileResume(t *testing.T) {
	t.Parallel()
	clock := newManualClock()
	state := filepath.Join(t.TempDir(), "sim-state.jsonl")
	cfg := sim.Config{Threads: 3, Latency: tenSeconds(), Now: clock.Now, StateFile: state, ResultTTL: time.Minute}
	first := setup(t, cfg)
	a := first.submit(t, recaptcha("pageurl", "https://shop.example/a"))
	b := first.submit(t, recaptcha("pageurl", "https://shop.example/b"))
	clock.Advance(4 * time.Second)
	// The process dies: nothing of it is closed or flushed, its file is all
	// the next one has.
	data, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "\n"); n != 2 {
		t.Fatalf("state file has %d lines, want 2:\n%s", n, data)
	}

	second := setup(t, cfg)
	if st := second.srv.Stats(); st.Accepted != 0 || st.ThreadsInUse != 2 || st.TasksKept != 2 {
		t.Fatalf("after the restart: accepted %d, threads in use %d, tasks kept %d; want 0, 2, 2", st.Accepted, st.ThreadsInUse, st.TasksKept)
	}
	for _, id := range []string{a, b} {
		if got := second.poll(t, id); got.str(t) != "CAPCHA_NOT_READY" {
			t.Fatalf("poll %s before its due time: %s", id, got.Request)
		}
	}
	// One thread is free: the plan's three threads hold the two old tasks.
	c := second.submit(t, recaptcha("pageurl", "https://shop.example/c"))
	if got := decode(t, second.post(t, "/in.php", recaptcha("pageurl", "https://shop.example/d"))); got.str(t) != "ERROR_NO_SLOT_AVAILABLE" {
		t.Fatalf("a fourth task on three threads: %s", got.Request)
	}
	clock.Advance(6 * time.Second) // 10 s after a and b were accepted
	for _, id := range []string{a, b} {
		if got := second.poll(t, id); got.Status != 1 {
			t.Fatalf("poll %s at its due time: %s %s", id, got.Request, got.ErrorText)
		}
	}
	if got := second.poll(t, c); got.str(t) != "CAPCHA_NOT_READY" {
		t.Fatalf("poll %s, accepted 6 s ago: %s", c, got.Request)
	}
	if ids := map[string]bool{a: true, b: true, c: true}; len(ids) != 3 {
		t.Fatalf("ids %s %s %s repeat", a, b, c)
	}
	// The same task as a, submitted again: a duplicate, a second payment.
	second.submit(t, recaptcha("pageurl", "https://shop.example/a"))
	if st := second.srv.Stats(); st.Accepted != 2 || st.Duplicates != 1 {
		t.Fatalf("accepted %d duplicates %d, want 2 and 1", st.Accepted, st.Duplicates)
	}

	// A third start a minute after the solves: a and b are forgotten, as
	// they would have been, and dropped from the file.
	clock.Advance(time.Minute)
	third := setup(t, cfg)
	if got := third.poll(t, a); got.str(t) != "ERROR_WRONG_CAPTCHA_ID" {
		t.Fatalf("poll %s after its TTL: %s", a, got.Request)
	}
	if got := third.poll(t, c); got.Status != 1 {
		t.Fatalf("poll %s, due 4 s into the TTL: %s", c, got.Request)
	}
	data, _ = os.ReadFile(state)
	if n := strings.Count(string(data), "\n"); n != 2 || strings.Contains(string(data), `"id":`+a+`,`) {
		t.Fatalf("state file after the third start:\n%s", data)
	}
}

// A line cut short by a kill mid-write (its submit was never answered) is
// dropped; a file that is not a state file is refused, and kept.
func TestStateFileDamage(t *testing.T) {
	t.Parallel()
	clock := newManualClock()
	dir := t.TempDir()
	state := filepath.Join(dir, "state.jsonl")
	cfg := sim.Config{Threads: 3, Latency: tenSeconds(), Now: clock.Now, StateFile: state}
	first := setup(t, cfg)
	a := first.submit(t, recaptcha())
	f, err := os.OpenFile(state, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"id":12345,"kind":"recap`)
	f.Close()
	second := setup(t, cfg)
	if got := second.poll(t, a); got.str(t) != "CAPCHA_NOT_READY" {
		t.Fatalf("poll %s: %s", a, got.Request)
	}
	if st := second.srv.Stats(); st.TasksKept != 1 {
		t.Fatalf("tasks kept %d, want 1", st.TasksKept)
	}

	other := filepath.Join(dir, "notes.txt")
	os.WriteFile(other, []byte("shopping list\nmilk\n"), 0o600)
	if _, err := sim.New(sim.Config{StateFile: other}); err == nil || !strings.Contains(err.Error(), "not a simulator's state file") {
		t.Fatalf("New on a foreign file: %v", err)
	}
	if data, _ := os.ReadFile(other); string(data) != "shopping list\nmilk\n" {
		t.Fatalf("the foreign file was changed: %q", data)
	}
}
