package bench

import (
	"cmp"
	"fmt"
	"io"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/sim"
)

// FleetMarkdown writes the fleet runs as one table, with the targets of
// issue 27 under it.
func FleetMarkdown(w io.Writer, reps []FleetReport) {
	if len(reps) == 0 {
		return
	}
	c := reps[0].Config
	fmt.Fprintf(w, "## fleet: %d Turnstile tasks of %s, a %d-thread plan, %d × `captchaq worker --threads %d` at their defaults\n\n",
		c.Tasks, latencyText(c.Latency), c.Threads, c.Workers, c.Threads)
	fmt.Fprintf(w, "The fault strikes one worker (or the broker) %v after the enqueue starts; a partition and a SIGSTOP last %v. "+
		"Ready→fetched is the simulator's: from each answer ready to the poll that first fetched it. "+
		"Twice counts tasks given two different answers; copies, results that reached the results queue again as an answer given already "+
		"(collect and the gateway keep one); paid twice, the simulator's second accepted submits of one task.\n\n", c.FaultAt, c.Outage)
	fmt.Fprintln(w, "| fault | lost | twice | copies | paid twice | ready→fetched p50 | p99 | max | makespan | floor | 1.4×floor+3 s | utilization | no free thread | fault over at | load |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range reps {
		over := "–"
		if r.FaultDone > 0 {
			over = secs(r.FaultDone)
		}
		fmt.Fprintf(w, "| %s | %d | %d | %d | %d | %.2f s | %.2f s | %.2f s | %s | %s | %s | %.3f | %d of %d | %s | %s |\n",
			r.Config.Fault, r.Lost, r.DeliveredTwice, r.Copies, r.PaidTwice, r.ReadyToFetched.P50, r.ReadyToFetched.P99, r.ReadyToFetched.Max,
			secs(r.Makespan), secs(r.Floor), secs(r.MakespanTarget()), r.Utilization, r.NoSlot, r.Submits, over, r.Load)
	}
	fmt.Fprintf(w, "\nTargets with one worker SIGKILLed: ready→fetched p99 ≤ 3 s, makespan ≤ 1.4 × the floor + 3 s, utilization ≥ %.2f, "+
		"\"no free thread\" ≤ 1%% of submits, 0 lost, ≤ 1 paid twice; a partition: answers wait no longer than the broker's heartbeat timeout + 3 s.\n", fleetUtilizationTarget)
	fmt.Fprintln(w)
	pollBoundMarkdown(w, c.Latency)
}

// pollBoundMarkdown says the most utilization any polling client reaches
// on solve times l under the default per-id gap, beside the target.
func pollBoundMarkdown(w io.Writer, l sim.Latency) {
	gap := captchaq.PollGapDefault
	u, wait := PollUtilization(l, gap)
	fmt.Fprintf(w, "Utilization bound: %.3f. Any client that polls each id at most once per %v (no pingbacks) and submits a thread's next task "+
		"only once its answer is fetched keeps these threads at most %.3f busy: on its best schedule an answer still waits %.3f s, "+
		"against a mean solve of %.3f s.", u, gap, u, wait.Seconds(), lawOf(l, 1).mean())
	if u < fleetUtilizationTarget {
		fmt.Fprintf(w, " The %.2f target is out of reach for a poller that frees a thread by its answer, on these solve times.", fleetUtilizationTarget)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w)
}

// latencyText says what solve times l draws: one time when its Spread
// is 0, else its median, spread and bounds.
func latencyText(l sim.Latency) string {
	if l.Spread == 0 {
		return fmt.Sprintf("%v each", min(max(l.Median, l.Min), cmp.Or(l.Max, l.Median)))
	}
	return fmt.Sprintf("median %v, spread %g, %v–%v", l.Median, l.Spread, l.Min, l.Max)
}

// fleetUtilizationTarget is the saturated utilization the fleet is to
// reach with one worker SIGKILLed.
const fleetUtilizationTarget = 0.92

// MakespanTarget is 1.4 × the floor + 3 s.
func (r FleetReport) MakespanTarget() time.Duration {
	return time.Duration(1.4*float64(r.Floor)) + 3*time.Second
}
