// Package pollsched is the default poll scheduler's model: it treats each
// poll request as a purchase, sent when the answer-seconds it would end
// (answers that are probably ready, weighted by what waiting costs) are
// worth the request. The root package doc gives the design and its
// numbers; the poller (one per provider) feeds this package its tasks in
// flight and asks when the next round is worth it and which ids it asks
// for.
//
// Nothing here reads a clock or takes a lock: a Learned is owned by one
// poller, which guards it, and every decision is a pure function of a
// snapshot and a time.
package pollsched

import (
	"math"
	"slices"
	"time"

	"github.com/captchaq/captchaq/provider"
)

const (
	// solveSamples is how many recent solves of a kind shape its learned
	// solve time distribution.
	solveSamples = 64
	// priorSpread is the spread (σ of the logarithm) of the prior solve
	// time distribution, centred on provider.MedianSolveTime, used until
	// a kind's first answer: wide, because providers differ by far.
	priorSpread = 1.0
	// requestCost is what one poll request is worth, in answer-seconds
	// per PollGap: a request goes out when the answers it probably
	// catches have waited, together, PollGap × requestCost (weighted).
	requestCost = 1.0
	// busyWeight is the weight of an answer's wait while tasks wait for a
	// thread: the caller waits, and so does a paid thread.
	busyWeight = 2.0
	// idleWeight is its weight on an idle queue: only the caller waits.
	idleWeight = 1.0
	// urgentWeight multiplies the weight of a task whose deadline is
	// nearer than urgentWithin PollGaps.
	urgentWeight = 4.0
	urgentWithin = 10
	// readyFloor: a round asks for an id only if answers of its kind are
	// at least this often ready at its age plus PollGap (by the learned
	// distribution blended with the prior). Asking for one that cannot
	// be ready yet would spend its per-id gap and delay the poll that
	// finds it.
	readyFloor = 0.01
	// roundsPerGap: the search for the next round's time starts with
	// steps of PollGap/roundsPerGap.
	roundsPerGap = 4
	// priorSamples is the prior's weight in the blend, in samples.
	priorSamples = 1
)

// dist is a kind's learned solve time distribution: the last solveSamples
// answers, each known only to lie in an interval (after the last poll
// that did not find it, before the one that did). Each interval counts as
// a uniform spread over it.
type dist struct {
	lo, hi []time.Duration
	next   int
}

func (d *dist) observe(lo, hi time.Duration) {
	lo, hi = max(lo, 0), max(hi, 0)
	if hi < lo {
		lo, hi = hi, lo
	}
	if len(d.lo) < solveSamples {
		d.lo, d.hi = append(d.lo, lo), append(d.hi, hi)
		return
	}
	d.lo[d.next], d.hi[d.next] = lo, hi
	d.next = (d.next + 1) % solveSamples
}

// cdf is the share of samples solved within x.
func (d *dist) cdf(x time.Duration) float64 {
	var s float64
	for i, lo := range d.lo {
		hi := d.hi[i]
		switch {
		case x >= hi:
			s++
		case x > lo:
			s += float64(x-lo) / float64(hi-lo)
		}
	}
	return s / float64(len(d.lo))
}

// integral is ∫₀ˣ cdf, in seconds.
func (d *dist) integral(x time.Duration) float64 {
	var s float64
	for i, lo := range d.lo {
		hi := d.hi[i]
		switch {
		case x >= hi:
			s += (hi-lo).Seconds()/2 + (x - hi).Seconds()
		case x > lo:
			w := (x - lo).Seconds()
			s += w * w / (2 * (hi - lo).Seconds())
		}
	}
	return s / float64(len(d.lo))
}

// Learned is one provider's learned solve time distributions, by kind.
// It is not safe for concurrent use: its poller guards it.
type Learned struct {
	dists map[provider.Kind]*dist
}

// NewLearned returns a Learned that knows no answer yet.
func NewLearned() *Learned { return &Learned{dists: map[provider.Kind]*dist{}} }

// Learn records an answer of kind k found at `at`, not ready at its last
// poll notReady (zero, or before submitted: none since the submit).
func (l *Learned) Learn(k provider.Kind, submitted, notReady, at time.Time) {
	d := l.dists[k]
	if d == nil {
		d = &dist{}
		l.dists[k] = d
	}
	if notReady.IsZero() || notReady.Before(submitted) {
		notReady = submitted
	}
	d.observe(notReady.Sub(submitted), at.Sub(submitted))
}

