package reservoir

import (
	"cmp"
	"math"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 7, 18, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func TestDemandRate(t *testing.T) {
	d := NewDemand(time.Minute)
	if r := d.Rate(t0); r != 0 {
		t.Fatalf("rate before any arrival = %v, want 0", r)
	}
	for i := range 120 { // one a second for two minutes
		d.Arrive(at(float64(i)))
	}
	// The window holds the last 60 one-second buckets: 60 arrivals.
	if r := d.Rate(at(119.5)); r != 1 {
		t.Errorf("steady rate = %v, want 1", r)
	}
	// A new reservoir sees its rate before a whole window has passed.
	d2 := NewDemand(time.Minute)
	for i := range 10 {
		d2.Arrive(at(float64(i) / 2)) // two a second for 5 s
	}
	if r := d2.Rate(at(4.5)); r != 2 {
		t.Errorf("rate over the first 5 s = %v, want 2", r)
	}
	// Demand that stops drains out of the window.
	if r := d.Rate(at(149.5)); r != 0.5 {
		t.Errorf("rate 30 s after the stop = %v, want 0.5", r)
	}
	if r := d.Rate(at(180)); r != 0 {
		t.Errorf("rate a window after the stop = %v, want 0", r)
	}
	if got := d.Last(); !got.Equal(at(119)) {
		t.Errorf("Last = %v, want %v", got, at(119))
	}
}

// TestDemandLive: a demand is live within its longest gap of the window
// after its latest arrival, or when an arrival came since the time asked.
func TestDemandLive(t *testing.T) {
	d := NewDemand(time.Minute)
	if d.Live(t0, time.Time{}) {
		t.Error("a demand with no arrival is live")
	}
	for i := range 30 { // one a second, then silence
		d.Arrive(at(float64(i)))
	}
	if g := d.LongestGap(at(29.5)); g != time.Second {
		t.Errorf("LongestGap of one a second = %v, want 1s", g)
	}
	for _, c := range []struct {
		now, since float64
		want       bool
	}{
		{29.5, 29.2, true}, {30, 29.5, true}, {30.5, 30, false}, {45, 44, false}, {45, 29, true},
	} {
		if got := d.Live(at(c.now), at(c.since)); got != c.want {
			t.Errorf("Live(%v s, since %v s) = %v, want %v", c.now, c.since, got, c.want)
		}
	}
	b := NewDemand(time.Minute)
	for _, s := range []float64{0, 0.2, 10, 10.3, 20} { // bursts 10 s apart
		b.Arrive(at(s))
	}
	if g := b.LongestGap(at(21)); g != 9800*time.Millisecond {
		t.Errorf("LongestGap of bursts = %v, want 9.8s", g)
	}
	if !b.Live(at(29), at(28)) || b.Live(at(30), at(29)) {
		t.Error("bursts 10 s apart: want live 9 s after the last, not 10 s after")
	}
	// A gap that began before the window is not counted.
	if g := b.LongestGap(at(70.5)); g != 0 {
		t.Errorf("LongestGap with one bucket of arrivals in the window = %v, want 0", g)
	}
}

func TestSolveTimesQuantile(t *testing.T) {
	s := NewSolveTimes(4 * time.Second)
	if q := s.Quantile(0.9); q != 4*time.Second {
		t.Errorf("prior = %v, want 4s", q)
	}
	for i := 1; i <= 10; i++ {
		s.Add(time.Duration(i) * time.Second)
	}
	if q := s.Quantile(0.9); q != 9*time.Second {
		t.Errorf("p90 of 1..10 s = %v, want 9s", q)
	}
	if q := s.Quantile(0.5); q != 5*time.Second {
		t.Errorf("p50 of 1..10 s = %v, want 5s", q)
	}
	// The ring keeps the latest solveSamples: old slow solves drop out.
	for range solveSamples {
		s.Add(2 * time.Second)
	}
	if q := s.Quantile(1); q != 2*time.Second {
		t.Errorf("max after %d solves of 2 s = %v, want 2s", solveSamples, q)
	}
	if len(s.samples) != solveSamples {
		t.Errorf("kept %d samples, want %d", len(s.samples), solveSamples)
	}
}

func TestTarget(t *testing.T) {
	for _, c := range []struct {
		name   string
		rate   float64
		solve  time.Duration
		usable time.Duration
		limit  int
		want   int
	}{
		{"no demand", 0, 6 * time.Second, 225 * time.Second, 100, 0},
		// λW = 6, plus 2√6 = 4.9: 11.
		{"one a second, 6 s solves", 1, 6 * time.Second, 225 * time.Second, 100, 11},
		{"bounded by max", 1, 6 * time.Second, 225 * time.Second, 8, 8},
		// λW = 60 + 2√60 = 75.5, but 0.5/s for 30 s uses only 15.
		{"bounded by what is used in its life", 0.5, 120 * time.Second, 30 * time.Second, 1000, 15},
		// A trickle keeps one token.
		{"a trickle", 0.01, 6 * time.Second, 225 * time.Second, 100, 1},
		{"no usable life", 1, 6 * time.Second, 0, 100, 0},
	} {
		if got := Target(c.rate, c.solve, c.usable, c.limit); got != c.want {
			t.Errorf("%s: Target = %d, want %d", c.name, got, c.want)
		}
	}
}

func TestSizerFixedSize(t *testing.T) {
	s := &Sizer{Size: 5, Max: 3, Life: 300 * time.Second, MinLife: 75 * time.Second, Demand: NewDemand(0), Solves: NewSolveTimes(time.Second)}
	if got := s.Target(t0); got != 3 {
		t.Errorf("fixed size 5 with max 3: target %d, want 3", got)
	}
	if got := s.Refills(t0, 1, 1, 10); got != 1 {
		t.Errorf("refills with 1 in stock and 1 in flight: %d, want 1", got)
	}
	if got := s.Refills(t0, 0, 0, 2); got != 2 {
		t.Errorf("refills within room 2: %d, want 2", got)
	}
	if got := s.Refills(t0, 4, 0, 2); got != 0 {
		t.Errorf("refills over target: %d, want 0", got)
	}
}

// rng is a small seeded generator (xorshift), so the runs below are the
// same on every machine.
type rng uint64

func (r *rng) float() float64 {
	*r ^= *r << 13
	*r ^= *r >> 7
	*r ^= *r << 17
	return float64(uint64(*r)>>11) / (1 << 53)
}

type simRun struct {
	drawsAfterMinute, hitsAfterMinute int
	solved, expired                   int
	lastRefill, lastSolve             time.Time
}

// check fails t when fewer than minHit of the draws after the first
// minute were hits, or more than 10% of the tokens solved aged out.
func (run simRun) check(t *testing.T, minHit float64) {
	t.Helper()
	t.Logf("hits %d of %d after the first minute, %d solved, %d aged out", run.hitsAfterMinute, run.drawsAfterMinute, run.solved, run.expired)
	if hit := float64(run.hitsAfterMinute) / float64(run.drawsAfterMinute); hit < minHit {
		t.Errorf("hits after the first minute: %d of %d (%.1f%%), want at least %.0f%%", run.hitsAfterMinute, run.drawsAfterMinute, 100*hit, 100*minHit)
	}
	if waste := float64(run.expired) / float64(run.solved); waste > 0.10 {
		t.Errorf("aged out %d of %d solved (%.1f%%), want at most 10%%", run.expired, run.solved, 100*waste)
	}
}

// plan is how a simulated reservoir's refills are started: room threads
// at most in flight, asked every tick. The zero plan has room 1000, asked
// every 100 ms.
type plan struct {
	room int
	tick time.Duration
}

// simulate runs a reservoir of Turnstile tokens (300 s life, 75 s
// min_life, solves of 2–6 s drawn uniformly) against arrivals on plan p,
// and counts its hits after the first minute, its solves and the tokens
// that aged out. Misses are ordinary tasks and do not take tokens.
func simulate(arrivals []time.Time, seed rng, p plan) simRun {
	p.room, p.tick = cmp.Or(p.room, 1000), cmp.Or(p.tick, 100*time.Millisecond)
	s := &Sizer{Max: 100, Life: 300 * time.Second, MinLife: 75 * time.Second,
		Demand: NewDemand(0), Solves: NewSolveTimes(4 * time.Second)}
	var run simRun
	var stock []time.Time // solved at, oldest first
	var inflight []time.Time
	r := seed
	refill := func(now time.Time) {
		if now.Sub(t0)%p.tick != 0 {
			return
		}
		for range s.Refills(now, len(stock), len(inflight), p.room-len(inflight)) {
			d := time.Duration((2 + 4*r.float()) * float64(time.Second))
			inflight = append(inflight, now.Add(d))
			s.Solves.Add(d)
			run.lastRefill = now
		}
	}
	// advance lands the solves done by now and drops the tokens aged out.
	advance := func(now time.Time) {
		kept := inflight[:0]
		for _, done := range inflight {
			if done.After(now) {
				kept = append(kept, done)
				continue
			}
			stock = append(stock, done)
			run.solved++
			if done.After(run.lastSolve) {
				run.lastSolve = done
			}
		}
		inflight = kept
		for len(stock) > 0 && now.Sub(stock[0]) > s.Life-s.MinLife {
			stock = stock[1:]
			run.expired++
		}
	}
	end := arrivals[len(arrivals)-1].Add(10 * time.Minute)
	next := 0
	for now := t0; now.Before(end); now = now.Add(100 * time.Millisecond) {
		advance(now)
		for next < len(arrivals) && !arrivals[next].After(now) {
			s.Demand.Arrive(now)
			hit := len(stock) > 0
			if hit {
				stock = stock[1:]
			}
			if now.Sub(t0) >= time.Minute {
				run.drawsAfterMinute++
				if hit {
					run.hitsAfterMinute++
				}
			}
			next++
		}
		refill(now)
	}
	run.expired += len(stock)
	return run
}

// TestSteadyDemand is the case on the rule alone: one request a
// second for 5 minutes, Turnstile solves of 2–6 s, an auto-sized reservoir.
func TestSteadyDemand(t *testing.T) {
	var arrivals []time.Time
	for i := range 300 {
		arrivals = append(arrivals, at(float64(i)))
	}
	run := simulate(arrivals, 1, plan{})
	run.check(t, 1)
	last := arrivals[len(arrivals)-1]
	if run.lastRefill.After(last) {
		t.Errorf("a refill started at %v, after the demand stopped at %v", run.lastRefill.Sub(t0), last.Sub(t0))
	}
	if d := run.lastSolve.Sub(last); d > 6*time.Second {
		t.Errorf("refills ran %v past the demand's stop, want within one solve time (6 s)", d)
	}
}

// TestPoissonDemand: the same mean rate, arriving at random.
func TestPoissonDemand(t *testing.T) {
	var arrivals []time.Time
	r := rng(7)
	for s := 0.0; s < 300; s += -math.Log(1 - r.float()) {
		arrivals = append(arrivals, at(s))
	}
	run := simulate(arrivals, 3, plan{})
	run.check(t, 0.98)
}

// TestSteppedDemand: a rate that doubles, then stops.
func TestSteppedDemand(t *testing.T) {
	var arrivals []time.Time
	for i := range 120 {
		arrivals = append(arrivals, at(float64(i)))
	}
	for i := range 240 {
		arrivals = append(arrivals, at(120+float64(i)/2))
	}
	run := simulate(arrivals, 5, plan{})
	run.check(t, 0.98)
	if last := arrivals[len(arrivals)-1]; run.lastRefill.After(last) {
		t.Errorf("a refill started %v after the demand stopped", run.lastRefill.Sub(last))
	}
}

// TestDemandStopsFewThreads: one request a second for 5 minutes on one
// refill thread (a quarter of 5), asked every second as a queue asks:
// the target is never met, and still no refill starts once the demand has
// been silent for longer than its gap (1 s), and the last one ends within
// a solve time (6 s at most) of the second request that does not come.
func TestDemandStopsFewThreads(t *testing.T) {
	var arrivals []time.Time
	for i := range 300 {
		arrivals = append(arrivals, at(float64(i)))
	}
	run := simulate(arrivals, 11, plan{room: 1, tick: time.Second})
	stop := arrivals[len(arrivals)-1].Add(time.Second)
	t.Logf("%d solved, last refill started %v and ended %v after the stop", run.solved, run.lastRefill.Sub(stop), run.lastSolve.Sub(stop))
	if run.lastRefill.After(stop) {
		t.Errorf("a refill started %v after the demand stopped", run.lastRefill.Sub(stop))
	}
	if d := run.lastSolve.Sub(stop); d > 6*time.Second {
		t.Errorf("refills ran %v past the demand's stop, want within one solve time (6 s)", d)
	}
	// One thread solving 2–6 s, started on whole seconds: about one
	// refill every 4.5 s while the demand lasts.
	if run.solved < 55 {
		t.Errorf("%d refills solved in 300 s on one thread, want 55 or more", run.solved)
	}
}
