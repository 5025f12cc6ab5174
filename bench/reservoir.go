package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/sim"
)

// Defaults of the reservoir scenario: serve's plan and share, one
// Turnstile task a second for 2 minutes.
const (
	ReservoirDurationDefault = 2 * time.Minute
	ReservoirRateDefault     = 1.0
	// ReservoirClientPoll is how often the scenario's client polls after
	// its first poll, which comes right after its submit.
	ReservoirClientPoll = 100 * time.Millisecond
	// reservoirQuiet is how long a run watches for refills once the
	// demand stopped and none is in flight; reservoirTail bounds that
	// watch.
	reservoirQuiet = 10 * time.Second
	reservoirTail  = time.Minute
	burstSize      = 10
)

// ReservoirThreadsDefault are the plans the reservoir scenario runs on:
// serve's default and one of 20 threads.
var ReservoirThreadsDefault = []int{5, 20}

// Demands are the reservoir scenario's demand patterns, each a function
// of the mean rate (tasks a second) and the duration giving the offsets
// of the submits from the start.
var Demands = map[string]func(rate float64, d time.Duration) []time.Duration{
	// steady: one submit every 1/rate.
	"steady": func(rate float64, d time.Duration) []time.Duration { return evenly(rate, 0, d) },
	// bursty: burstSize submits at once, every burstSize/rate.
	"bursty": func(rate float64, d time.Duration) []time.Duration {
		var out []time.Duration
		for _, at := range evenly(rate/burstSize, 0, d) {
			for range burstSize {
				out = append(out, at)
			}
		}
		return out
	},
	// stepped: half the rate for the first half, the rate for the second.
	"stepped": func(rate float64, d time.Duration) []time.Duration {
		return append(evenly(rate/2, 0, d/2), evenly(rate, d/2, d)...)
	},
}

// DemandNames are the keys of Demands in report order.
var DemandNames = []string{"steady", "bursty", "stepped"}

// evenly is one offset every 1/rate from from, before to.
func evenly(rate float64, from, to time.Duration) []time.Duration {
	var out []time.Duration
	step := time.Duration(float64(time.Second) / rate)
	for at := from; at < to; at += step {
		out = append(out, at)
	}
	return out
}

// ReservoirConfig configures the reservoir scenario. Zero fields take
// defaults.
type ReservoirConfig struct {
	// Threads are the plans to run on; Share is Config.ReservoirShare.
	Threads []int
	Share   float64
	// Rate is the demand's mean rate, tasks a second; Duration how long
	// it lasts.
	Rate     float64
	Duration time.Duration
	// Demands names the patterns, keys of Demands (default all).
	Demands []string
	Seed    uint64
	Log     io.Writer
}

func (c ReservoirConfig) withDefaults() ReservoirConfig {
	if len(c.Threads) == 0 {
		c.Threads = ReservoirThreadsDefault
	}
	if c.Share == 0 {
		c.Share = captchaq.ReservoirShareDefault
	}
	if c.Rate == 0 {
		c.Rate = ReservoirRateDefault
	}
	if c.Duration == 0 {
		c.Duration = ReservoirDurationDefault
	}
	if len(c.Demands) == 0 {
		c.Demands = DemandNames
	}
	return c
}

// ReservoirRow is one run of the reservoir scenario.
type ReservoirRow struct {
	Demand    string
	Threads   int
	Reservoir bool // one "size": "auto" reservoir, or none
	// Tasks are the client's submits; Hits those answered from the
	// reservoir, Failed those not solved.
	Tasks, Hits, Failed int
	// ToToken is each solved task's time from its submit to the poll
	// that got its token; Late those submitted after the first minute.
	ToToken, Late []time.Duration
	// Solved, HandedOut and Expired are the reservoir's counts; Left the
	// tokens in stock at the end, never handed out.
	Solved, HandedOut, Expired int64
	Left                       int
	// Paid are the solves the simulator made (client tasks and refills).
	Paid int64
	// RefillsAfter counts the refills started after the demand stopped;
	// RefillsEnd is when the last refill in flight ended, from the stop
	// (0: none was in flight), and RefillsOn that some still ran when
	// the run stopped watching.
	RefillsAfter int64
	RefillsEnd   time.Duration
	RefillsOn    bool
	PeakThreads  int
}

// Percentile is the nearest-rank p-quantile of ds (0 when empty).
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// PolledAt is when a client that submits at submit, has its answer (or
// id) back at back, and polls then and every every after, sees a result
// ready at ready: the time from its submit.
func PolledAt(submit, back, ready time.Time, every time.Duration) time.Duration {
	if !ready.After(back) {
		return back.Sub(submit)
	}
	polls := (ready.Sub(back) + every - 1) / every
	return back.Add(polls * every).Sub(submit)
}

