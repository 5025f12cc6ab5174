package sched

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func drain(s *Scheduler[int], now time.Time) []string {
	var ids []string
	for {
		it, ok := s.Pop(now)
		if !ok {
			return ids
		}
		ids = append(ids, it.ID)
	}
}

func TestPriorityThenFIFO(t *testing.T) {
	t.Parallel()
	s := New[int](Config{})
	in := []struct {
		id  string
		pri int
	}{{"a", 5}, {"b", 1}, {"c", 5}, {"d", 0}, {"e", 1}, {"f", 9}}
	for i, x := range in {
		s.Push(Item[int]{ID: x.id, Priority: x.pri, Seq: int64(i + 1), Enqueued: t0}, t0)
	}
	got := drain(s, t0)
	want := []string{"d", "b", "e", "a", "c", "f"}
	if !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	if s.Len() != 0 {
		t.Fatalf("Len %d after drain", s.Len())
	}
}

func TestFIFOBySeqNotPushOrder(t *testing.T) {
	t.Parallel()
	s := New[int](Config{})
	for _, seq := range []int64{3, 1, 2} {
		s.Push(Item[int]{ID: fmt.Sprint(seq), Priority: 5, Seq: seq, Enqueued: t0}, t0)
	}
	if got := drain(s, t0); !slices.Equal(got, []string{"1", "2", "3"}) {
		t.Fatalf("order %v", got)
	}
}

func TestAging(t *testing.T) {
	t.Parallel()
	s := New[int](Config{AgingInterval: time.Minute})
	// "old" waited 4 minutes at priority 5: effective 1, older than "new1".
	s.Push(Item[int]{ID: "old", Priority: 5, Seq: 1, Enqueued: t0}, t0)
	now := t0.Add(4 * time.Minute)
	s.Push(Item[int]{ID: "new0", Priority: 0, Seq: 2, Enqueued: now}, now)
	s.Push(Item[int]{ID: "new1", Priority: 1, Seq: 3, Enqueued: now}, now)
	s.Push(Item[int]{ID: "new2", Priority: 2, Seq: 4, Enqueued: now}, now)
	want := []string{"new0", "old", "new1", "new2"}
	if got := drain(s, now); !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}

func TestNoStarvationUnderSteadyUrgentLoad(t *testing.T) {
	t.Parallel()
	s := New[int](Config{AgingInterval: time.Second})
	s.Push(Item[int]{ID: "low", Priority: 9, Seq: 0, Enqueued: t0}, t0)
	// One urgent item arrives and one is handed out every 100ms.
	for i := 1; i <= 200; i++ {
		now := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		s.Push(Item[int]{ID: fmt.Sprint("u", i), Priority: 0, Seq: int64(i), Enqueued: now}, now)
		it, ok := s.Pop(now)
		if !ok {
			t.Fatal("nothing handed out")
		}
		if it.ID == "low" {
			// Priority 9 reaches level 0 after 9s = 90 rounds, and wins
			// the tie by Seq at round 90.
			if i != 90 {
				t.Fatalf("low handed out at round %d, want 90", i)
			}
			return
		}
	}
	t.Fatal("low starved")
}

func TestWeightedFairShare(t *testing.T) {
	t.Parallel()
	s := New[int](Config{Weights: map[string]int{"big": 3}})
	seq := int64(0)
	for _, tenant := range []string{"big", "small", "other"} {
		for i := 0; i < 50; i++ {
			seq++
			// big's items are all older: FIFO alone would starve the others.
			s.Push(Item[int]{ID: fmt.Sprint(tenant, i), Tenant: tenant, Priority: 5, Seq: seq, Enqueued: t0}, t0)
		}
	}
	counts := map[string]int{}
	for i := 0; i < 50; i++ {
		it, ok := s.Pop(t0)
		if !ok {
			t.Fatal("empty")
		}
		counts[it.Tenant]++
	}
	want := map[string]int{"big": 30, "small": 10, "other": 10}
	for k, v := range want {
		if counts[k] != v {
			t.Fatalf("counts %v, want %v", counts, want)
		}
	}
}

func TestFairShareDoesNotBeatPriority(t *testing.T) {
	t.Parallel()
	s := New[int](Config{})
	s.Push(Item[int]{ID: "a1", Tenant: "a", Priority: 1, Seq: 1}, t0)
	s.Push(Item[int]{ID: "a2", Tenant: "a", Priority: 1, Seq: 2}, t0)
	s.Push(Item[int]{ID: "b1", Tenant: "b", Priority: 5, Seq: 3}, t0)
	if got := drain(s, t0); !slices.Equal(got, []string{"a1", "a2", "b1"}) {
		t.Fatalf("order %v", got)
	}
}

