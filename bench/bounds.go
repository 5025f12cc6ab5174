package bench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/sim"
)

// PollBounds are what any poller can reach on a batch when each id may be
// polled at most once per Gap and answers come only by polling (no
// pingbacks), whatever its design: computed from the simulator's solve
// time distributions, not from a run. A target past a bound is out of
// reach for every client polling under that gap.
type PollBounds struct {
	Gap time.Duration
	// WithinP50 is the largest share of answers any poller can fetch
	// within TargetReadyP50 (scaled) of their being ready: each id on the
	// schedule best for its kind, with unlimited requests. The p50 target
	// needs half of them.
	WithinP50 float64
	// MeanWait is the least mean wait from ready to fetched, each id on
	// the schedule best for its kind, with unlimited requests. An answer
	// holds its thread while it waits (the provider frees it, but the
	// client cannot know until it fetches the answer).
	MeanWait time.Duration
	// HeldShare is the waits summed over the solve times summed: how much
	// longer than the drawn solve times the threads are taken while tasks
	// wait for them, at least.
	HeldShare float64
	// MakespanHeld is the makespan, as a multiple of the floor, that the
	// held answers alone give: every task's wait but the last Threads'
	// (those end the batch instead) added to the drawn solve times. The
	// drain of the last solves comes on top.
	MakespanHeld float64
	// RequestsP99 is the fewest requests per task, submits included, with
	// which a poller that knows each kind's distribution, but not each
	// task's draw, can expect at most 1% of the answers to wait longer
	// than TargetReadyP99 (scaled): a round covers the answers that became
	// ready in the TargetReadyP99 before it, and time left uncovered costs
	// the answers expected to become ready in it (the hazard of every
	// task in flight), on the batch started longest first on the threads
	// and each thread's next task started the moment its answer is ready.
	RequestsP99 float64
}

// boundStep is the time grid of the bounds, in steps per Gap.
const boundStep = 100

// Bounds computes the PollBounds of tasks on s's simulator with the
// per-id gap gap (at s's scale already); seed draws the solve times of the
// batch RequestsP99 is computed on.
func Bounds(tasks []captchaq.Task, s Sim, gap time.Duration, seed uint64) (PollBounds, error) {
	c := s.config()
	if gap <= 0 || len(tasks) == 0 {
		return PollBounds{}, fmt.Errorf("bench: bounds need a positive gap and tasks")
	}
	scale := c.LatencyScale // s.config sets it: 1 unless s.Scale says
	lat := func(k provider.Kind) solveLaw {
		l, ok := c.Latency[k]
		if !ok {
			l = sim.DefaultLatency[k]
		}
		return lawOf(l, scale)
	}
	laws := make([]solveLaw, len(tasks))
	for i, t := range tasks {
		k, err := t.ProviderTask().Kind()
		if err != nil {
			return PollBounds{}, fmt.Errorf("bench: bounds: task %s: %w", t.ID, err)
		}
		laws[i] = lat(k)
	}
	g := gap.Seconds()
	p50, p99 := TargetReadyP50.Seconds()*scale, TargetReadyP99.Seconds()*scale
	b := PollBounds{Gap: gap}
	// Each kind's measures, computed once: a batch has few kinds.
	type measures struct{ wait, within, mean float64 }
	perLaw := map[solveLaw]measures{}
	var waits, solves float64
	for _, l := range laws {
		m, ok := perLaw[l]
		if !ok {
			m = measures{l.leastMeanWait(g), l.mostWithin(g, p50), l.mean()}
			perLaw[l] = m
		}
		waits += m.wait
		b.WithinP50 += m.within
		solves += m.mean
	}
	n := float64(len(laws))
	b.WithinP50 /= n
	b.MeanWait = time.Duration(waits / n * 1e9)
	b.HeldShare = waits / solves
	threads := c.Threads
	if threads <= 0 {
		threads = sim.ThreadsDefault
	}
	b.MakespanHeld = 1 + b.HeldShare*max(n-float64(threads), 0)/n
	rounds := leastRoundsP99(laws, tasks, threads, p99, float64(len(laws)-int(math.Ceil(0.99*n))), seed)
	b.RequestsP99 = 1 + rounds/n
	return b, nil
}

// PollUtilization is the most any client can keep a plan's threads
// solving, on tasks whose solve times l draws, when answers come only by
// polling each id at most once per gap (no pingbacks) and a thread takes
// its next task only once its answer is fetched (as captchaq's thread
// accounting does: it learns that a thread is free from the answer, not
// from the provider's threadsinfo). It is the mean
// solve time over itself plus wait, the least mean wait from ready to
// fetched (each id on its best schedule, with unlimited requests).
func PollUtilization(l sim.Latency, gap time.Duration) (utilization float64, wait time.Duration) {
	law := lawOf(l, 1)
	w, m := law.leastMeanWait(gap.Seconds()), law.mean()
	return m / (m + w), time.Duration(w * 1e9)
}

// lawOf is l in seconds, its times multiplied by scale.
func lawOf(l sim.Latency, scale float64) solveLaw {
	return solveLaw{median: float64(l.Median) * scale / 1e9, spread: l.Spread, min: float64(l.Min) * scale / 1e9, max: float64(l.Max) * scale / 1e9}
}

// solveLaw is the simulator's solve time distribution of a kind (sim.
// Latency, in seconds): log-normal around median, clamped to [min, max].
type solveLaw struct{ median, spread, min, max float64 }

// cdf is P(solve ≤ x).
func (l solveLaw) cdf(x float64) float64 {
	switch {
	case x < l.min:
		return 0
	case l.max > 0 && x >= l.max:
		return 1
	case l.spread == 0:
		if x >= l.median {
			return 1
		}
		return 0
	}
	return normCDF(math.Log(x/l.median) / l.spread)
}

