package bench

import (
	"fmt"
	"io"
	"math"
	"time"
)

// ReservoirMarkdown writes the reservoir scenario's table, each demand's
// runs side by side.
func ReservoirMarkdown(w io.Writer, c ReservoirConfig, rows []ReservoirRow) {
	c = c.withDefaults()
	if c.Front == FrontServe {
		reservoirServeMarkdown(w, c, rows)
		return
	}
	fmt.Fprintf(w, "## reservoir: Turnstile solved in 2–6 s, %g tasks/s for %v\n\n", c.Rate, c.Duration)
	fmt.Fprintf(w, "Every run at once, each on its own simulator (seed %d) and queue: one reservoir (\"size\": \"auto\", max 50, "+
		"refills within %g of the plan's threads) or none. The client polls right after its submit and every %v; "+
		"time to token is from its submit. Bursty: %d tasks at once every %g s; stepped: half the rate, then the rate, "+
		"for half the time each. Waste: tokens solved, never handed out (expired or left in stock).\n\n",
		c.Seed, c.Share, ReservoirClientPoll, burstSize, burstSize/c.Rate)
	fmt.Fprintln(w, "| demand | threads (refills) | reservoir | tasks | hits / misses | to token p50 / p99 | after 60 s | "+
		"solved / handed out / expired / left | waste | solves paid per token | refills after the stop | peak threads |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		res, tokens, waste, after := r.cells()
		fmt.Fprintf(w, "| %s | %s | %s | %d | %s | %s | %s | %s | %s | %.2f | %s | %d |\n",
			r.Demand, threadsCell(c, r), res, r.Tasks, hitsCell(r), p50p99(r.ToToken), p50p99(r.Late), tokens, waste,
			CostRatio(r.Paid, r.Tasks-r.Failed), after, r.PeakThreads)
	}
	fmt.Fprintln(w)
}

// reservoirServeMarkdown is the serve front's table: both clients, the
// refills' end against the solve time, and the demo site's verdicts.
func reservoirServeMarkdown(w io.Writer, c ReservoirConfig, rows []ReservoirRow) {
	p90 := SolveP90(c.Captcha)
	fmt.Fprintf(w, "## reservoir on serve: %s (the fast mix, p90 solve %.1f s), %g tasks/s for %v\n\n", c.Captcha, p90.Seconds(), c.Rate, c.Duration)
	fmt.Fprintf(w, "Every run at once, each its own `captchaq sim` (seed %d) and `captchaq serve` at its defaults but --threads, "+
		"with one reservoir (\"size\": \"auto\", max 50) or none. Every %dth submit is an unchanged 2captcha client's "+
		"(res.php right after its submit, then every %v); the others poll right after it, then every %v. "+
		"Time to token is from the submit; every token is verified once at the demo site.\n\n",
		c.Seed, c.PlainEvery, ReservoirPlainPoll, ReservoirClientPoll)
	fmt.Fprintln(w, "| demand | threads (refills) | reservoir | tasks | hits / misses | to token p50 / p99 | after 60 s | "+
		"2captcha client: token at first poll, p50 / p99 | solved / handed out / expired / left | waste | "+
		"refills after the stop (ends × p90 solve) | verified / rejected / twice / short of min_life | solves paid per token | peak threads |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		res, tokens, waste, after := r.cells()
		if r.Reservoir && !r.RefillsOn {
			start := "none starts"
			if r.RefillsAfter > 0 {
				start = fmt.Sprintf("%d start, the last +%.1f s", r.RefillsAfter, r.RefillsStart.Seconds())
			}
			after = fmt.Sprintf("%s; the last ends +%.1f s (%.2f×)", start, r.RefillsEnd.Seconds(), r.RefillsEnd.Seconds()/p90.Seconds())
		}
		fmt.Fprintf(w, "| %s | %s | %s | %d | %s | %s | %s | %d of %d, %s | %s | %s | %s | %d / %d / %d / %d | %.2f | %d |\n",
			r.Demand, threadsCell(c, r), res, r.Tasks, hitsCell(r), p50p99(r.ToToken), p50p99(r.Late),
			r.PlainFirst, r.PlainTasks, p50p99(r.Plain), tokens, waste, after,
			r.Verified, r.Rejected, r.Twice, r.Short, CostRatio(r.Paid, r.Tasks-r.Failed), r.PeakThreads)
	}
	fmt.Fprintln(w)
}

// cells are a row's reservoir, tokens, waste and refills cells.
func (r ReservoirRow) cells() (res, tokens, waste, after string) {
	if !r.Reservoir {
		return "none", "–", "–", "–"
	}
	n, pct := Waste(r.Solved, r.HandedOut)
	res, waste = "auto", fmt.Sprintf("%d (%.0f%%)", n, pct)
	tokens = fmt.Sprintf("%d / %d / %d / %d", r.Solved, r.HandedOut, r.Expired, r.Left)
	after = fmt.Sprintf("%d started; last ends +%.1f s", r.RefillsAfter, r.RefillsEnd.Seconds())
	if r.RefillsOn {
		after = fmt.Sprintf("%d started; still running at +%v", r.RefillsAfter, reservoirTail)
	}
	return res, tokens, waste, after
}

func threadsCell(c ReservoirConfig, r ReservoirRow) string {
	return fmt.Sprintf("%d (%d)", r.Threads, int(math.Floor(c.Share*float64(r.Threads)+1e-9)))
}

func hitsCell(r ReservoirRow) string {
	misses := fmt.Sprint(r.Tasks - r.Hits)
	if r.Failed > 0 {
		misses += fmt.Sprintf(" (%d failed)", r.Failed)
	}
	return fmt.Sprintf("%d / %s", r.Hits, misses)
}

// p50p99 is "P50 / P99" of ds in seconds, or "–".
func p50p99(ds []time.Duration) string {
	if len(ds) == 0 {
		return "–"
	}
	return fmt.Sprintf("%.3f / %.3f s", Percentile(ds, 0.5).Seconds(), Percentile(ds, 0.99).Seconds())
}