func TestIdleTenantEarnsNoCredit(t *testing.T) {
	t.Parallel()
	s := New[int](Config{})
	for i := 0; i < 10; i++ {
		s.Push(Item[int]{ID: fmt.Sprint("a", i), Tenant: "a", Priority: 5, Seq: int64(i)}, t0)
	}
	for i := 0; i < 6; i++ {
		s.Pop(t0)
	}
	// b arrives late: it alternates with a from now on, not 6 in a row.
	for i := 0; i < 4; i++ {
		s.Push(Item[int]{ID: fmt.Sprint("b", i), Tenant: "b", Priority: 5, Seq: int64(100 + i)}, t0)
	}
	got := drain(s, t0)
	want := []string{"b0", "a6", "b1", "a7", "b2", "a8", "b3", "a9"}
	if !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}

func TestNotBefore(t *testing.T) {
	t.Parallel()
	s := New[int](Config{})
	s.Push(Item[int]{ID: "later", Priority: 0, Seq: 1, NotBefore: t0.Add(time.Second)}, t0)
	s.Push(Item[int]{ID: "now", Priority: 9, Seq: 2}, t0)
	if w := s.NextWake(t0); !w.Equal(t0.Add(time.Second)) {
		t.Fatalf("NextWake %v", w)
	}
	if got := drain(s, t0); !slices.Equal(got, []string{"now"}) {
		t.Fatalf("at t0: %v", got)
	}
	if got := drain(s, t0.Add(time.Second)); !slices.Equal(got, []string{"later"}) {
		t.Fatalf("at t0+1s: %v", got)
	}
}

// Once its NotBefore has come, a delayed item is ready, not a time to
// wake: NextWake names only times after now.
func TestNextWakeIsAhead(t *testing.T) {
	t.Parallel()
	s := New[int](Config{})
	s.Push(Item[int]{ID: "soon", Seq: 1, NotBefore: t0.Add(time.Second)}, t0)
	s.Push(Item[int]{ID: "later", Seq: 2, NotBefore: t0.Add(time.Minute), Deadline: t0.Add(time.Hour)}, t0)
	now := t0.Add(2 * time.Second)
	if w := s.NextWake(now); !w.Equal(t0.Add(time.Minute)) {
		t.Fatalf("NextWake %v at t0+2s, want t0+1m (later's NotBefore)", w)
	}
	if got := drain(s, now); !slices.Equal(got, []string{"soon"}) {
		t.Fatalf("at t0+2s: %v", got)
	}
	if w := s.NextWake(t0.Add(2 * time.Minute)); !w.Equal(t0.Add(time.Hour)) {
		t.Fatalf("NextWake %v at t0+2m, want t0+1h (later's Deadline)", w)
	}
}

func TestDeadlineExpiredNeverHandedOut(t *testing.T) {
	t.Parallel()
	s := New[int](Config{})
	s.Push(Item[int]{ID: "x", Priority: 0, Seq: 1, Deadline: t0.Add(time.Second)}, t0)
	s.Push(Item[int]{ID: "y", Priority: 5, Seq: 2, Deadline: t0.Add(time.Hour)}, t0)
	s.Push(Item[int]{ID: "z", Priority: 5, Seq: 3, NotBefore: t0.Add(time.Minute), Deadline: t0.Add(2 * time.Second)}, t0)
	now := t0.Add(2 * time.Second)
	if _, ok := s.Pop(now); ok {
		t.Fatal("Pop handed out an expired item before Expired was called")
	}
	var ids []string
	for _, it := range s.Expired(now) {
		ids = append(ids, it.ID)
	}
	if !slices.Equal(ids, []string{"x", "z"}) {
		t.Fatalf("expired %v", ids)
	}
	if got := drain(s, now); !slices.Equal(got, []string{"y"}) {
		t.Fatalf("handed out %v", got)
	}
	if w := s.NextWake(now); !w.IsZero() {
		t.Fatalf("NextWake %v on empty", w)
	}
}

func TestRemoveAndReplace(t *testing.T) {
	t.Parallel()
	s := New[int](Config{})
	s.Push(Item[int]{ID: "a", Priority: 5, Seq: 1}, t0)
	s.Push(Item[int]{ID: "b", Priority: 5, Seq: 2, NotBefore: t0.Add(time.Hour), Deadline: t0.Add(2 * time.Hour)}, t0)
	s.Push(Item[int]{ID: "c", Priority: 5, Seq: 3}, t0)
	if _, ok := s.Remove("b"); !ok {
		t.Fatal("b not removed")
	}
	if _, ok := s.Remove("b"); ok {
		t.Fatal("b removed twice")
	}
	s.Push(Item[int]{ID: "a", Priority: 1, Seq: 1, Value: 7}, t0) // replace
	if s.Len() != 2 || s.Ready() != 2 {
		t.Fatalf("Len %d Ready %d", s.Len(), s.Ready())
	}
	it, _ := s.Pop(t0)
	if it.ID != "a" || it.Value != 7 {
		t.Fatalf("got %+v", it)
	}
	if got := drain(s, t0.Add(3*time.Hour)); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("rest %v", got)
	}
	if !s.NextWake(t0).IsZero() {
		t.Fatal("removed item still wakes")
	}
}

