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
	lat := "default latencies"
	if MixLatency[c.Mix] != nil {
		lat = "the mix's latencies"
	}
	fmt.Fprintf(w, "Each row ran against its own fresh simulator (seed %d, %s ×%g, poll ban on at its defaults with window and duration ×%g). "+
		"Intervals are named at scale 1; the run used them ×%g. Latency columns are measured seconds; the targets are scaled the same way. "+
		"The floor is the simulator's drawn solve times summed ÷ threads (or the longest one if larger); "+
		"the frontier is (requests/solved − 1) × (1 − utilization), where fixed-interval bulk polling sits near 1/(2×threads) = %.4f.\n\n",
		c.Seed, lat, c.Scale, c.Scale, c.Scale, 1/(2*float64(c.Threads)))
	fmt.Fprintln(w, "| run | solved | failed | utilization | ready→fetched p50 | p99 | max | requests/solved | submits | polls | polls/task max | frontier | makespan | floor | vs floor | vs seed | bans | CPU |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	rows := append([]Row{r.Seed, r.Script}, r.Engine...)
	for _, x := range rows {
		fmt.Fprintf(w, "| %s | %d | %d | %.3f | %.3f s | %.3f s | %.3f s | %.2f | %d | %d | %d | %.4f | %s | %s | %.3f× | %.2f× | %d | %s |\n",
			x.Name, x.Solved, x.Failed, x.Utilization, x.ReadyToFetched.P50, x.ReadyToFetched.P99, x.ReadyToFetched.Max,
			x.RequestsPerSolved, x.Submits, x.Polls, x.MaxPollsPerTask, Frontier(x), secs(x.Makespan), secs(x.Floor), ratio(x.Makespan, x.Floor),
			ratio(x.Makespan, r.Seed.Makespan), x.Bans, x.CPU.Round(time.Millisecond))
	}
	f := c.Scale
	fmt.Fprintf(w, "\nTargets for the engine at its defaults: utilization ≥ %.2f, ready→fetched p50 ≤ %.3f s and p99 ≤ %.3f s (%v and %v ×%g), requests/solved ≤ %.2f, makespan ≤ %.2f× the floor.\n\n",
		TargetUtilization, scaled(TargetReadyP50, f).Seconds(), scaled(TargetReadyP99, f).Seconds(), TargetReadyP50, TargetReadyP99, f, TargetRequestsPerJob, TargetMakespanFloor)
	fmt.Fprintf(w, "| run | utilization | p50 | p99 | requests | makespan | all | frontier | 1/(2×threads) |\n")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, x := range append([]Row{r.Script}, r.Engine...) {
		v := r.Judge(x)
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %.4f | %.4f |\n", x.Name, passFail(v.Utilization), passFail(v.ReadyP50),
			passFail(v.ReadyP99), passFail(v.Requests), passFail(v.Makespan), passFail(v.All()), Frontier(x), 1/(2*float64(c.Threads)))
	}
	fmt.Fprintln(w)
	if r.Bounds.Gap > 0 {
		r.Bounds.Markdown(w, c)
	}
}

// Markdown writes the bounds beside the targets they limit.
func (b PollBounds) Markdown(w io.Writer, c MixedConfig) {
	f := c.Scale
	fmt.Fprintf(w, "What any client can reach on this batch with each id polled at most once per %v and no pingbacks, whatever its design "+
		"(bench.Bounds, from the simulator's solve time distributions, each id on the schedule best for its kind):\n\n", b.Gap)
	fmt.Fprintln(w, "| bound | value | target | within reach |")
	fmt.Fprintln(w, "|---|---|---|---|")
	fmt.Fprintf(w, "| answers fetched within %.3f s of ready, at most (any number of requests) | %.1f%% | half (p50 ≤ %.3f s) | %s |\n",
		scaled(TargetReadyP50, f).Seconds(), 100*b.WithinP50, scaled(TargetReadyP50, f).Seconds(), yesNo(b.WithinP50 >= 0.5))
	fmt.Fprintf(w, "| requests/solved for p99 ≤ %.3f s, at least (knowing each kind's distribution, not each draw) | %.2f | ≤ %.2f | %s |\n",
		scaled(TargetReadyP99, f).Seconds(), b.RequestsP99, TargetRequestsPerJob, yesNo(b.RequestsP99 <= TargetRequestsPerJob))
	fmt.Fprintf(w, "| makespan from answers holding their threads alone, at least (any number of requests) | %.3f× the floor | ≤ %.2f× | %s |\n",
		b.MakespanHeld, TargetMakespanFloor, yesNo(b.MakespanHeld <= TargetMakespanFloor))
	fmt.Fprintf(w, "\nAn answer waits %.3f s from ready to fetched on average at least, %.1f%% of the solve time, and holds its thread meanwhile "+
		"(the provider frees it, the client cannot know before it fetches the answer); the makespan bound counts that for every task but the last %d, "+
		"and leaves out the drain of the last solves (see the pingback row, which fetches at once).\n\n", b.MeanWait.Seconds(), 100*b.HeldShare, c.Threads)
}

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

