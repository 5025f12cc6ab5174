package bench

import (
	"bytes"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/sim"
)

// fixed makes every kind take exactly d.
func fixed(d time.Duration) map[provider.Kind]sim.Latency {
	m := map[provider.Kind]sim.Latency{}
	for k := range sim.DefaultLatency {
		m[k] = sim.Latency{Median: d, Min: d, Max: d}
	}
	return m
}

func TestTasksMix(t *testing.T) {
	t.Parallel()
	tasks := Tasks(300, MixRealistic, 7)
	if got := MixCounts(300, MixRealistic); got != "120 image, 90 turnstile, 75 recaptcha v2, 15 recaptcha v3" {
		t.Fatalf("MixCounts = %q", got)
	}
	seen := map[string]bool{}
	for _, x := range tasks {
		if seen[x.ID] {
			t.Fatalf("duplicate id %s", x.ID)
		}
		seen[x.ID] = true
		if err := x.ProviderTask().Validate(); err != nil {
			t.Fatalf("task %s invalid: %v", x.ID, err)
		}
	}
	again := Tasks(300, MixRealistic, 7)
	for i := range tasks {
		if tasks[i].ID != again[i].ID {
			t.Fatalf("order differs at %d for the same seed", i)
		}
	}
}

// With fixed latencies the seed model polls each task exactly
// ceil(latency/poll) times, and every task is solved. The clock is
// synctest's and the simulator is served in process: on the loopback
// simulator with real timers, a loaded machine fired the second poll
// (100 ms after the first) past the 250 ms solve and counted 35 polls.
func TestSeedRunCounts(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const n, threads = 12, 4
		s := Sim{Threads: threads, Latency: fixed(250 * time.Millisecond), Seed: 3}
		srv, err := sim.New(s.config())
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		row, err := runSeed(t.Context(), srv, sim.InProcessBaseURL, srv.InProcessClient(), threads, Tasks(n, MixRealistic, 3), SeedRun{Name: "seed", PollEvery: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		// ceil(250/100) = 3 polls a task, one submit.
		if row.Solved != n || row.Failed != 0 || row.Submits != n || row.Polls != 3*n || row.Requests != 4*n || row.RequestsPerSolved != 4 {
			t.Fatalf("row %+v", row)
		}
		if row.PeakThreads != threads || row.Bans != 0 || row.ReadyToFetched.Count != n {
			t.Fatalf("row %+v", row)
		}
		// Three batches of four, each 3 × 100 ms of fake time.
		if row.Makespan != 900*time.Millisecond {
			t.Fatalf("makespan %v of fake time, want 900ms", row.Makespan)
		}
	})
}

