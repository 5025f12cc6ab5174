package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestPercentileNearestRank: the p-quantile is the ceil(p×n)-th smallest.
func TestPercentileNearestRank(t *testing.T) {
	ms := time.Millisecond
	var ds []time.Duration
	for i := 200; i >= 1; i-- { // out of order on purpose
		ds = append(ds, time.Duration(i)*ms)
	}
	for _, c := range []struct {
		ds   []time.Duration
		p    float64
		want time.Duration
	}{
		{ds, 0.5, 100 * ms}, {ds, 0.99, 198 * ms}, {ds, 1, 200 * ms}, {ds, 0, 1 * ms},
		{[]time.Duration{7 * ms}, 0.99, 7 * ms}, {[]time.Duration{3 * ms, 1 * ms, 2 * ms}, 0.5, 2 * ms}, {nil, 0.5, 0},
	} {
		if got := Percentile(c.ds, c.p); got != c.want {
			t.Errorf("Percentile(%d samples, %v) = %v, want %v", len(c.ds), c.p, got, c.want)
		}
	}
	if ds[0] != 200*ms {
		t.Errorf("Percentile sorted its argument: ds[0] = %v", ds[0])
	}
}

// TestPolledAt: a result ready by the first poll (right after the submit)
// is seen then; a later one at the next 100 ms poll.
func TestPolledAt(t *testing.T) {
	ms := time.Millisecond
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	back := t0.Add(3 * ms)
	for _, c := range []struct {
		ready time.Duration // from t0
		want  time.Duration
	}{
		{1 * ms, 3 * ms}, {3 * ms, 3 * ms}, {4 * ms, 103 * ms}, {103 * ms, 103 * ms}, {104 * ms, 203 * ms}, {3503 * ms, 3503 * ms},
	} {
		if got := PolledAt(t0, back, t0.Add(c.ready), ReservoirClientPoll); got != c.want {
			t.Errorf("ready at +%v: polled at +%v, want +%v", c.ready, got, c.want)
		}
	}
}

// TestWasteAndCost: waste is what was solved and never handed out, as a
// share of the solved; cost is solves paid per token delivered.
func TestWasteAndCost(t *testing.T) {
	if n, pct := Waste(120, 111); n != 9 || pct != 7.5 {
		t.Errorf("Waste(120, 111) = %d, %v%%; want 9, 7.5%%", n, pct)
	}
	if n, pct := Waste(0, 0); n != 0 || pct != 0 {
		t.Errorf("Waste(0, 0) = %d, %v%%; want 0, 0%%", n, pct)
	}
	if got := CostRatio(135, 120); got != 1.125 {
		t.Errorf("CostRatio(135, 120) = %v, want 1.125", got)
	}
	if got := CostRatio(5, 0); got != 0 {
		t.Errorf("CostRatio(5, 0) = %v, want 0", got)
	}
}

// TestDemands: each pattern makes rate × duration submits, stepped at
// half the rate for its first half.
func TestDemands(t *testing.T) {
	for name, want := range map[string]int{"steady": 120, "bursty": 120, "stepped": 90} {
		if got := len(Demands[name](1, 2*time.Minute)); got != want {
			t.Errorf("%s at 1/s for 2m: %d submits, want %d", name, got, want)
		}
	}
	at := Demands["bursty"](1, 30*time.Second)
	if at[9] != 0 || at[10] != 10*time.Second || at[29] != 20*time.Second {
		t.Errorf("bursty: submits 9, 10, 29 at %v, %v, %v; want 0s, 10s, 20s", at[9], at[10], at[29])
	}
	at = Demands["stepped"](1, 20*time.Second)
	if len(at) != 15 || at[4] != 8*time.Second || at[5] != 10*time.Second || at[6] != 11*time.Second {
		t.Errorf("stepped at 1/s for 20s: %v; want every 2 s to 8 s, then every second from 10 s", at)
	}
}

// TestReservoirMarkdown: a row's figures land in their columns.
func TestReservoirMarkdown(t *testing.T) {
	ms := time.Millisecond
	rows := []ReservoirRow{
		{Demand: "steady", Threads: 20, Reservoir: true, Tasks: 4, Hits: 3, ToToken: []time.Duration{2 * ms, 3 * ms, 4 * ms, 3500 * ms},
			Solved: 10, HandedOut: 3, Expired: 1, Left: 6, Paid: 11, RefillsAfter: 2, RefillsEnd: 4200 * ms, PeakThreads: 6},
		{Demand: "steady", Threads: 20, Tasks: 4, ToToken: []time.Duration{3 * ms, 3 * ms, 4 * ms, 3500 * ms}, Paid: 4, PeakThreads: 2},
	}
	var b bytes.Buffer
	ReservoirMarkdown(&b, ReservoirConfig{}, rows)
	for _, want := range []string{
		"| steady | 20 (5) | auto | 4 | 3 / 1 | 0.003 / 3.500 s | – | 10 / 3 / 1 / 6 | 7 (70%) | 2.75 | 2 started; last ends +4.2 s | 6 |",
		"| steady | 20 (5) | none | 4 | 0 / 4 | 0.003 / 3.500 s | – | – | – | 1.00 | – | 2 |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

// TestReservoirServeMarkdown: the serve front's row adds the 2captcha
// client, the refills' end against the p90 solve and the token checks.
func TestReservoirServeMarkdown(t *testing.T) {
	ms := time.Millisecond
	rows := []ReservoirRow{{Demand: "steady", Threads: 20, Reservoir: true, Tasks: 5, Hits: 4,
		ToToken: []time.Duration{2 * ms, 3 * ms, 4 * ms}, PlainTasks: 2, PlainFirst: 1, Plain: []time.Duration{2 * ms, 10002 * ms},
		Solved: 6, HandedOut: 4, Left: 2, RefillsEnd: 3400 * ms, Verified: 5, Paid: 7, PeakThreads: 8}}
	var b bytes.Buffer
	ReservoirMarkdown(&b, ReservoirConfig{Front: FrontServe}, rows)
	want := "| steady | 20 (5) | auto | 5 | 4 / 1 | 0.003 / 0.004 s | – | 1 of 2, 0.002 / 10.002 s | 6 / 4 / 0 / 2 | 2 (33%) | " +
		"none starts; the last ends +3.4 s (0.66×) | 5 / 0 / 0 / 0 | 1.40 | 8 |"
	if !strings.Contains(b.String(), want) || !strings.Contains(b.String(), "p90 solve 5.1 s") {
		t.Errorf("report lacks %q or the p90 solve:\n%s", want, b.String())
	}
}
