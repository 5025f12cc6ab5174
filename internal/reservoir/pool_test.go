package reservoir

import (
	"slices"
	"testing"
	"time"
)

func turnstileSpec(name, key string, size int, clients ...string) Spec {
	return Spec{Name: name, Key: key, Clients: clients, Size: size, Max: 100,
		Life: 300 * time.Second, MinLife: 75 * time.Second, Solve: 4 * time.Second}
}

func TestPoolDraw(t *testing.T) {
	pl := NewPool([]Spec{turnstileSpec("shop", "k1", 0, "acme"), turnstileSpec("open", "k2", 0)}, 10)
	if _, _, ok := pl.Draw("k3", "acme", t0); ok {
		t.Error("a key no reservoir answers draws")
	}
	if _, _, ok := pl.Draw("k1", "other", t0); ok {
		t.Error("a tenant not in Clients draws")
	}
	name, nb, ok := pl.Draw("k1", "acme", t0)
	if !ok || name != "shop" || !nb.Equal(t0.Add(75*time.Second)) {
		t.Errorf("Draw(k1, acme) = %q, %v, %v; want shop, t0+75s, true", name, nb, ok)
	}
	if name, _, ok := pl.Draw("k2", "anyone", t0); !ok || name != "open" {
		t.Errorf("Draw(k2) with no Clients = %q, %v; want open, true", name, ok)
	}
	// Only the allowed draw fed the demand: one request in the first
	// second.
	c := pl.Counts(at(0.5))
	if c[0].Target == 0 {
		t.Error("shop's target is 0 after a draw")
	}
	pl2 := NewPool([]Spec{turnstileSpec("shop", "k1", 0, "acme")}, 10)
	pl2.Draw("k1", "other", t0)
	if c := pl2.Counts(at(0.5)); c[0].Target != 0 {
		t.Errorf("a refused tenant's request fed the demand: target %d, want 0", c[0].Target)
	}
}

func TestPoolPlanWithinLimit(t *testing.T) {
	pl := NewPool([]Spec{turnstileSpec("a", "k1", 5), turnstileSpec("b-2", "k2", 5)}, 6)
	rs := pl.Plan(t0, nil)
	byName := map[string]int{}
	for _, r := range rs {
		byName[r.Reservoir]++
		if got := RefillOf(r.ID); got != r.Reservoir {
			t.Errorf("RefillOf(%q) = %q, want %q", r.ID, got, r.Reservoir)
		}
	}
	if byName["a"] != 5 || byName["b-2"] != 1 {
		t.Fatalf("refills by reservoir = %v, want a:5 b-2:1 (limit 6)", byName)
	}
	if rs := pl.Plan(at(1), nil); len(rs) != 0 {
		t.Fatalf("refills past the limit: %d, want 0", len(rs))
	}
	// One solved, one failed, one not sent: three threads back, all to
	// b-2 (a has 3 in stock and 2 in flight).
	if name, refill := pl.Finished(firstOf(t, rs, "a"), true, 3*time.Second, at(3)); !refill || name != "a" {
		t.Errorf("Finished(refill) = %q, %v; want a, true", name, refill)
	}
	pl.Finished(rs[1].ID, false, 0, at(3))
	pl.Unsent(rs[2].ID)
	more := pl.Plan(at(4), map[string]int{"a": 3})
	if len(more) != 3 || more[0].Reservoir != "b-2" {
		t.Errorf("refills after three ended = %v, want 3 of b-2", more)
	}
	c := pl.Counts(at(4))
	if c[0].Solved != 1 || c[0].Failed != 1 || c[0].InFlight != 2 || c[0].Stock != 3 {
		t.Errorf("a's counts = %+v, want solved 1, failed 1, in flight 2, stock 3", c[0])
	}
	if c[1].InFlight != 4 {
		t.Errorf("b-2 in flight = %d, want 4", c[1].InFlight)
	}
}