// Waste is the tokens solved but never handed out, and their share of
// those solved in percent (0 when none was solved).
func Waste(solved, handedOut int64) (int64, float64) {
	n := solved - handedOut
	if solved <= 0 {
		return n, 0
	}
	return n, 100 * float64(n) / float64(solved)
}

// CostRatio is the solves paid for each token delivered: 1 when each
// task is solved on demand (0 when none was delivered).
func CostRatio(paid int64, delivered int) float64 {
	if delivered <= 0 {
		return 0
	}
	return float64(paid) / float64(delivered)
}

// reservoirTask is the captcha the scenario's client asks for and its
// reservoir holds.
func reservoirTask() captchaq.Task {
	return captchaq.Task{Method: "turnstile", Params: map[string]string{"sitekey": "0x4AAAAAAAC3DHQFLr1GavRN", "pageurl": "https://shop.example/checkout"}}
}

// Reservoir runs the reservoir scenario: for each plan and demand, one
// run with an auto-sized reservoir and one without, all at once (each on
// its own simulator, Turnstile solved in 2–6 s, real time).
func Reservoir(ctx context.Context, c ReservoirConfig) ([]ReservoirRow, error) {
	c = c.withDefaults()
	type job struct {
		demand  string
		threads int
		res     bool
	}
	var jobs []job
	for _, th := range c.Threads {
		for _, d := range c.Demands {
			if Demands[d] == nil {
				return nil, fmt.Errorf("bench: demand %q: use steady, bursty or stepped", d)
			}
			jobs = append(jobs, job{d, th, true}, job{d, th, false})
		}
	}
	rows := make([]ReservoirRow, len(jobs))
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Go(func() {
			rows[i], errs[i] = runReservoir(ctx, c, j.demand, j.threads, j.res)
			if c.Log != nil && errs[i] == nil {
				fmt.Fprintf(c.Log, "reservoir: %s, %d threads, reservoir %v: %d tasks, %d hits\n", j.demand, j.threads, j.res, rows[i].Tasks, rows[i].Hits)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return rows, err
		}
	}
	return rows, nil
}

// runReservoir is one run: the demand's submits against a fresh
// simulator and queue, then a watch of the refills until they stop.
func runReservoir(ctx context.Context, c ReservoirConfig, demand string, threads int, withRes bool) (ReservoirRow, error) {
	row := ReservoirRow{Demand: demand, Threads: threads, Reservoir: withRes}
	s := Sim{Threads: threads, Seed: c.Seed, Latency: map[provider.Kind]sim.Latency{provider.KindTurnstile: MixLatency["fast"][provider.KindTurnstile]}}
	srv, base, err := sim.Start(s.config(), "127.0.0.1:0")
	if err != nil {
		return row, fmt.Errorf("bench: start simulator: %w", err)
	}
	defer srv.Close()
	e := EngineRun{Name: demand}
	if withRes {
		e.Reservoirs = []captchaq.ReservoirConfig{{Name: "shop", Task: reservoirTask(), Max: 50}}
		e.ReservoirShare = c.Share
	}
	q, stop, err := startEngine(ctx, s, base, e)
	if err != nil {
		return row, err
	}
	defer stop()
	w := &refillWatch{q: q}
	start := time.Now()
	at := Demands[demand](c.Rate, c.Duration)
	row.Tasks = len(at)
	type answer struct {
		took    time.Duration
		late    bool
		hit, ok bool
	}
	answers := make(chan answer, len(at))
	for i, off := range at {
		if err := sleepUntil(ctx, start.Add(off)); err != nil {
			return row, err
		}
		go func() {
			t := reservoirTask()
			t.ID = fmt.Sprintf("bench-%s-%05d", demand, i)
			got := make(chan gotResult, 1)
			t0 := time.Now()
			if err := q.SubmitFunc(ctx, t, func(r captchaq.Result) { got <- gotResult{r, time.Now()} }); err != nil {
				answers <- answer{}
				return
			}
			back := time.Now()
			select {
			case r := <-got:
				took := PolledAt(t0, back, r.at, ReservoirClientPoll)
				answers <- answer{took, off >= time.Minute, r.Reservoir != "", r.Status == captchaq.StatusSolved}
			case <-ctx.Done():
				answers <- answer{}
			}
		}()
	}
	if err := sleepUntil(ctx, start.Add(c.Duration)); err != nil {
		return row, err
	}
	stopped := time.Now()
	w.mark()
	clientsDone, watched := make(chan struct{}), make(chan struct{})
	if withRes {
		go func() { w.watch(ctx, stopped, clientsDone, &row); close(watched) }()
	} else {
		close(watched)
	}
	for range at {
		a := <-answers
		switch {
		case !a.ok:
			row.Failed++
			continue
		case a.hit:
			row.Hits++
		}
		row.ToToken = append(row.ToToken, a.took)
		if a.late {
			row.Late = append(row.Late, a.took)
		}
	}
	close(clientsDone)
	<-watched
	if err := ctx.Err(); err != nil {
		return row, err
	}
	st := srv.Stats()
	row.Paid, row.PeakThreads = st.Solved, st.PeakThreadsInUse
	return row, nil
}

// gotResult is a result and when the client was handed it.
type gotResult struct {
	captchaq.Result
	at time.Time
}

// refillWatch follows a queue's one reservoir's refills.
type refillWatch struct {
	q      *captchaq.Queue
	atStop int64 // refills started when the demand stopped
}

// started are the refills started so far, and the reservoir's counts.
func (w *refillWatch) started() (int64, captchaq.ReservoirCounts) {
	rs := w.q.Reservoirs()
	if len(rs) == 0 {
		return 0, captchaq.ReservoirCounts{}
	}
	r := rs[0]
	return r.Solved + r.Failed + int64(r.InFlight), r
}

func (w *refillWatch) mark() { w.atStop, _ = w.started() }

// sleepUntil waits for t or ctx.
func sleepUntil(ctx context.Context, t time.Time) error {
	select {
	case <-time.After(time.Until(t)):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// watch samples the reservoir every client poll from the stop until the
// client has every answer and no refill has run for reservoirQuiet (or
// reservoirTail passed), and fills row's reservoir figures, only those.
func (w *refillWatch) watch(ctx context.Context, stopped time.Time, clientsDone <-chan struct{}, row *ReservoirRow) {
	tick := time.NewTicker(ReservoirClientPoll)
	defer tick.Stop()
	var idleSince time.Time
	for {
		n, c := w.started()
		now := time.Now()
		if c.InFlight > 0 {
			idleSince, row.RefillsEnd = time.Time{}, now.Sub(stopped)
		} else if idleSince.IsZero() {
			idleSince = now
		}
		done := false
		select {
		case <-clientsDone:
			done = true
		default:
		}
		quiet := !idleSince.IsZero() && now.Sub(idleSince) >= reservoirQuiet
		if done && (quiet || now.Sub(stopped) >= reservoirTail) || ctx.Err() != nil {
			row.RefillsOn = c.InFlight > 0
			row.RefillsAfter = n - w.atStop
			row.Solved, row.HandedOut, row.Expired, row.Left = c.Solved, c.HandedOut, c.Expired, c.Stock
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
}

// ReservoirMarkdown writes the reservoir scenario's table, each demand's
// runs side by side.
func ReservoirMarkdown(w io.Writer, c ReservoirConfig, rows []ReservoirRow) {
	c = c.withDefaults()
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
		misses := fmt.Sprint(r.Tasks - r.Hits)
		if r.Failed > 0 {
			misses += fmt.Sprintf(" (%d failed)", r.Failed)
		}
		res, tokens, waste, after := "none", "–", "–", "–"
		if r.Reservoir {
			n, pct := Waste(r.Solved, r.HandedOut)
			res, waste = "auto", fmt.Sprintf("%d (%.0f%%)", n, pct)
			tokens = fmt.Sprintf("%d / %d / %d / %d", r.Solved, r.HandedOut, r.Expired, r.Left)
			after = fmt.Sprintf("%d started; last ends +%.1f s", r.RefillsAfter, r.RefillsEnd.Seconds())
			if r.RefillsOn {
				after = fmt.Sprintf("%d started; still running at +%v", r.RefillsAfter, reservoirTail)
			}
		}
		fmt.Fprintf(w, "| %s | %d (%d) | %s | %d | %d / %s | %s | %s | %s | %s | %.2f | %s | %d |\n",
			r.Demand, r.Threads, int(math.Floor(c.Share*float64(r.Threads)+1e-9)), res, r.Tasks, r.Hits, misses,
			p50p99(r.ToToken), p50p99(r.Late), tokens, waste, CostRatio(r.Paid, len(r.ToToken)), after, r.PeakThreads)
	}
	fmt.Fprintln(w)
}

// p50p99 is "P50 / P99" of ds in seconds, or "–".
func p50p99(ds []time.Duration) string {
	if len(ds) == 0 {
		return "–"
	}
	return fmt.Sprintf("%.3f / %.3f s", Percentile(ds, 0.5).Seconds(), Percentile(ds, 0.99).Seconds())
}
