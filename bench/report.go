package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"time"
)

func passFail(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

// Markdown writes the mixed scenario's tables.
func (r MixedReport) Markdown(w io.Writer) {
	c := r.Config
	fmt.Fprintf(w, "## mixed, %s mix: %d tasks (%s), %d threads, scale %g\n\n", c.Mix, c.Tasks, MixCounts(c.Tasks, Mixes[c.Mix]), c.Threads, c.Scale)
	fmt.Fprintf(w, "Each row ran against its own fresh simulator (seed %d, default latencies ×%g, poll ban on at its defaults with window and duration ×%g). "+
		"Intervals are named at scale 1; the run used them ×%g. Latency columns are measured seconds; the targets are scaled the same way.\n\n", c.Seed, c.Scale, c.Scale, c.Scale)
	fmt.Fprintln(w, "| run | solved | failed | utilization | ready→fetched p50 | p99 | max | requests/solved | submits | polls | makespan | vs seed | peak threads | bans | CPU |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	rows := append([]Row{r.Seed}, r.Engine...)
	for _, x := range rows {
		ratio := 0.0
		if r.Seed.Makespan > 0 {
			ratio = float64(x.Makespan) / float64(r.Seed.Makespan)
		}
		fmt.Fprintf(w, "| %s | %d | %d | %.3f | %.3f s | %.3f s | %.3f s | %.2f | %d | %d | %s | %.2f× | %d | %d | %s |\n",
			x.Name, x.Solved, x.Failed, x.Utilization, x.ReadyToFetched.P50, x.ReadyToFetched.P99, x.ReadyToFetched.Max,
			x.RequestsPerSolved, x.Submits, x.Polls, secs(x.Makespan), ratio, x.PeakThreads, x.Bans, x.CPU.Round(time.Millisecond))
	}
	f := c.Scale
	fmt.Fprintf(w, "\nTargets for the engine: utilization ≥ %.2f, ready→fetched p50 ≤ %.3f s and p99 ≤ %.3f s (%v and %v ×%g), requests/solved ≤ %.1f, makespan ≤ %.1f× the seed model's.\n\n",
		TargetUtilization, scaled(TargetReadyP50, f).Seconds(), scaled(TargetReadyP99, f).Seconds(), TargetReadyP50, TargetReadyP99, f, TargetRequestsPerJob, TargetMakespanRatio)
	fmt.Fprintf(w, "| engine run | utilization | p50 | p99 | requests | makespan | all | (req/task − 1) × (1 − util) | 1/(2×threads) |\n")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, x := range r.Engine {
		v := r.Judge(x)
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %.4f | %.4f |\n", x.Name, passFail(v.Utilization), passFail(v.ReadyP50),
			passFail(v.ReadyP99), passFail(v.Requests), passFail(v.Makespan), passFail(v.All()), Frontier(x), 1/(2*float64(c.Threads)))
	}
	fmt.Fprintln(w)
}

// SeedsMarkdown writes, for reports of one mix run with different seeds,
// each engine row's makespan against the seed model's per seed and the
// median: the end of a batch waits on its last long task, so one run's
// makespan moves by several seconds from seed to seed.
func SeedsMarkdown(w io.Writer, reps []MixedReport) {
	if len(reps) == 0 {
		return
	}
	c := reps[0].Config
	fmt.Fprintf(w, "### %s mix: makespan vs the seed model over %d seeds\n\n", c.Mix, len(reps))
	fmt.Fprint(w, "| run |")
	for _, r := range reps {
		fmt.Fprintf(w, " sim seed %d |", r.Config.Seed)
	}
	fmt.Fprintln(w, " median |")
	fmt.Fprint(w, "|---|")
	for range reps {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w, "---|")
	for i, row := range reps[0].Engine {
		fmt.Fprintf(w, "| %s |", row.Name)
		var ratios []float64
		for _, r := range reps {
			ratio := math.NaN()
			if i < len(r.Engine) && r.Seed.Makespan > 0 {
				ratio = float64(r.Engine[i].Makespan) / float64(r.Seed.Makespan)
			}
			ratios = append(ratios, ratio)
			fmt.Fprintf(w, " %.2f× |", ratio)
		}
		slices.Sort(ratios)
		fmt.Fprintf(w, " %.2f× |\n", ratios[len(ratios)/2])
	}
	fmt.Fprintln(w)
}