// firstOf is the id of the first refill of name in rs.
func firstOf(t *testing.T, rs []Refill, name string) string {
	t.Helper()
	i := slices.IndexFunc(rs, func(r Refill) bool { return r.Reservoir == name })
	if i < 0 {
		t.Fatalf("no refill of %s", name)
	}
	return rs[i].ID
}

func TestPoolResume(t *testing.T) {
	pl := NewPool([]Spec{turnstileSpec("a-b", "k1", 2)}, 10)
	for _, c := range []struct {
		id   string
		want bool
	}{
		{"reservoir-a-b-1765130000000000000-7", true},
		{"reservoir-a-b-1765130000000000000-7", true}, // counted once
		{"reservoir-a-1765130000000000000-7", false},  // another reservoir's
		{"reservoir-a-b-7", false},
		{"client-task", false},
	} {
		if got := pl.Resume(c.id); got != c.want {
			t.Errorf("Resume(%q) = %v, want %v", c.id, got, c.want)
		}
	}
	if c := pl.Counts(t0); c[0].InFlight != 1 {
		t.Errorf("in flight after resume = %d, want 1", c[0].InFlight)
	}
	// Size 2, one resumed in flight: one more refill.
	if rs := pl.Plan(t0, nil); len(rs) != 1 {
		t.Errorf("refills beside a resumed one = %d, want 1", len(rs))
	}
}

func TestPoolCounts(t *testing.T) {
	pl := NewPool([]Spec{turnstileSpec("a", "k1", 0)}, 10)
	for i := range 4 {
		pl.Draw("k1", "", at(float64(i)))
		pl.Hit("a", time.Millisecond)
	}
	pl.Draw("k1", "", at(4))
	pl.Miss("a", "t5", at(4))
	if _, refill := pl.Finished("t5", true, 0, at(10)); refill {
		t.Error("a miss finished as a refill")
	}
	pl.Expired("a", 2)
	pl.Plan(at(5), map[string]int{"a": 3})
	c := pl.Counts(at(5))[0]
	want := Counts{Name: "a", Target: c.Target, Stock: 3, InFlight: c.InFlight, Hits: 4, Misses: 1, HandedOut: 4, Expired: 2,
		TimeToTokenP50: time.Millisecond, TimeToTokenP99: 6 * time.Second}
	if c != want {
		t.Errorf("counts = %+v, want %+v", c, want)
	}
}

// TestPoolStopsWhenDemandStops runs a pool on a fake clock against
// refills that take 4 s: while one request a second draws, the draws hit
// after the first refills; once they stop, no refill starts.
func TestPoolStopsWhenDemandStops(t *testing.T) {
	pl := NewPool([]Spec{turnstileSpec("a", "k1", 0)}, 100)
	stock := 0
	landing := map[string]time.Time{}
	var lastPlan time.Time
	hits, misses := 0, 0
	for s := 0.0; s < 200; s += 0.5 {
		now := at(s)
		for id, done := range landing {
			if !done.After(now) {
				delete(landing, id)
				pl.Finished(id, true, 4*time.Second, now)
				stock++
			}
		}
		if s < 120 && s == float64(int(s)) {
			if _, _, ok := pl.Draw("k1", "", now); ok {
				switch {
				case stock > 0:
					stock--
					pl.Hit("a", 0)
					hits++
				case s >= 10:
					misses++
				}
			}
		}
		for _, r := range pl.Plan(now, map[string]int{"a": stock}) {
			landing[r.ID] = now.Add(4 * time.Second)
			lastPlan = now
		}
	}
	if misses != 0 || hits < 100 {
		t.Errorf("after the first 10 s: %d misses, %d hits; want 0 misses", misses, hits)
	}
	if lastPlan.After(at(119)) {
		t.Errorf("a refill started at %v, after the last request at 119 s", lastPlan.Sub(t0))
	}
}