func TestPopFuncPassesOverClasses(t *testing.T) {
	t.Parallel()
	s := New[int](Config{})
	// Class 1: tasks only the second provider solves; class 3: both.
	s.Push(Item[int]{ID: "h1", Priority: 1, Seq: 1, Class: 1 << 1, Enqueued: t0}, t0)
	s.Push(Item[int]{ID: "t1", Priority: 5, Seq: 2, Class: 3, Enqueued: t0}, t0)
	s.Push(Item[int]{ID: "t2", Priority: 5, Seq: 3, Class: 3, Enqueued: t0.Add(time.Second)}, t0)
	first := func(it Item[int]) bool { return it.Class&1 != 0 }
	if it, ok := s.PopFunc(t0, first); !ok || it.ID != "t1" {
		t.Fatalf("first provider popped %q, %v; want t1 (h1 is more urgent but not its class)", it.ID, ok)
	}
	old := func(it Item[int]) bool { return !it.Enqueued.After(t0) }
	if it, ok := s.PopFunc(t0, old); !ok || it.ID != "h1" {
		t.Fatalf("popped %q, %v; want h1", it.ID, ok)
	}
	if it, ok := s.PopFunc(t0, old); ok {
		t.Fatalf("popped %q: its FIFO's head is too young", it.ID)
	}
	if got := drain(s, t0); !slices.Equal(got, []string{"t2"}) {
		t.Fatalf("left %v, want [t2]", got)
	}
}

// Within a priority and tenant, a burst's items go longest Expected
// first (Seq among equals); a later burst never passes an earlier one;
// priority still comes first.
func TestLongestFirstWithinBurst(t *testing.T) {
	t.Parallel()
	s := New[int](Config{})
	in := []struct {
		id       string
		pri      int
		burst    int64
		expected time.Duration
	}{
		{"img1", 5, 1, time.Second},
		{"rc1", 5, 1, 25 * time.Second},
		{"ts1", 5, 1, 8 * time.Second},
		{"rc2", 5, 1, 25 * time.Second},
		{"urgent-img", 1, 1, time.Second},
		{"late-rc", 5, 2, 25 * time.Second},
		{"img2", 5, 1, time.Second},
		{"late-img", 5, 2, time.Second},
		{"urgent-rc", 1, 2, 25 * time.Second},
	}
	for i, x := range in {
		s.Push(Item[int]{ID: x.id, Priority: x.pri, Seq: int64(i + 1), Burst: x.burst, Expected: x.expected, Enqueued: t0}, t0)
	}
	want := []string{"urgent-img", "urgent-rc", "rc1", "rc2", "ts1", "img1", "img2", "late-rc", "late-img"}
	if got := drain(s, t0); !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}

// Ordering within a burst changes neither aging (an old burst's short
// item ages past a newer, more urgent long one) nor the tenants' shares.
func TestBurstOrderKeepsAgingAndFairShare(t *testing.T) {
	t.Parallel()
	s := New[int](Config{AgingInterval: time.Minute})
	s.Push(Item[int]{ID: "old-img", Priority: 5, Seq: 1, Burst: 1, Expected: time.Second, Enqueued: t0}, t0)
	now := t0.Add(4 * time.Minute)
	s.Push(Item[int]{ID: "new-rc", Priority: 2, Seq: 2, Burst: 2, Expected: 25 * time.Second, Enqueued: now}, now)
	if got := drain(s, now); !slices.Equal(got, []string{"old-img", "new-rc"}) {
		t.Fatalf("aging: order %v", got)
	}

	s = New[int](Config{})
	seq := int64(0)
	for _, tenant := range []string{"a", "b"} {
		for i, exp := range []time.Duration{time.Second, 25 * time.Second, 8 * time.Second} {
			seq++
			s.Push(Item[int]{ID: fmt.Sprint(tenant, i), Tenant: tenant, Priority: 5, Seq: seq, Burst: 1, Expected: exp, Enqueued: t0}, t0)
		}
	}
	want := []string{"a1", "b1", "a2", "b2", "a0", "b0"}
	if got := drain(s, t0); !slices.Equal(got, want) {
		t.Fatalf("fair share: order %v, want %v", got, want)
	}
}