// hazard is the rate at which an answer not ready at age a becomes ready,
// of the distribution's continuous part: a solve clamped to exactly min
// or max is predictable, so a poller may catch it at no cost.
func (l solveLaw) hazard(a float64) float64 {
	if a <= l.min || (l.max > 0 && a >= l.max) || l.spread == 0 || a <= 0 {
		return 0
	}
	z := math.Log(a/l.median) / l.spread
	pdf := math.Exp(-z*z/2) / (math.Sqrt(2*math.Pi) * a * l.spread)
	return pdf / (1 - normCDF(z))
}

// mean is the mean solve time, by the grid of its quantiles.
func (l solveLaw) mean() float64 {
	const k = 2000
	var s float64
	for i := range k {
		s += l.quantile((float64(i) + 0.5) / k)
	}
	return s / k
}

func (l solveLaw) quantile(p float64) float64 {
	x := l.median * math.Exp(l.spread*math.Sqrt2*math.Erfinv(2*p-1))
	x = max(x, l.min)
	if l.max > 0 {
		x = min(x, l.max)
	}
	return x
}

func (l solveLaw) horizon() float64 {
	if l.max > 0 {
		return l.max
	}
	return l.quantile(1 - 1e-9)
}

func normCDF(z float64) float64 { return 0.5 * math.Erfc(-z/math.Sqrt2) }

// grid is the distribution on a grid of gap/boundStep: F at each point
// and G, the integral of F from 0 by left sums (F only grows, so G errs
// low, and so do the waits: a bound stays a bound).
func (l solveLaw) grid(gap float64) (dt float64, F, G []float64) {
	dt = gap / boundStep
	n := int(math.Ceil(l.horizon()/dt)) + boundStep + 1
	F, G = make([]float64, n), make([]float64, n)
	for i := range n {
		F[i] = l.cdf(float64(i) * dt)
		if i > 0 {
			G[i] = G[i-1] + F[i-1]*dt
		}
	}
	return dt, F, G
}

// leastMeanWait is the least expected wait of one answer from ready to
// fetched, polled at most once per gap, on the best schedule (dynamic
// programming over poll times on the grid). One more poll never makes a
// wait longer, so the best schedule's first poll comes within a gap of
// the submit and each next one within two gaps of the last.
func (l solveLaw) leastMeanWait(gap float64) float64 {
	dt, F, G := l.grid(gap)
	n := len(F)
	// cost(i, j): the wait of the answers ready after poll i (or the
	// submit, i = 0 with F 0) until poll j: ∫ (F(t) − F(tᵢ)) over them.
	cost := func(i, j int) float64 { return G[j] - G[i] - F[i]*float64(j-i)*dt }
	w := make([]float64, n) // w[i]: the least wait still to come after a poll at i
	for i := n - 1; i >= 0; i-- {
		if F[i] >= 1-1e-9 {
			continue
		}
		w[i] = math.Inf(1)
		for j := i + boundStep; j < min(i+2*boundStep, n); j++ {
			w[i] = min(w[i], cost(i, j)+w[j])
		}
	}
	best := math.Inf(1)
	for j := range min(boundStep, n) {
		best = min(best, G[j]+w[j])
	}
	return best
}

// mostWithin is the largest share of answers fetched within win of
// being ready, polled at most once per gap, on the best schedule.
func (l solveLaw) mostWithin(gap, win float64) float64 {
	dt, F, _ := l.grid(gap)
	n := len(F)
	back := int(math.Ceil(win / dt)) // lenient by up to one grid step
	caught := func(i, j int) float64 { return F[j] - F[max(i, j-back)] }
	v := make([]float64, n)
	for i := n - 1; i >= 0; i-- {
		for j := i + boundStep; j < min(i+2*boundStep, n); j++ {
			v[i] = max(v[i], caught(i, j)+v[j])
		}
	}
	best := 0.0
	for j := range min(boundStep, n) {
		best = max(best, F[j]-F[max(0, j-back)]+v[j])
	}
	return best
}

// leastRoundsP99 is the fewest poll rounds that leave at most late
// answers expected to wait longer than win, on tasks started longest
// first on threads, each next task the moment a thread's answer is
// ready, with solve times drawn by seed.
func leastRoundsP99(laws []solveLaw, tasks []captchaq.Task, threads int, win, late float64, seed uint64) float64 {
	order := make([]int, len(tasks))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return int(tasks[b].ExpectedSolveTime() - tasks[a].ExpectedSolveTime())
	})
	type run struct {
		law        solveLaw
		start, end float64
	}
	rng := rand.New(rand.NewPCG(seed, 0xb0d5))
	free := make([]float64, threads)
	runs := make([]run, 0, len(tasks))
	for _, i := range order {
		l := laws[i]
		d := max(l.median*math.Exp(l.spread*rng.NormFloat64()), l.min)
		if l.max > 0 {
			d = min(d, l.max)
		}
		t := slices.Index(free, slices.Min(free))
		runs = append(runs, run{l, free[t], free[t] + d})
		free[t] += d
	}
	span := slices.Max(free)
	dt := win / boundStep
	var rate []float64 // answers expected to become ready per second, at each step
	for t := 0.0; t < span; t += dt {
		var r float64
		for _, x := range runs {
			if t >= x.start && t < x.end {
				r += x.law.hazard(t - x.start)
			}
		}
		rate = append(rate, r)
	}
	// Leave uncovered the steps where answers are least likely, until
	// the answers expected in them reach late.
	slices.Sort(rate)
	var expected float64
	uncovered := 0
	for _, r := range rate {
		if expected+r*dt > late {
			break
		}
		expected += r * dt
		uncovered++
	}
	return float64(len(rate)-uncovered) * dt / win
}
