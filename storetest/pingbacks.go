package storetest

import (
	"context"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
)

// ledger is s as a PingbackLedger; the test is skipped for a Store
// without one.
func ledger(t *testing.T, s captchaq.Store) captchaq.PingbackLedger {
	t.Helper()
	return optional[captchaq.PingbackLedger](t, s, "pingbacks")
}

// optional is s as I, an interface a Store may implement; the test is
// skipped, saying the store keeps no what, for a Store without it.
func optional[I any](t *testing.T, s captchaq.Store, what string) I {
	t.Helper()
	i, ok := s.(I)
	if !ok {
		t.Skipf("the store keeps no %s (%s)", what, reflect.TypeFor[I]())
	}
	return i
}

func pingbackTask(id string) captchaq.Task {
	tk := task(id)
	tk.Pingback = "https://client.example/pb/" + id
	return tk
}

func take(t *testing.T, l captchaq.PingbackLedger, id string, lease time.Duration) bool {
	t.Helper()
	rec, ok, err := l.TakePingback(context.Background(), id, lease)
	if err != nil {
		t.Fatalf("TakePingback(%q): %v", id, err)
	}
	if ok && (rec.Task.ID != id || rec.Result == nil) {
		t.Fatalf("TakePingback(%q) took record %q with result %v", id, rec.Task.ID, rec.Result)
	}
	return ok
}

func claim(t *testing.T, l captchaq.PingbackLedger, grace, lease time.Duration, max int) []string {
	t.Helper()
	recs, err := l.ClaimPingbacks(context.Background(), grace, lease, max)
	if err != nil {
		t.Fatalf("ClaimPingbacks: %v", err)
	}
	for _, r := range recs {
		if r.Result == nil || !r.Status.Final() {
			t.Fatalf("ClaimPingbacks returned %q, %s, with result %v; want a final record with its result", r.Task.ID, r.Status, r.Result)
		}
	}
	return ids(recs)
}

func done(t *testing.T, l captchaq.PingbackLedger, id string) {
	t.Helper()
	if err := l.PingbackDone(context.Background(), id); err != nil {
		t.Fatalf("PingbackDone(%q): %v", id, err)
	}
}

// testPingbackOwed: a pingback is owed from the Finish of a task with
// one, leased to one taker at a time, and no longer owed once done; a
// task without one, or unfinished, owes none.
func testPingbackOwed(t *testing.T, s captchaq.Store) {
	l := ledger(t, s)
	enqueue(t, s, t0, pingbackTask("p"), task("n"), pingbackTask("q"))
	if take(t, l, "nope", time.Hour) {
		t.Error("an unknown id's pingback was taken")
	}
	if take(t, l, "p", time.Hour) {
		t.Error("a queued task's pingback was taken")
	}
	finish(t, s, solved("p", 1, at(time.Minute)))
	finish(t, s, solved("n", 1, at(time.Minute)))
	if take(t, l, "n", time.Hour) {
		t.Error("a task without a pingback owes one")
	}
	if got := claim(t, l, time.Hour, time.Hour, 10); len(got) != 0 {
		t.Errorf("ClaimPingbacks within the grace period: %v, want none", got)
	}
	if !take(t, l, "p", time.Hour) {
		t.Fatal("the pingback owed by p was not taken")
	}
	if take(t, l, "p", time.Hour) {
		t.Error("p's pingback was taken twice while its lease runs")
	}
	if got := claim(t, l, 0, time.Hour, 10); len(got) != 0 {
		t.Errorf("ClaimPingbacks of a leased pingback: %v, want none", got)
	}
	done(t, l, "p")
	done(t, l, "n")    // owes none: not an error
	done(t, l, "nope") // unknown: not an error
	if take(t, l, "p", 0) || len(claim(t, l, 0, time.Hour, 10)) != 0 {
		t.Error("a pingback marked done is still owed")
	}

	// A lease that ran out frees it again; a failed result owes one too.
	finish(t, s, failed("q", "ERROR_CAPTCHA_UNSOLVABLE", 1, at(time.Minute)))
	if got := claim(t, l, 0, 0, 10); !slices.Equal(got, []string{"q"}) {
		t.Fatalf("ClaimPingbacks with grace 0: %v, want [q]", got)
	}
	if got := claim(t, l, 0, time.Hour, 10); !slices.Equal(got, []string{"q"}) {
		t.Errorf("ClaimPingbacks after its lease ran out: %v, want [q]", got)
	}
	if take(t, l, "q", time.Hour) {
		t.Error("a claimed pingback was taken")
	}

	// A new solve owes a new pingback.
	if _, err := s.Renew(context.Background(), pingbackTask("p"), at(2*time.Hour)); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	finish(t, s, solved("p", 1, at(3*time.Hour)))
	if !take(t, l, "p", time.Hour) {
		t.Error("a renewed task's new result owes no pingback")
	}
}

// testPingbackClaimsOnce: of many claimers at once (the replicas of a
// front), each owed pingback goes to exactly one, oldest owed first,
// at most max a claim; of many takers of one, one gets it.
func testPingbackClaimsOnce(t *testing.T, s captchaq.Store) {
	l := ledger(t, s)
	var want []string
	for _, id := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		enqueue(t, s, t0, pingbackTask(id))
		finish(t, s, solved(id, 1, at(time.Minute)))
		want = append(want, id)
	}
	if got := claim(t, l, 0, 0, 2); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("ClaimPingbacks of at most 2: %v, want the two owed first, [a b]", got)
	}
	var mu sync.Mutex
	var got []string
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				recs, err := l.ClaimPingbacks(context.Background(), 0, time.Hour, 2)
				if err != nil {
					t.Errorf("concurrent ClaimPingbacks: %v", err)
					return
				}
				if len(recs) == 0 {
					return
				}
				mu.Lock()
				got = append(got, ids(recs)...)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("8 claimers at once claimed %v, want each of %v once", got, want)
	}

	enqueue(t, s, t0, pingbackTask("one"))
	finish(t, s, solved("one", 1, at(time.Minute)))
	taken := 0
	for range 8 {
		wg.Go(func() {
			_, ok, err := l.TakePingback(context.Background(), "one", time.Hour)
			if err != nil {
				t.Errorf("concurrent TakePingback: %v", err)
			}
			if ok {
				mu.Lock()
				taken++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if taken != 1 {
		t.Errorf("8 takers at once: %d took the pingback, want 1", taken)
	}
}
