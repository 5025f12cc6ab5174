package limiter

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestBoundAndRelease(t *testing.T) {
	t.Parallel()
	l := New(3)
	for i := 0; i < 3; i++ {
		if !l.TryAcquire(t0) {
			t.Fatalf("acquire %d refused", i)
		}
	}
	if l.TryAcquire(t0) {
		t.Fatal("4th slot granted with max 3")
	}
	l.Release()
	if !l.TryAcquire(t0) {
		t.Fatal("slot not reusable after Release")
	}
	if l.InUse() != 3 {
		t.Fatalf("InUse %d", l.InUse())
	}
}

func TestNoSlotHalvesOncePerBurstAndHolds(t *testing.T) {
	t.Parallel()
	l := New(16)
	l.NoSlot(t0, 5*time.Second)
	l.NoSlot(t0.Add(time.Second), 5*time.Second) // same burst
	if w := l.Window(); w != 8 {
		t.Fatalf("window %d, want 8", w)
	}
	if l.TryAcquire(t0.Add(5 * time.Second)) {
		t.Fatal("acquired during hold (extended to t0+6s)")
	}
	if !l.TryAcquire(t0.Add(6 * time.Second)) {
		t.Fatal("refused after hold")
	}
	for i := 0; i < 10; i++ {
		l.NoSlot(t0.Add(time.Duration(10+10*i)*time.Second), time.Second)
	}
	if w := l.Window(); w != 1 {
		t.Fatalf("window %d, want floor 1", w)
	}
}

func TestAdditiveIncrease(t *testing.T) {
	t.Parallel()
	l := New(10)
	l.NoSlot(t0, 0) // 10 → 5
	// From 5 to 6 takes 6 successes of 1/window each (5.2, 5.39, … 6.1).
	for i := 0; i < 5; i++ {
		l.Success(t0)
	}
	if w := l.Window(); w != 5 {
		t.Fatalf("window %d after 5 successes, want 5", w)
	}
	l.Success(t0)
	if w := l.Window(); w != 6 {
		t.Fatalf("window %d after 6 successes, want 6", w)
	}
	for i := 0; i < 1000; i++ {
		l.Success(t0)
	}
	if w := l.Window(); w != 10 {
		t.Fatalf("window %d, want capped at 10", w)
	}
}

// TestConvergenceModel runs K processes, each configured for the whole plan,
// against one provider with capacity C. Tasks take `solve` ticks. A process
// submits while its limiter allows; the provider refuses past C. After a
// warm-up the threads must be well used and refusals bounded.
func TestConvergenceModel(t *testing.T) {
	t.Parallel()
	const (
		procs    = 4
		capacity = 20
		solve    = 10 // ticks
		ticks    = 3000
		wait     = 5 * time.Second
	)
	type proc struct {
		l    *Limiter
		done []int // completion tick of each task in flight
	}
	ps := make([]*proc, procs)
	for i := range ps {
		ps[i] = &proc{l: New(capacity)}
	}
	busy := 0
	var refused, accepted, busySum int
	for tick := 0; tick < ticks; tick++ {
		now := t0.Add(time.Duration(tick) * time.Second)
		for _, p := range ps {
			kept := p.done[:0]
			for _, d := range p.done {
				if d <= tick {
					busy--
					p.l.Release()
					p.l.Success(now)
					continue
				}
				kept = append(kept, d)
			}
			p.done = kept
		}
		// Processes take turns going first so none is always favoured.
		for k := 0; k < procs; k++ {
			p := ps[(tick+k)%procs]
			for p.l.TryAcquire(now) {
				if busy >= capacity {
					p.l.Release()
					p.l.NoSlot(now, wait)
					if tick >= ticks/2 {
						refused++
					}
					break
				}
				busy++
				p.done = append(p.done, tick+solve)
				if tick >= ticks/2 {
					accepted++
				}
			}
		}
		if busy > capacity {
			t.Fatalf("tick %d: %d busy > capacity %d", tick, busy, capacity)
		}
		if tick >= ticks/2 {
			busySum += busy
		}
	}
	util := float64(busySum) / float64(capacity*ticks/2)
	refusalRate := float64(refused) / float64(refused+accepted)
	t.Logf("utilization %.2f, refusal rate %.3f, windows %d %d %d %d", util, refusalRate,
		ps[0].l.Window(), ps[1].l.Window(), ps[2].l.Window(), ps[3].l.Window())
	// AIMD probes for capacity, so some refusals remain (about procs/solve
	// per tick); each costs one request and no money.
	if util < 0.9 {
		t.Errorf("utilization %.2f < 0.9", util)
	}
	if refusalRate > 0.1 {
		t.Errorf("refusal rate %.3f > 0.1", refusalRate)
	}
	sum := 0
	for _, p := range ps {
		sum += p.l.Window()
	}
	if sum > 2*capacity {
		t.Errorf("windows sum %d, want <= %d", sum, 2*capacity)
	}
}

func TestAnswersEarnSubmitsDuringHold(t *testing.T) {
	t.Parallel()
	l := New(10)
	for range 6 {
		if !l.TryAcquire(t0) {
			t.Fatal("acquire refused before any refusal")
		}
	}
	l.NoSlot(t0, 5*time.Second) // window 5, 6 in use, held to t0+5s
	during := t0.Add(time.Second)
	// Two answers free two of our threads: in use 4, two credits.
	for range 2 {
		l.Release()
		l.Success(during)
	}
	if !l.TryAcquire(during) {
		t.Fatal("first credit refused")
	}
	if l.TryAcquire(during) {
		t.Fatal("second credit granted with the window (5) full")
	}
	l.Release() // a submit that failed: no answer, no credit
	if !l.TryAcquire(during) {
		t.Fatal("second credit refused with room in the window")
	}
	l.Release()
	if l.TryAcquire(during) {
		t.Fatal("acquired during the hold without a credit")
	}
	l.Release()
	l.Success(during) // one more credit…
	l.NoSlot(during, 5*time.Second)
	if l.TryAcquire(during.Add(time.Second)) {
		t.Fatal("a refusal must cancel the credits")
	}
	if !l.TryAcquire(during.Add(5 * time.Second)) {
		t.Fatal("refused after the hold")
	}
}
