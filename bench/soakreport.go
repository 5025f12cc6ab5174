package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/captchaq/captchaq/sim"
)

// report fills rep from the ledger, the pingbacks and the simulator, and
// lists the invariants that broke.
func (r *soakRun) report(rep *SoakReport, endRSS map[string]int64) {
	cfg := r.cfg
	l := r.ledger
	n, got := r.pingbacks.counts()
	st := r.sim.Stats()
	var all []time.Duration
	after := map[string][]time.Duration{}
	ids := map[string]bool{}
	var lost, wrong, two, noPingback, doubled []string // examples, for the reader of a failure
	note := func(list *[]string, t *soakTask) {
		if len(*list) < 5 {
			ans := "never"
			if !t.answered.IsZero() {
				ans = secs(t.answered.Sub(l.start))
			}
			*list = append(*list, fmt.Sprintf("%s (%s, accepted at %s, answered at %s)", t.id, t.host, secs(t.accepted.Sub(l.start)), ans))
		}
	}
	l.mu.Lock()
	rep.Submitted = len(l.tasks)
	for _, t := range l.tasks {
		if t.id == "" {
			continue
		}
		rep.Accepted++
		ids[t.id] = true
		if len(t.tokens) == 0 {
			rep.Lost++
			note(&lost, t)
			continue
		}
		rep.Answered++
		wrongPingback := slices.ContainsFunc(got[t.id], func(code string) bool { return !slices.Contains(t.tokens, code) })
		if t.wrong > 0 || wrongPingback {
			rep.WrongToken++
			note(&wrong, t)
		}
		if len(t.tokens) > 1 {
			rep.TwoTokens++
			note(&two, t)
		}
		switch k := n[t.id]; {
		case k == 0:
			rep.PingbacksMissing++
			note(&noPingback, t)
		case k > 1:
			rep.PingbacksDoubled++
			note(&doubled, t)
		}
		d := t.answered.Sub(t.accepted)
		all = append(all, d)
		at := t.accepted.Sub(l.start)
		for _, f := range rep.Faults {
			if at >= f.At && at < f.At+time.Minute {
				after[f.Kind] = append(after[f.Kind], d)
			}
		}
		if s := r.sim.SubmissionsOf(sim.Fingerprint("turnstile", map[string]string{
			"sitekey": sim.DemoTurnstile.SiteKey, "pageurl": "https://" + t.host + "/login"}, nil)); s > 1 {
			rep.Resent += int64(min(s-1, t.resent))
		}
	}
	for k, v := range l.answers {
		rep.Answers[k] = v
	}
	l.mu.Unlock()
	for id := range n {
		if !ids[id] {
			rep.PingbacksOther++
		}
	}
	rep.Latency = soakQuantiles(all)
	for k, ds := range after {
		rep.After[k] = soakQuantiles(ds)
	}
	rep.PaidTwice, rep.PlanPeak, rep.NoSlot, rep.Submits = st.Duplicates, st.PeakThreadsInUse, st.NoSlot, st.Calls.Submit
	var before int64 = st.Duplicates
	if len(rep.Faults) > 0 {
		before = rep.Faults[0].dupesAt
		last := &rep.Faults[len(rep.Faults)-1]
		last.PaidTwice = st.Duplicates - last.dupesAt // the others' were set at each next strike
	}
	names := make([]string, 0, len(r.startRSS))
	for name := range r.startRSS {
		names = append(names, name)
	}
	for name := range endRSS {
		if _, ok := r.startRSS[name]; !ok {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		rep.RSS = append(rep.RSS, SoakRSS{Name: name, Start: r.startRSS[name], End: endRSS[name]})
	}

	// The invariants.
	broke := func(format string, args ...any) { rep.Broken = append(rep.Broken, fmt.Sprintf(format, args...)) }
	if rep.Lost > 0 {
		broke("%d of %d accepted tasks lost (no answer %v after the client stopped): %s", rep.Lost, rep.Accepted, cfg.Drain,
			strings.Join(lost, ", "))
	}
	if rep.WrongToken > 0 {
		broke("%d tasks answered with a token not their own: %s", rep.WrongToken, strings.Join(wrong, ", "))
	}
	if rep.TwoTokens > 0 {
		broke("%d ids answered with two different tokens: %s", rep.TwoTokens, strings.Join(two, ", "))
	}
	if rep.PingbacksMissing > 0 {
		broke("%d answered tasks without a pingback: %s", rep.PingbacksMissing, strings.Join(noPingback, ", "))
	}
	if rep.PingbacksDoubled > 0 {
		broke("%d answered tasks with more than one pingback: %s", rep.PingbacksDoubled, strings.Join(doubled, ", "))
	}
	if rep.PlanPeak > cfg.Threads {
		broke("%d threads in use at the provider at once, over the plan's %d", rep.PlanPeak, cfg.Threads)
	}
	bound := 0
	for _, f := range rep.Faults {
		if f.Err != "" {
			broke("%s at %v could not be struck: %s", f.Kind, f.At.Round(time.Second), f.Err)
		}
		bound += SoakPaidTwiceBound(f.Kind, cfg.Threads)
	}
	if before > 0 {
		broke("%d tasks paid twice before the first fault", before)
	}
	if rep.PaidTwice-rep.Resent > int64(bound) {
		broke("%d tasks paid twice (%d of them sent twice by the client), over the faults' bound of %d",
			rep.PaidTwice, rep.Resent, bound)
	}
	for _, f := range rep.Faults {
		if f.Kind == SoakClose && f.PaidTwice > 0 {
			broke("%d tasks paid twice after the close at %v, want none", f.PaidTwice, f.At.Round(time.Second))
		}
	}
	for _, k := range cfg.Faults {
		if !slices.ContainsFunc(rep.Faults, func(f SoakFault) bool { return f.Kind == k }) {
			broke("fault %s never struck", k)
		}
	}
}

// soakQuantiles summarizes ds as the simulator's Quantiles.
func soakQuantiles(ds []time.Duration) sim.Quantiles {
	q := sim.Quantiles{Count: int64(len(ds))}
	if len(ds) == 0 {
		return q
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(p float64) float64 { return s[max(int(math.Ceil(p*float64(len(s))))-1, 0)].Seconds() }
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	q.Mean, q.P50, q.P90, q.P99, q.Max = sum.Seconds()/float64(len(s)), at(0.5), at(0.9), at(0.99), s[len(s)-1].Seconds()
	return q
}

// SoakMarkdown writes the soak's report as Markdown tables.
func SoakMarkdown(w io.Writer, r SoakReport) {
	c := r.Config
	verdict := "passed"
	if len(r.Broken) > 0 {
		verdict = "FAILED"
	}
	fmt.Fprintf(w, "## soak, seed %d: %s\n\n", c.Seed, verdict)
	fmt.Fprintf(w, "%d × `captchaq worker --threads %d`, %d × `captchaq serve --amqp` on PostgreSQL behind HAProxy, "+
		"a %d-thread plan of Turnstile solves of %s; a client submitting %g tasks/s through the balancer for %s, "+
		"a fault every %v–%v (a SIGSTOP or a partition lasts %v). "+
		"Rerun: `captchaq bench --scenario soak --duration %v --fault-gap %v-%v --seed %d`.\n\n",
		c.Workers, c.Threads, c.Replicas, c.Threads, latencyText(FleetLatencyDefault), c.Rate, secs(r.Elapsed), c.GapMin, c.GapMax, c.Outage,
		c.Duration, c.GapMin, c.GapMax, c.Seed)
	fmt.Fprintln(w, "| submitted | accepted | answered | lost | wrong token | two tokens | pingbacks missing | doubled | other ids | paid twice | sent twice | plan peak | no free thread | accept→answer p50 | p99 | max |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	fmt.Fprintf(w, "| %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d of %d | %d of %d | %.2f s | %.2f s | %.2f s |\n\n",
		r.Submitted, r.Accepted, r.Answered, r.Lost, r.WrongToken, r.TwoTokens, r.PingbacksMissing,
		r.PingbacksDoubled, r.PingbacksOther,
		r.PaidTwice, r.Resent, r.PlanPeak, c.Threads, r.NoSlot, r.Submits, r.Latency.P50, r.Latency.P99, r.Latency.Max)
	fmt.Fprintln(w, "| at | fault | target | took | paid twice until the next | bound |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, f := range r.Faults {
		took := secs(f.Took)
		if f.Err != "" {
			took = "failed: " + f.Err
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %d | %d |\n", secs(f.At), f.Kind, f.Target, took, f.PaidTwice, SoakPaidTwiceBound(f.Kind, c.Threads))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Accept→answer of the tasks accepted in the minute after each kind of fault:")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| fault | struck | tasks | p50 | p99 | max |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, k := range c.Faults {
		times := 0
		for _, f := range r.Faults {
			if f.Kind == k {
				times++
			}
		}
		q := r.After[k]
		fmt.Fprintf(w, "| %s | %d | %d | %.2f s | %.2f s | %.2f s |\n", k, times, q.Count, q.P50, q.P99, q.Max)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| process | RSS at the start | at the end |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, p := range r.RSS {
		fmt.Fprintf(w, "| %s | %s | %s |\n", p.Name, kib(p.Start), kib(p.End))
	}
	fmt.Fprintln(w)
	if len(r.Answers) > 0 {
		keys := make([]string, 0, len(r.Answers))
		for k := range r.Answers {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fmt.Fprintln(w, "Answers other than OK and CAPCHA_NOT_READY (the client tries again on each):")
		fmt.Fprintln(w)
		for _, k := range keys {
			fmt.Fprintf(w, "- `%s`: %d\n", k, r.Answers[k])
		}
		fmt.Fprintln(w)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "Known window: %s.\n\n", n)
	}
	if len(r.Broken) > 0 {
		fmt.Fprintf(w, "Broken: %s.\n\n", strings.Join(r.Broken, "; "))
	}
}

func kib(n int64) string {
	if n == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/1024)
}
