package captchaq

import (
	"math"
	"slices"
	"time"

	"github.com/captchaq/captchaq/provider"
)

// The default poll scheduler (PollInterval left 0) treats each poll
// request as a purchase: it goes out when the answer-seconds it would end
// (answers that are probably ready, weighted by what waiting costs) are
// worth the request. See the package doc for the design and its numbers.
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
)

// solveDist is a kind's learned solve time distribution: the last
// solveSamples answers, each known only to lie in an interval (after the
// last poll that did not find it, before the one that did). Each interval
// counts as a uniform spread over it. Callers hold q.mu.
type solveDist struct {
	lo, hi []time.Duration
	next   int
}

func (d *solveDist) observe(lo, hi time.Duration) {
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
func (d *solveDist) cdf(x time.Duration) float64 {
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
func (d *solveDist) integral(x time.Duration) float64 {
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

// solveModel is the solve time distribution of one kind: the learned
// samples, the log-normal prior before any answer, or, with tail set, the
// learned samples blended with the prior as priorSamples more samples.
//
// The blend keeps a tail past the longest answer learned. A kind's first
// answers are its fastest, so on the learned samples alone a task older
// than all of them looks certainly ready and is polled every PollGap
// until its answer comes: worth it while tasks wait for a thread (that
// thread is likely free), a waste on an idle queue, where the end of a
// small batch spent a request every PollGap on its last reCAPTCHAs
// (README's first command: 3 to 4 requests a task). So rounds are timed
// with the blend on an idle queue only. Which ids a round asks for is
// judged with it always (poller.round): from a kind's first few answers
// alone, an id younger than all of them looks certainly not ready.
type solveModel struct {
	d      *solveDist // nil before any answer
	median float64    // prior, seconds
	tail   bool
}

// priorSamples is the prior's weight in the blend, in samples.
const priorSamples = 1

// models gives the distribution of each kind for one decision, made once
// per kind (pace reads every kind's samples); tail: blend in the prior
// (idle queue). Callers hold q.mu while they use it.
func (p *poller) models(tail bool) func(provider.Kind) solveModel {
	made := map[provider.Kind]solveModel{}
	return func(k provider.Kind) solveModel {
		if m, ok := made[k]; ok {
			return m
		}
		m := solveModel{tail: tail}
		if d := p.dists[k]; d != nil && len(d.lo) > 0 {
			m.d = d
		}
		if m.d == nil || tail {
			m.median = provider.MedianSolveTime(k).Seconds() * p.pace()
		}
		made[k] = m
		return m
	}
}

// blend is the model's value of a measure, from its learned and prior
// values.
func (m solveModel) blend(learned, prior func() float64) float64 {
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
// yet seen follows it. Callers hold q.mu.
func (p *poller) pace() float64 {
	var rs []float64
	for k, d := range p.dists {
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

func (m solveModel) cdf(x time.Duration) float64 {
	return m.blend(func() float64 { return m.d.cdf(x) }, func() float64 { return m.priorCDF(x) })
}

func (m solveModel) integral(x time.Duration) float64 {
	return m.blend(func() float64 { return m.d.integral(x) }, func() float64 { return m.priorIntegral(x) })
}

func (m solveModel) priorCDF(x time.Duration) float64 {
	if x <= 0 {
		return 0
	}
	return normCDF(math.Log(x.Seconds()/m.median) / priorSpread)
}

func (m solveModel) priorIntegral(x time.Duration) float64 {
	if x <= 0 {
		return 0
	}
	// ∫₀ˣ F = x·F(x) − E[X; X ≤ x] for a log-normal X.
	z := math.Log(x.Seconds()/m.median) / priorSpread
	return x.Seconds()*normCDF(z) - m.median*math.Exp(priorSpread*priorSpread/2)*normCDF(z-priorSpread)
}

func normCDF(z float64) float64 { return 0.5 * math.Erfc(-z/math.Sqrt2) }

// learn records an answer of kind k found at `at`, not ready at its last
// poll (or at submit). Callers hold q.mu.
func (p *poller) learn(k provider.Kind, submitted, notReady, at time.Time) {
	d := p.dists[k]
	if d == nil {
		d = &solveDist{}
		p.dists[k] = d
	}
	if notReady.IsZero() || notReady.Before(submitted) {
		notReady = submitted
	}
	d.observe(notReady.Sub(submitted), at.Sub(submitted))
}

// pending is one task in flight as the scheduler sees it.
type pending struct {
	m        solveModel
	from     time.Duration // age at its last poll that found it not ready (0: none)
	submit   time.Time
	eligible time.Time // its per-id gap ends
	weight   float64
	f0, i0   float64 // cdf and integral at from
}

// ready is the chance st's answer is ready at t, given it was not at its
// last poll.
func (c pending) ready(t time.Time) float64 {
	if c.f0 >= 1 {
		return 1
	}
	return max(c.m.cdf(t.Sub(c.submit))-c.f0, 0) / (1 - c.f0)
}

// waited is the expected answer-seconds st's answer has sat ready between
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

// snapshot gathers the tasks in flight for a decision at now. Callers
// hold q.mu.
func (p *poller) snapshot(now time.Time) []pending {
	q := p.q
	gap := q.cfg.PollGap
	idle := q.queue.Len() == 0
	weight := busyWeight
	if idle {
		weight = idleWeight
	}
	model := p.models(idle)
	out := make([]pending, 0, len(q.inflight))
	for _, st := range q.inflight {
		if !p.polls(st) {
			continue
		}
		c := pending{m: model(st.kind), submit: st.rec.SubmittedAt, weight: weight}
		if !st.lastPoll.IsZero() && st.lastPoll.After(c.submit) {
			c.from = st.lastPoll.Sub(c.submit)
		}
		if !st.polledAt.IsZero() {
			c.eligible = st.polledAt.Add(gap)
		}
		if dl := st.rec.Task.Deadline; !dl.IsZero() && dl.Sub(now) < urgentWithin*gap {
			c.weight *= urgentWeight
		}
		c.f0, c.i0 = c.m.cdf(c.from), c.m.integral(c.from)
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

// decide is when the next round is worth its request: the first time,
// not before from, when the waiting it ends reaches its cost. Zero:
// nothing in flight. Callers hold q.mu.
func (p *poller) decide(now, from time.Time) time.Time {
	ps := p.snapshot(now)
	if len(ps) == 0 {
		return time.Time{}
	}
	from = later(now, from)
	gap := p.q.cfg.PollGap
	cost := requestCost * gap.Seconds()
	if worth(ps, from) >= cost {
		return from
	}
	// Waiting only grows with time: search forward, then bisect.
	step := gap / roundsPerGap
	lo, hi := from, from.Add(step)
	for worth(ps, hi) < cost {
		lo, step = hi, step*2
		hi = hi.Add(step)
		if hi.Sub(now) > time.Hour {
			return hi
		}
	}
	for hi.Sub(lo) > gap/50 {
		mid := lo.Add(hi.Sub(lo) / 2)
		if worth(ps, mid) >= cost {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// dueAdaptive reports whether st goes into a round at now: its per-id gap
// has ended and its answer may be ready before the next round could
// go. Callers hold q.mu.
func (p *poller) dueAdaptive(st *taskState, now time.Time, model func(provider.Kind) solveModel) bool {
	gap := p.q.cfg.PollGap
	if !st.polledAt.IsZero() && st.polledAt.Add(gap).After(now) {
		return false
	}
	return model(st.kind).cdf(now.Add(gap).Sub(st.rec.SubmittedAt)) >= readyFloor
}