// Model is the solve time distribution of one kind: the learned samples,
// the log-normal prior before any answer, or, with tail set, the learned
// samples blended with the prior as priorSamples more samples.
//
// The blend keeps a tail past the longest answer learned. A kind's first
// answers are its fastest, so on the learned samples alone a task older
// than all of them looks certainly ready and is polled every PollGap
// until its answer comes: worth it while tasks wait for a thread (that
// thread is likely free), a waste on an idle queue, where the end of a
// small batch spent a request every PollGap on its last reCAPTCHAs
// (README's first command: 3 to 4 requests a task). So rounds are timed
// with the blend on an idle queue only. Which ids a round asks for is
// judged with it always (Due): from a kind's first few answers alone, an
// id younger than all of them looks certainly not ready.
type Model struct {
	d      *dist   // nil before any answer
	median float64 // prior, seconds
	tail   bool
}

// Models gives the distribution of each kind for one decision, made once
// per kind (pace reads every kind's samples); tail: blend in the prior.
// The caller guards l while it uses the result.
func (l *Learned) Models(tail bool) func(provider.Kind) Model {
	made := map[provider.Kind]Model{}
	return func(k provider.Kind) Model {
		if m, ok := made[k]; ok {
			return m
		}
		m := Model{tail: tail}
		if d := l.dists[k]; d != nil && len(d.lo) > 0 {
			m.d = d
		}
		if m.d == nil || tail {
			m.median = provider.MedianSolveTime(k).Seconds() * l.pace()
		}
		made[k] = m
		return m
	}
}

// blend is the model's value of a measure, from its learned and prior
// values.
func (m Model) blend(learned, prior func() float64) float64 {
	switch {
	case m.d == nil:
		return prior()
	case !m.tail:
		return learned()
	}
	n := float64(len(m.d.lo))
	return (n*learned() + priorSamples*prior()) / (n + priorSamples)
}

// pace is how fast this provider solves against the published medians:
// the median, over the kinds learned, of a kind's learned median ÷ its
// provider.MedianSolveTime; 1 before any answer. A provider twice as fast
// on images is likely faster on reCAPTCHA too, so the prior of a kind not
// yet seen follows it.
func (l *Learned) pace() float64 {
	var rs []float64
	for k, d := range l.dists {
		if len(d.lo) == 0 {
			continue
		}
		m := slices.Sorted(slices.Values(d.hi))[len(d.hi)/2]
		rs = append(rs, m.Seconds()/provider.MedianSolveTime(k).Seconds())
	}
	if len(rs) == 0 {
		return 1
	}
	slices.Sort(rs)
	return min(max(rs[len(rs)/2], 0.01), 1)
}

// CDF is the chance an answer of the kind is ready x after its submit.
func (m Model) CDF(x time.Duration) float64 {
	return m.blend(func() float64 { return m.d.cdf(x) }, func() float64 { return m.priorCDF(x) })
}

func (m Model) integral(x time.Duration) float64 {
	return m.blend(func() float64 { return m.d.integral(x) }, func() float64 { return m.priorIntegral(x) })
}

func (m Model) priorCDF(x time.Duration) float64 {
	if x <= 0 {
		return 0
	}
	return normCDF(math.Log(x.Seconds()/m.median) / priorSpread)
}

func (m Model) priorIntegral(x time.Duration) float64 {
	if x <= 0 {
		return 0
	}
	// ∫₀ˣ F = x·F(x) − E[X; X ≤ x] for a log-normal X.
	z := math.Log(x.Seconds()/m.median) / priorSpread
	return x.Seconds()*normCDF(z) - m.median*math.Exp(priorSpread*priorSpread/2)*normCDF(z-priorSpread)
}

func normCDF(z float64) float64 { return 0.5 * math.Erfc(-z/math.Sqrt2) }

// InFlight is one task in flight as a poller knows it.
type InFlight struct {
	Kind      provider.Kind
	Submitted time.Time
	// LastPoll is the last poll that found it not ready (zero: none).
	LastPoll time.Time
	// PolledAt is the start of the round that last asked for it (zero:
	// none): its per-id gap runs from there.
	PolledAt time.Time
	// NotBefore is the earliest its poll budget allows the next poll
	// (zero: any time).
	NotBefore time.Time
	Deadline  time.Time
}

// pending is one task in flight as a decision sees it.
type pending struct {
	m        Model
	from     time.Duration // age at its last poll that found it not ready (0: none)
	submit   time.Time
	eligible time.Time // its per-id gap ends
	weight   float64
	f0, i0   float64 // cdf and integral at from
}

// waited is the expected answer-seconds its answer has sat ready between
// its last poll and t, weighted.
func (c pending) waited(t time.Time) float64 {
	age := t.Sub(c.submit)
	if age <= c.from {
		return 0
	}
	if c.f0 >= 1 {
		return c.weight * (age - c.from).Seconds()
	}
	// ∫ (F(u) − F(from)) / (1 − F(from)) du over [from, age].
	w := (c.m.integral(age) - c.i0 - c.f0*(age-c.from).Seconds()) / (1 - c.f0)
	return c.weight * max(w, 0)
}