// ratio is a/b, or NaN when b is zero.
func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}

// SeedsMarkdown writes, for reports of one mix run with different seeds,
// each row's median over the seeds of every measure the targets judge
// (each measure's own median, not one run's), then the makespan against
// the floor per seed: the end of a batch waits on its last long task, so
// one run's makespan moves by several seconds from seed to seed.
func SeedsMarkdown(w io.Writer, reps []MixedReport) {
	if len(reps) == 0 {
		return
	}
	c := reps[0].Config
	rowsOf := func(r MixedReport) []Row { return append([]Row{r.Script}, r.Engine...) }
	names := rowsOf(reps[0])
	fmt.Fprintf(w, "### %s mix: medians over %d seeds\n\n", c.Mix, len(reps))
	fmt.Fprintln(w, "| run | utilization | p50 | p99 | requests/solved | frontier | makespan vs floor | all targets |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for i, row := range names {
		var util, p50, p99, req, front, span []float64
		for _, r := range reps {
			rows := rowsOf(r)
			if i >= len(rows) {
				continue
			}
			x := rows[i]
			util, p50, p99 = append(util, x.Utilization), append(p50, x.ReadyToFetched.P50), append(p99, x.ReadyToFetched.P99)
			req, front, span = append(req, x.RequestsPerSolved), append(front, Frontier(x)), append(span, ratio(x.Makespan, x.Floor))
		}
		med := Row{Utilization: median(util), RequestsPerSolved: median(req), Makespan: time.Duration(median(span) * float64(time.Second)), Floor: time.Second}
		med.ReadyToFetched.P50, med.ReadyToFetched.P99 = median(p50), median(p99)
		fmt.Fprintf(w, "| %s | %.3f | %.3f s | %.3f s | %.2f | %.4f | %.3f× | %s |\n", row.Name, med.Utilization, med.ReadyToFetched.P50,
			med.ReadyToFetched.P99, med.RequestsPerSolved, median(front), median(span), passFail(reps[0].Judge(med).All()))
	}
	fmt.Fprintln(w)
	if b := reps[0].Bounds; b.Gap > 0 {
		var reqs []float64
		for _, r := range reps {
			reqs = append(reqs, r.Bounds.RequestsP99)
		}
		b.RequestsP99 = median(reqs)
		fmt.Fprintf(w, "Bounds: the requests' is the median over the %d seeds' batches.\n\n", len(reps))
		b.Markdown(w, c)
	}
	fmt.Fprintf(w, "### %s mix: makespan vs the floor over %d seeds\n\n", c.Mix, len(reps))
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
	for i, row := range names {
		fmt.Fprintf(w, "| %s |", row.Name)
		var ratios []float64
		for _, r := range reps {
			x := math.NaN()
			if rows := rowsOf(r); i < len(rows) {
				x = ratio(rows[i].Makespan, rows[i].Floor)
			}
			ratios = append(ratios, x)
			fmt.Fprintf(w, " %.3f× |", x)
		}
		fmt.Fprintf(w, " %.3f× |\n", median(ratios))
	}
	fmt.Fprintln(w)
}

// median is the middle value (the upper one of an even count), NaN for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
