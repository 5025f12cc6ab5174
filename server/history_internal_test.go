package server

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func f(v float64) *float64 { return &v }

// TestHistoryView fills a ring of four samples five seconds apart with six
// samples: the view holds the last four, oldest first; the per-minute
// rates are over what the window holds until a minute has passed; a
// priority not waiting reads 0 once seen, a broker that did not answer
// reads null.
func TestHistoryView(t *testing.T) {
	t.Parallel()
	h := newHistory(5*time.Second, 20*time.Second, nil)
	t0 := time.Unix(1_800_000_000, 0)
	for i := range 6 {
		s := sample{
			at: t0.Add(time.Duration(i) * 5 * time.Second), inUse: i, window: 5, plan: 5,
			depth: map[string]int{"0": 10 - i}, solved: int64(3 * i), failed: int64(i / 2),
			delayP50: 0.25, delayP99: 1.5,
			inflight: map[string]int{"qa": i, "ops": 0},
		}
		if i == 4 {
			s.depth["5"] = 2
		}
		if i != 3 {
			s.broker = map[string]int{"captcha.tasks": 7 * i}
		}
		h.add(s)
	}
	got := h.view()
	want := History{
		EverySeconds: 5, WindowSeconds: 20,
		T:            []float64{1_800_000_010, 1_800_000_015, 1_800_000_020, 1_800_000_025},
		ThreadsInUse: []float64{2, 3, 4, 5}, ThreadsWindow: []float64{5, 5, 5, 5}, ThreadsPlan: []float64{5, 5, 5, 5},
		Depth: map[string][]*float64{"0": {f(8), f(7), f(6), f(5)}, "5": {f(0), f(0), f(2), f(0)}},
		// Solved 6, 9, 12, 15: 3 per 5 s is 36 a minute.
		SolvedPerMin: []*float64{nil, f(36), f(36), f(36)},
		// Failed 1, 1, 2, 2: over 5, 10 and 15 seconds.
		FailedPerMin: []*float64{nil, f(0), f(6), f(4)},
		DelayP50Ms:   []float64{250, 250, 250, 250}, DelayP99Ms: []float64{1500, 1500, 1500, 1500},
		Inflight: map[string][]*float64{"qa": {f(2), f(3), f(4), f(5)}, "ops": {f(0), f(0), f(0), f(0)}},
		Broker:   map[string][]*float64{"captcha.tasks": {f(14), nil, f(28), f(35)}},
		Paused:   []bool{false, false, false, false},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("view (-want +got):\n%s", d)
	}
	// The JSON the page reads: nulls where unknown, no broker key without one.
	b, err := json.Marshal(h.view())
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	if q := raw["broker"].(map[string]any)["captcha.tasks"].([]any); q[1] != nil {
		t.Errorf("broker column %v: want null where the broker did not answer", q)
	}
}

// TestHistoryRateOverTheLastMinute: with two minutes of samples, the rate
// at each sample is over the minute before it only.
func TestHistoryRateOverTheLastMinute(t *testing.T) {
	t.Parallel()
	h := newHistory(10*time.Second, time.Hour, nil)
	t0 := time.Unix(1_800_000_000, 0)
	// 1 solved per 10 s for a minute, then 5 per 10 s.
	var solved int64
	for i := range 13 {
		if i > 0 && i <= 6 {
			solved++
		} else if i > 6 {
			solved += 5
		}
		h.add(sample{at: t0.Add(time.Duration(i) * 10 * time.Second), solved: solved})
	}
	got := h.view().SolvedPerMin
	want := []float64{6, 6, 6, 6, 6, 6, 10, 14, 18, 22, 26, 30}
	for i, w := range want {
		if got[i+1] == nil || *got[i+1] != w {
			t.Errorf("sample %d: solved per minute %v, want %v", i+1, deref(got[i+1]), w)
		}
	}
}

// TestHistoryReservoirs: each reservoir's hits, misses and expired per
// minute, null before it was first sampled and where its counts fell
// (set again with other params), and no reservoirs key without any.
func TestHistoryReservoirs(t *testing.T) {
	t.Parallel()
	h := newHistory(10*time.Second, time.Hour, nil)
	t0 := time.Unix(1_800_000_000, 0)
	shop := []reservoirTotals{{0, 0, 0}, {2, 1, 0}, {4, 1, 3}, {1, 0, 0}, {3, 0, 1}}
	for i, c := range shop {
		s := sample{at: t0.Add(time.Duration(i) * 10 * time.Second), reservoirs: map[string]reservoirTotals{"shop": c}}
		if i >= 3 {
			s.reservoirs["login"] = reservoirTotals{hits: int64(i)}
		}
		h.add(s)
	}
	got := h.view().Reservoirs
	want := map[string]ReservoirHistory{
		// Over the samples from the first: hits 2 in 10 s, 4 in 20 s;
		// then a fall, and from there 2 in 10 s.
		"shop": {HitsPerMin: []*float64{nil, f(12), f(12), nil, f(12)}, MissesPerMin: []*float64{nil, f(6), f(3), nil, f(0)},
			ExpiredPerMin: []*float64{nil, f(0), f(9), nil, f(6)}},
		"login": {HitsPerMin: []*float64{nil, nil, nil, nil, f(6)}, MissesPerMin: []*float64{nil, nil, nil, nil, f(0)},
			ExpiredPerMin: []*float64{nil, nil, nil, nil, f(0)}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("reservoir columns (-want +got):\n%s", d)
	}
	h = newHistory(10*time.Second, time.Hour, nil)
	h.add(sample{at: t0})
	if b, _ := json.Marshal(h.view()); strings.Contains(string(b), "reservoirs") {
		t.Errorf("history without reservoirs: %s, want no reservoirs key", b)
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestHistoryStartStop starts and stops the sampling loop many times,
// sampling every millisecond: each run takes its first sample at once,
// Stop waits for a sample under way, and no goroutine is left. Not
// parallel, so the goroutine check sees this test's goroutines only.
func TestHistoryStartStop(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var reads, reading atomic.Int32
	h := newHistory(time.Millisecond, time.Second, func(ctx context.Context, now time.Time) sample {
		reads.Add(1)
		if reading.Add(1) != 1 {
			t.Error("two samples taken at once")
		}
		defer reading.Add(-1)
		return sample{at: now}
	})
	const cycles = 100
	for range cycles {
		if err := h.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		h.Stop()
		if n := reading.Load(); n != 0 {
			t.Fatalf("after Stop: %d samples still being taken", n)
		}
	}
	n := int(reads.Load())
	if n < cycles {
		t.Fatalf("%d samples in %d runs, want at least one a run", n, cycles)
	}
	if got, want := len(h.samples()), min(n, len(h.ring)); got != want {
		t.Errorf("%d samples held after %d taken, want %d", got, n, want)
	}
}