// snapshot turns the tasks in flight into what a decision at now weighs:
// idle is true when no task waits for a thread.
func (l *Learned) snapshot(tasks []InFlight, now time.Time, idle bool, gap time.Duration) []pending {
	weight := busyWeight
	if idle {
		weight = idleWeight
	}
	model := l.Models(idle)
	out := make([]pending, 0, len(tasks))
	for _, t := range tasks {
		c := pending{m: model(t.Kind), submit: t.Submitted, weight: weight}
		if !t.LastPoll.IsZero() && t.LastPoll.After(c.submit) {
			c.from = t.LastPoll.Sub(c.submit)
		}
		if !t.PolledAt.IsZero() {
			c.eligible = t.PolledAt.Add(gap)
		}
		c.eligible = Later(c.eligible, t.NotBefore)
		if dl := t.Deadline; !dl.IsZero() && dl.Sub(now) < urgentWithin*gap {
			c.weight *= urgentWeight
		}
		c.f0, c.i0 = c.m.CDF(c.from), c.m.integral(c.from)
		out = append(out, c)
	}
	return out
}

// worth is the weighted answer-seconds a round at t would end: those of
// the tasks whose per-id gap has ended by then.
func worth(ps []pending, t time.Time) float64 {
	var w float64
	for _, c := range ps {
		if !c.eligible.After(t) {
			w += c.waited(t)
		}
	}
	return w
}

// Decide is when the next round is worth its request: the first time,
// not before from, when the waiting it ends reaches its cost. tasks are
// the poller's tasks in flight, idle is true when no task waits for a
// thread, gap is the per-id PollGap. Zero: nothing in flight.
func (l *Learned) Decide(tasks []InFlight, now, from time.Time, idle bool, gap time.Duration) time.Time {
	ps := l.snapshot(tasks, now, idle, gap)
	if len(ps) == 0 {
		return time.Time{}
	}
	return firstWorth(func(t time.Time) float64 { return worth(ps, t) }, now, Later(now, from), gap)
}

// DecideEach is Decide for a provider that answers one id a request (the
// createTask protocol's getTaskResult; an in.php service without bulk
// polls): a round costs a request per id it asks for, so each id is
// weighed alone, and the next round is the first time, not before from,
// when some id's own waiting reaches a request's cost. gap is the
// provider's rule for one id (none is asked for within gap of its last
// poll); unit is what a request costs, as PollGap is for Decide (the
// queue's PollGap): a service that asks for a longer gap between two
// polls of one task is not also asked less often once that gap is over.
// Zero: nothing in flight.
func (l *Learned) DecideEach(tasks []InFlight, now, from time.Time, idle bool, gap, unit time.Duration) time.Time {
	var first time.Time
	for _, c := range l.snapshot(tasks, now, idle, gap) {
		at := firstWorth(c.worth, now, Later(Later(now, from), c.eligible), unit)
		if first.IsZero() || at.Before(first) {
			first = at
		}
	}
	return first
}

// DueEach says, for a provider that answers one id a request, which of
// tasks a round at now asks for: those whose per-id gap has ended and
// whose own waiting has reached a request's cost (unit, as DecideEach).
func (l *Learned) DueEach(tasks []InFlight, now time.Time, idle bool, gap, unit time.Duration) []bool {
	cost := requestCost * unit.Seconds()
	out := make([]bool, len(tasks))
	for i, c := range l.snapshot(tasks, now, idle, gap) {
		out[i] = c.worth(now) >= cost
	}
	return out
}

// worth is the weighted answer-seconds a poll of c alone at t would end.
func (c pending) worth(t time.Time) float64 {
	if c.eligible.After(t) {
		return 0
	}
	return c.waited(t)
}

// firstWorth is the first time, not before from, when worth (which only
// grows with time) reaches a request's cost (requestCost × gap), to
// within gap/50; past an hour from now it gives up.
func firstWorth(worth func(time.Time) float64, now, from time.Time, gap time.Duration) time.Time {
	cost := requestCost * gap.Seconds()
	if worth(from) >= cost {
		return from
	}
	// Waiting only grows with time: search forward, then bisect.
	step := gap / roundsPerGap
	lo, hi := from, from.Add(step)
	for worth(hi) < cost {
		lo, step = hi, step*2
		hi = hi.Add(step)
		if hi.Sub(now) > time.Hour {
			return hi
		}
	}
	for hi.Sub(lo) > gap/50 {
		mid := lo.Add(hi.Sub(lo) / 2)
		if worth(mid) >= cost {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// Due reports whether a round at now asks for t: its per-id gap has
// ended and its answer may be ready before the next round could go.
// model is Models(true) for the round.
func Due(t InFlight, now time.Time, gap time.Duration, model func(provider.Kind) Model) bool {
	if !t.PolledAt.IsZero() && t.PolledAt.Add(gap).After(now) || t.NotBefore.After(now) {
		return false
	}
	return model(t.Kind).CDF(now.Add(gap).Sub(t.Submitted)) >= readyFloor
}

// Later is the later of a and b.
func Later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