func TestEngineRunCounts(t *testing.T) {
	t.Parallel()
	const n, threads = 40, 8
	s := Sim{Threads: threads, Latency: fixed(100 * time.Millisecond), Seed: 4}
	row, err := RunEngine(t.Context(), s, Tasks(n, MixRealistic, 4), EngineRun{Name: "engine", PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if row.Solved != n || row.Failed != 0 || row.Submits != n || row.Requests != row.Submits+row.Polls || row.Bans != 0 || row.NoSlot != 0 {
		t.Fatalf("row %+v", row)
	}
	if row.PeakThreads != threads || row.ReadyToFetched.Count != n || row.Makespan <= 0 {
		t.Fatalf("row %+v", row)
	}
	// Bulk polls: fewer poll requests than tasks.
	if row.Polls >= n {
		t.Fatalf("%d polls for %d tasks: not polling in bulk", row.Polls, n)
	}
}

// With SolveBatch the tasks go over in one call; every one is solved once.
func TestEngineRunSolveBatch(t *testing.T) {
	t.Parallel()
	const n = 30
	s := Sim{Threads: 10, Instant: true, Seed: 6}
	row, err := RunEngine(t.Context(), s, Tasks(n, MixRealistic, 6), EngineRun{Name: "batch", PollInterval: 20 * time.Millisecond, SolveBatch: true})
	if err != nil {
		t.Fatal(err)
	}
	if row.Solved != n || row.Failed != 0 || row.Submits != n || row.Makespan <= 0 {
		t.Fatalf("row %+v", row)
	}
}

func TestEngineRunPingback(t *testing.T) {
	t.Parallel()
	const n = 10
	s := Sim{Threads: 5, Latency: fixed(50 * time.Millisecond), Seed: 5}
	row, err := RunEngine(t.Context(), s, Tasks(n, MixRealistic, 5), EngineRun{Name: "pb", PollInterval: time.Second, Pingback: true})
	if err != nil {
		t.Fatal(err)
	}
	// Every answer came by pingback: with a 1 s interval the fallback poll
	// (well past 10 s) never went out.
	if row.Solved != n || row.Pingbacks != n || row.Polls != 0 || row.Requests != n {
		t.Fatalf("row %+v", row)
	}
}

func TestMixedReportTiny(t *testing.T) {
	t.Parallel()
	rep, err := Mixed(t.Context(), MixedConfig{Tasks: 20, Threads: 5, Scale: 0.01, Seed: 2, PollIntervals: []time.Duration{time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Seed.Solved != 20 || rep.Script.Solved != 20 || len(rep.Engine) != 3 {
		t.Fatalf("report %+v", rep)
	}
	for _, row := range append([]Row{rep.Seed, rep.Script}, rep.Engine...) {
		if row.Solved != 20 || row.Floor <= 0 || row.Makespan < row.Floor || row.MaxPollsPerTask < 1 || row.MaxPollsPerTask > row.Polls {
			t.Fatalf("row %+v: want 20 solved, a makespan no shorter than its floor and the most polls of a task counted", row)
		}
	}
	var b bytes.Buffer
	rep.Markdown(&b)
	for _, want := range []string{"## mixed, realistic mix: 20 tasks (8 image, 6 turnstile, 5 recaptcha v2, 1 recaptcha v3), 5 threads, scale 0.01",
		"| seed model (poll every 5s) | 20 | 0 |", "| script (bulk poll every 500ms) | 20 | 0 |", "| engine, defaults | 20 | 0 |", "| engine, PollInterval 1s | 20 | 0 |", "| engine + pingback (PollInterval 1s) | 20 | 0 |",
		"| 0.1000 |"} {
		if !strings.Contains(b.String(), want) {
			t.Fatalf("report lacks %q:\n%s", want, b.String())
		}
	}
}

func TestMixedShortMix(t *testing.T) {
	t.Parallel()
	rep, err := Mixed(t.Context(), MixedConfig{Tasks: 20, Threads: 5, Scale: 0.01, Seed: 2, Mix: "short", PollIntervals: []time.Duration{time.Second}, NoPingback: true})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	rep.Markdown(&b)
	want := "## mixed, short mix: 20 tasks (14 image, 3 turnstile, 2 recaptcha v2, 1 recaptcha v3), 5 threads, scale 0.01"
	if !strings.Contains(b.String(), want) {
		t.Fatalf("report lacks %q:\n%s", want, b.String())
	}
	if _, err := Mixed(t.Context(), MixedConfig{Mix: "long"}); err == nil || !strings.Contains(err.Error(), `mix "long": use one of fast, realistic, short`) {
		t.Fatalf("unknown mix: err = %v", err)
	}
}

func TestSeedsMarkdown(t *testing.T) {
	t.Parallel()
	row := func(name string, util float64, makespan time.Duration) Row {
		r := Row{Name: name, Utilization: util, RequestsPerSolved: 1.4, Makespan: makespan, Floor: 10 * time.Second}
		r.ReadyToFetched.P50, r.ReadyToFetched.P99 = 0.1, 0.5
		return r
	}
	rep := func(seed uint64, a, b time.Duration) MixedReport {
		return MixedReport{Config: MixedConfig{Mix: "short", Seed: seed, Scale: 1}, Script: row("script", 0.9, 12*time.Second),
			Engine: []Row{row("a", 0.96, a), row("b", 0.97, b)}}
	}
	var buf bytes.Buffer
	SeedsMarkdown(&buf, []MixedReport{
		rep(1, 10*time.Second, 11*time.Second),
		rep(2, 12*time.Second, 10*time.Second),
		rep(3, 10500*time.Millisecond, 10200*time.Millisecond),
	})
	want := `### short mix: medians over 3 seeds

| run | utilization | p50 | p99 | requests/solved | frontier | makespan vs floor | all targets |
|---|---|---|---|---|---|---|---|
| script | 0.900 | 0.100 s | 0.500 s | 1.40 | 0.0400 | 1.200× | FAIL |
| a | 0.960 | 0.100 s | 0.500 s | 1.40 | 0.0160 | 1.050× | PASS |
| b | 0.970 | 0.100 s | 0.500 s | 1.40 | 0.0120 | 1.020× | PASS |

### short mix: makespan vs the floor over 3 seeds

| run | sim seed 1 | sim seed 2 | sim seed 3 | median |
|---|---|---|---|---|
| script | 1.200× | 1.200× | 1.200× | 1.200× |
| a | 1.000× | 1.200× | 1.050× | 1.050× |
| b | 1.100× | 1.000× | 1.020× | 1.020× |

`
	if buf.String() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", buf.String(), want)
	}
}

func TestMedianRun(t *testing.T) {
	t.Parallel()
	runs := []Row{
		{Name: "a", Solved: 100, Makespan: 4 * time.Second},
		{Name: "b", Solved: 100, Makespan: time.Second},
		{Name: "c", Solved: 100, Makespan: 2 * time.Second},
	}
	med, lo, hi := medianRun(runs)
	if med.Name != "c" || lo != 25 || hi != 100 {
		t.Fatalf("medianRun = %s, %v, %v; want c, 25, 100", med.Name, lo, hi)
	}
	if runs[0].Name != "a" {
		t.Fatalf("medianRun reordered its argument: %v", runs)
	}
}
