package bench

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/sim"
)

// The bounds of the mixes the targets were set on, as the report prints
// them: computed, so the same on every machine. Under a 500 ms per-id
// gap the fast mix leaves the p50 and the p99's requests within reach;
// the realistic mix leaves neither, for any client that polls.
func TestBoundsOfTheMixes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		mix  string
		n    int
		want string
	}{
		{"fast", 200, "within 0.200 s 55.3%, wait 0.209 s (5.2%), requests 1.28, makespan 1.047×"},
		{"realistic", 300, "within 0.200 s 43.9%, wait 0.236 s (2.4%), requests 1.73, makespan 1.022×"},
		{"short", 300, "within 0.200 s 46.1%, wait 0.231 s (4.7%), requests 1.30, makespan 1.044×"},
	} {
		b, err := Bounds(Tasks(c.n, Mixes[c.mix], 1), Sim{Threads: 20, Scale: 1, Seed: 1, Latency: MixLatency[c.mix]}, captchaq.PollGapDefault, 1)
		if err != nil {
			t.Fatal(err)
		}
		got := fmt.Sprintf("within 0.200 s %.1f%%, wait %.3f s (%.1f%%), requests %.2f, makespan %.3f×",
			100*b.WithinP50, b.MeanWait.Seconds(), 100*b.HeldShare, b.RequestsP99, b.MakespanHeld)
		if got != c.want {
			t.Errorf("%s mix: %s\n want %s", c.mix, got, c.want)
		}
	}
}

// A kind solved in exactly the same time is predictable: one poll at
// that time fetches every answer at once, and no round is needed to
// watch for answers that may come at any time.
func TestBoundsOfAPredictableKind(t *testing.T) {
	t.Parallel()
	img := captchaq.Task{ID: "i", Method: "base64", Params: map[string]string{"body": "aW1hZ2U="}}
	tasks := []captchaq.Task{img, img, img, img}
	s := Sim{Threads: 2, Scale: 1, Latency: map[provider.Kind]sim.Latency{provider.KindImage: {Median: 2 * time.Second}}}
	b, err := Bounds(tasks, s, 500*time.Millisecond, 1)
	if err != nil {
		t.Fatal(err)
	}
	if b.WithinP50 != 1 || b.MeanWait != 0 || b.RequestsP99 != 1 || b.MakespanHeld != 1 {
		t.Errorf("bounds %+v, want every answer within the p50, no wait, 1 request a task, makespan 1×", b)
	}
}

// A kind whose solve times spread over many gaps waits half a gap however
// it is polled (0.247 s: the grid's sums err low, by half a 5 ms step at
// most), and 40% of its answers (0.2 s of a 0.5 s gap) come within 0.2 s.
func TestBoundsOfASpreadKind(t *testing.T) {
	t.Parallel()
	rc := captchaq.Task{ID: "r", Method: "userrecaptcha", Params: map[string]string{"googlekey": "k", "pageurl": "https://a.example/"}}
	s := Sim{Threads: 1, Scale: 1, Latency: map[provider.Kind]sim.Latency{provider.KindRecaptchaV2: {Median: 30 * time.Second, Spread: 0.5, Min: time.Second, Max: 300 * time.Second}}}
	b, err := Bounds([]captchaq.Task{rc}, s, 500*time.Millisecond, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%.3f s, %.3f", b.MeanWait.Seconds(), b.WithinP50); got != "0.247 s, 0.400" {
		t.Errorf("mean wait, share within 0.2 s: %s, want 0.247 s, 0.400", got)
	}
}

// The report prints the bounds beside the targets, and says which are
// out of reach.
func TestBoundsMarkdown(t *testing.T) {
	t.Parallel()
	b := PollBounds{Gap: 500 * time.Millisecond, WithinP50: 0.439, MeanWait: 236 * time.Millisecond, HeldShare: 0.024, MakespanHeld: 1.022, RequestsP99: 1.734}
	var sb strings.Builder
	b.Markdown(&sb, MixedConfig{}.withDefaults())
	for _, want := range []string{
		"| answers fetched within 0.200 s of ready, at most (any number of requests) | 43.9% | half (p50 ≤ 0.200 s) | **no** |",
		"| requests/solved for p99 ≤ 0.600 s, at least (knowing each kind's distribution, not each draw) | 1.73 | ≤ 1.46 | **no** |",
		"| makespan from answers holding their threads alone, at least (any number of requests) | 1.022× the floor | ≤ 1.06× | yes |",
	} {
		if !strings.Contains(sb.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, sb.String())
		}
	}
}

// The fleet scenario's Turnstile solves (about 1.1 s on average) leave
// any polling client under the 0.92 utilization target at the default
// 500 ms per-id gap, and still under it at half that gap: an answer
// waits about a fifth of a solve on the best schedule.
func TestPollUtilizationOfTheFleet(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		gap  time.Duration
		want string
	}{
		{captchaq.PollGapDefault, "utilization 0.835, wait 0.217 s"},
		{250 * time.Millisecond, "utilization 0.912, wait 0.106 s"},
		{100 * time.Millisecond, "utilization 0.963, wait 0.042 s"},
	} {
		u, wait := PollUtilization(FleetLatencyDefault, c.gap)
		if got := fmt.Sprintf("utilization %.3f, wait %.3f s", u, wait.Seconds()); got != c.want {
			t.Errorf("gap %v: %s, want %s", c.gap, got, c.want)
		}
	}
	// A solve of exactly one time is caught by a poll at that time.
	if u, wait := PollUtilization(sim.Latency{Median: time.Second}, captchaq.PollGapDefault); u != 1 || wait != 0 {
		t.Errorf("fixed 1 s solves: utilization %v, wait %v; want 1 and 0", u, wait)
	}
}

// The fleet report prints the bound under its table and says the target
// is out of reach when it is.
func TestFleetMarkdownPrintsThePollBound(t *testing.T) {
	t.Parallel()
	var sb strings.Builder
	FleetMarkdown(&sb, []FleetReport{{Config: FleetConfig{}.withDefaults()}})
	want := "Utilization bound: 0.835. Any client that polls each id at most once per 500ms (no pingbacks) and submits a thread's next task " +
		"only once its answer is fetched keeps these threads at most 0.835 busy: on its best schedule an answer still waits 0.217 s, " +
		"against a mean solve of 1.094 s. The 0.92 target is out of reach for a poller that frees a thread by its answer, on these solve times.\n"
	if !strings.Contains(sb.String(), want) {
		t.Errorf("fleet report:\n%s\nwant a line\n%s", sb.String(), want)
	}
}
