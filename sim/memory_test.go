package sim_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/captchaq/captchaq/sim"
)

// TestMemoryIsBoundedPerTask runs 3,000 distinct Turnstile tasks, one
// every 100 ms on a manual clock, each fetched at once, and then one of
// them 2,000 times: what the server holds for them is bounded by the tasks
// it still keeps, the demo's tokens and the fingerprints of the last
// ResultTTL.
func TestMemoryIsBoundedPerTask(t *testing.T) {
	t.Parallel()
	const n, again = 3000, 2000
	clock := newManualClock()
	srv, err := sim.New(sim.Config{Threads: 10, Instant: true, Now: clock.Now, PollBan: sim.PollBan{Disabled: true},
		FetchedRetention: time.Second, ResultTTL: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	solve := func(i int) {
		v := form("key", key, "method", "turnstile", "json", "1", "sitekey", "0x4AAAAAAAB3x",
			"pageurl", fmt.Sprintf("https://shop.example/p/%d", i))
		var a answer
		if err := json.Unmarshal([]byte(direct(srv, "/in.php", v)), &a); err != nil || a.Status != 1 {
			t.Fatalf("submit %d: %s (%v)", i, a.Request, err)
		}
		var id string
		_ = json.Unmarshal(a.Request, &id)
		if got := direct(srv, "/res.php", form("key", key, "action", "get", "id", id)); len(got) < 4 || got[:3] != "OK|" {
			t.Fatalf("poll %d: %q", i, got)
		}
		clock.Advance(100 * time.Millisecond)
	}
	for i := range n {
		solve(i)
	}
	st := srv.Stats()
	events, tokens, fps, submits := srv.Held()
	// A fetched task is kept FetchedRetention (9 tasks: the tenth is due
	// now); the events, at most 2 × tasks + 1024.
	if st.TasksKept != 9 || events > 2*st.TasksKept+1024 || tokens != 0 || fps != n || submits != n {
		t.Fatalf("after %d tasks: %d tasks kept, %d events, %d tokens, %d fingerprints of %d submits; want 9, ≤ %d, 0, %d of %d",
			n, st.TasksKept, events, tokens, fps, submits, 2*st.TasksKept+1024, n, n)
	}
	// ResultTTL after the last submit, the first task again is not a
	// duplicate and the book holds its fingerprint only.
	clock.Advance(10 * time.Minute)
	solve(0)
	_, _, fps, submits = srv.Held()
	if st := srv.Stats(); st.Duplicates != 0 || st.Accepted != n+1 || fps != 1 || submits != 1 {
		t.Fatalf("a task again after ResultTTL: %d duplicates of %d accepted, %d fingerprints of %d submits; want 0 of %d, 1 of 1",
			st.Duplicates, st.Accepted, fps, submits, n+1)
	}
	// The same task again and again: each is a duplicate, and the book
	// keeps one fingerprint and at most 2 × 1 + 1024 of its submits.
	for range again {
		solve(0)
	}
	_, _, fps, submits = srv.Held()
	if st := srv.Stats(); st.Duplicates != again || fps != 1 || submits > 1026 {
		t.Fatalf("a task %d times more: %d duplicates, %d fingerprints of %d submits; want %d, 1 of ≤ 1026", again, st.Duplicates, fps, submits, again)
	}
}
