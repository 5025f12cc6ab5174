package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/syncio"
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
	// ReservoirPlainPoll is how often the scenario's unchanged 2captcha
	// client polls after its first poll, which also comes right after its
	// submit: 2captcha-python's default (pollingInterval 10).
	ReservoirPlainPoll = 10 * time.Second
)

// The reservoir scenario's fronts.
const (
	FrontQueue = "queue" // a queue in the bench process, no HTTP
	FrontServe = "serve" // `captchaq sim` and `captchaq serve` processes, clients over HTTP
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
	// Front is FrontQueue (default) or FrontServe; Binary the captchaq
	// command FrontServe runs.
	Front, Binary string
	// Captcha is what the client asks for: "turnstile" (default) or
	// "recaptcha" (FrontServe only), at the "fast" mix's solve times.
	Captcha string
	// PlainEvery makes every PlainEvery-th submit the 2captcha client's
	// (ReservoirPlainPoll); 0: none. FrontServe's default is 5.
	PlainEvery int
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
	c.Captcha = cmp.Or(c.Captcha, "turnstile")
	if c.Front == FrontServe && c.PlainEvery == 0 {
		c.PlainEvery = 5
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
	// RefillsStart is when the last refill started, from the stop (0:
	// none started after it).
	RefillsStart time.Duration
	PeakThreads  int
	// PlainTasks are the 2captcha client's submits (ReservoirConfig.
	// PlainEvery), PlainFirst those it got at its first poll, Plain their
	// times to token (not in ToToken).
	PlainTasks, PlainFirst int
	Plain                  []time.Duration
	// Twice counts tokens handed out more than once; Verified and
	// Rejected the demo site's verdicts on the tokens (serve only); Short
	// the tokens with less than min_life left at their submit.
	Twice, Verified, Rejected, Short int
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
	switch {
	case c.Front != "" && c.Front != FrontQueue && c.Front != FrontServe:
		return nil, fmt.Errorf("bench: front %q: use queue or serve", c.Front)
	case c.Front == FrontServe && c.Binary == "":
		return nil, fmt.Errorf("bench: the serve front needs Binary, the captchaq command")
	case c.Front == FrontServe && c.Share != captchaq.ReservoirShareDefault:
		return nil, fmt.Errorf("bench: share %v: serve runs refills on its default share, %v", c.Share, captchaq.ReservoirShareDefault)
	case demoCaptchas[c.Captcha].method == "" || c.Captcha != "turnstile" && c.Front != FrontServe:
		return nil, fmt.Errorf("bench: captcha %q: use turnstile, or recaptcha with the serve front", c.Captcha)
	}
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
	// The runs go at once: one writer lets one line of theirs through at a time.
	c.Log = syncio.NewWriter(orDiscard(c.Log))
	rows := make([]ReservoirRow, len(jobs))
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Go(func() {
			rows[i], errs[i] = runReservoir(ctx, c, j.demand, j.threads, j.res)
			if errs[i] == nil {
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

// reservoirFront is what a run's client talks to: a queue in this
// process, or `captchaq serve` over HTTP.
type reservoirFront interface {
	// ask submits task i, as a client that polls right after its submit
	// and every every after, and returns what it got.
	ask(ctx context.Context, i int, every time.Duration) answer
	// counts are the reservoir's counts now (zero with none).
	counts() captchaq.ReservoirCounts
	// simStats are the simulator's counters.
	simStats() (sim.Stats, error)
	close()
}

// answer is what a client got for one task.
type answer struct {
	took time.Duration // from its submit to the poll that got its token
	// hit: answered from the reservoir; first: at its first poll.
	ok, hit, first bool
	token          string
	// verified and rejected: the demo site's verdict on the token (serve
	// only); short: it had less than min_life left at the submit.
	verified, rejected, short bool
	late, plain               bool // submitted after the first minute; by the 2captcha client
}

// runReservoir is one run: the demand's submits against a fresh
// simulator and front, then a watch of the refills until they stop.
func runReservoir(ctx context.Context, c ReservoirConfig, demand string, threads int, withRes bool) (ReservoirRow, error) {
	row := ReservoirRow{Demand: demand, Threads: threads, Reservoir: withRes}
	var f reservoirFront
	var err error
	if c.Front == FrontServe {
		f, err = startServeFront(ctx, c, threads, withRes)
	} else {
		f, err = startQueueFront(ctx, c, demand, threads, withRes)
	}
	if err != nil {
		return row, err
	}
	defer f.close()
	w := &refillWatch{counts: f.counts}
	start := time.Now()
	at := Demands[demand](c.Rate, c.Duration)
	row.Tasks = len(at)
	answers := make(chan answer, len(at))
	for i, off := range at {
		if err := sleepUntil(ctx, start.Add(off)); err != nil {
			return row, err
		}
		plain := c.PlainEvery > 0 && i%c.PlainEvery == c.PlainEvery-1
		every := ReservoirClientPoll
		if plain {
			every = ReservoirPlainPoll
		}
		go func() {
			a := f.ask(ctx, i, every)
			a.late, a.plain = off >= time.Minute, plain
			answers <- a
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
	tokens := map[string]int{}
	for range at {
		row.add(<-answers, tokens)
	}
	close(clientsDone)
	<-watched
	if err := ctx.Err(); err != nil {
		return row, err
	}
	st, err := f.simStats()
	row.Paid, row.PeakThreads = st.Solved, st.PeakThreadsInUse
	return row, err
}

// add counts a client's answer in the row; tokens counts the tokens
// handed out so far.
func (row *ReservoirRow) add(a answer, tokens map[string]int) {
	if !a.ok {
		row.Failed++
		return
	}
	if a.hit {
		row.Hits++
	}
	if tokens[a.token]++; tokens[a.token] == 2 {
		row.Twice++
	}
	row.Verified, row.Rejected, row.Short = row.Verified+b2i(a.verified), row.Rejected+b2i(a.rejected), row.Short+b2i(a.short)
	if a.plain {
		row.PlainTasks++
		row.PlainFirst += b2i(a.first)
		row.Plain = append(row.Plain, a.took)
		return
	}
	row.ToToken = append(row.ToToken, a.took)
	if a.late {
		row.Late = append(row.Late, a.took)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// gotResult is a result and when the client was handed it.
type gotResult struct {
	captchaq.Result
	at time.Time
}

// refillWatch follows a front's one reservoir's refills.
type refillWatch struct {
	counts func() captchaq.ReservoirCounts
	atStop int64 // refills started when the demand stopped
}

// started are the refills started so far, and the reservoir's counts.
func (w *refillWatch) started() (int64, captchaq.ReservoirCounts) {
	r := w.counts()
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
	seen := w.atStop
	for {
		n, c := w.started()
		now := time.Now()
		if n > seen {
			seen, row.RefillsStart = n, now.Sub(stopped)
		}
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