// TestPoolFailedRefillsHold: failures in a row hold a reservoir's
// refills back, 1 s, 2 s, 4 s … at most a minute; a solve ends the hold.
func TestPoolFailedRefillsHold(t *testing.T) {
	pl := NewPool([]Spec{turnstileSpec("a", "k1", 1)}, 10)
	now := t0
	for i, hold := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		rs := pl.Plan(now, nil)
		if len(rs) != 1 {
			t.Fatalf("round %d: %d refills, want 1", i, len(rs))
		}
		pl.Finished(rs[0].ID, false, 0, now)
		if rs := pl.Plan(now.Add(hold-time.Millisecond), nil); len(rs) != 0 {
			t.Fatalf("round %d: a refill %v after failure %d, want none before %v", i, hold-time.Millisecond, i+1, hold)
		}
		now = now.Add(hold)
	}
	for range 10 {
		rs := pl.Plan(now, nil)
		pl.Finished(rs[0].ID, false, 0, now)
		now = now.Add(time.Minute)
	}
	// A refill sent before the failures (none here) that solves while
	// the hold runs ends it.
	rs := pl.Plan(now, nil)
	pl.Finished(rs[0].ID, false, 0, now)
	if rs := pl.Plan(now.Add(59*time.Second), nil); len(rs) != 0 {
		t.Fatalf("%d refills 59 s after the 12th failure in a row, want none (held a minute)", len(rs))
	}
	pl.Resume("reservoir-a-1-1")
	pl.Finished("reservoir-a-1-1", true, time.Second, now)
	if rs := pl.Plan(now, nil); len(rs) != 1 {
		t.Errorf("after a solve: %d refills, want 1 at once", len(rs))
	}
	if c := pl.Counts(now)[0]; c.Failed != 14 || c.Solved != 1 {
		t.Errorf("counts %+v: want 14 failed, 1 solved", c)
	}
}

// Swap keeps a reservoir kept by name and key (its counts and refills in
// flight), starts one whose key changed afresh, and a refill of a removed
// one is stocked nowhere.
func TestPoolSwap(t *testing.T) {
	pl := NewPool([]Spec{turnstileSpec("keep", "k1", 2), turnstileSpec("drop", "k2", 1), turnstileSpec("rekey", "k3", 1)}, 10)
	rs := pl.Plan(t0, nil)
	pl.Draw("k1", "", t0)
	pl.Hit("keep", time.Millisecond)
	ch := pl.Swap([]Spec{turnstileSpec("keep", "k1", 3), turnstileSpec("rekey", "k9", 1), turnstileSpec("new", "k4", 1)})
	want := Change{Added: []string{"rekey", "new"}, Removed: []string{"rekey", "drop"}, Changed: []string{"keep"}}
	if !slices.Equal(ch.Added, want.Added) || !slices.Equal(ch.Removed, want.Removed) || !slices.Equal(ch.Changed, want.Changed) {
		t.Fatalf("Swap = %+v, want %+v", ch, want)
	}
	c := pl.Counts(at(1))
	if len(c) != 3 || c[0].Name != "keep" || c[0].Hits != 1 || c[0].InFlight != 2 || c[0].Target != 3 {
		t.Fatalf("keep after Swap: %+v, want its hit and 2 in flight kept, target 3", c[0])
	}
	if c[1].InFlight != 0 || c[2].Name != "new" {
		t.Errorf("rekey and new after Swap: %+v, %+v; want both afresh", c[1], c[2])
	}
	if _, _, ok := pl.Draw("k3", "", at(1)); ok {
		t.Error("the old key of rekey still draws")
	}
	for _, name := range []string{"drop", "rekey"} {
		if got, refill := pl.Finished(firstOf(t, rs, name), true, time.Second, at(2)); !refill || got != "" {
			t.Errorf("Finished(a refill of removed %s) = %q, %v; want \"\", true", name, got, refill)
		}
	}
	if got, _ := pl.Finished(firstOf(t, rs, "keep"), true, time.Second, at(2)); got != "keep" {
		t.Errorf("Finished(a refill of keep) = %q, want keep", got)
	}
	if !pl.Swap([]Spec{turnstileSpec("keep", "k1", 3), turnstileSpec("rekey", "k9", 1), turnstileSpec("new", "k4", 1)}).Empty() {
		t.Error("a Swap to the same specs changed something")
	}
}
