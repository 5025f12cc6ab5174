package captchaq

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/captchaq/captchaq/internal/lane"
	"github.com/captchaq/captchaq/internal/pollsched"
	"github.com/captchaq/captchaq/internal/startstop"
	"github.com/captchaq/captchaq/provider"
)

// pollChunk is the most ids asked in one res.php request (2captcha's
// documented bulk limit).
const pollChunk = 100

// pollParallel bounds poll requests in flight within one round.
const pollParallel = 4

// poller is the one loop that polls every task in flight. Each task has a
// next-due time: first near its kind's learned early solve time, then
// every PollInterval. The loop sleeps until the earliest due time, never
// starts poll rounds closer than PollInterval/4 apart (the request rate
// bound), and asks for every id due before the next round in one bulk
// request per pollChunk ids.
type poller struct {
	q              *Queue
	lane           *lane.Lane // the provider it polls; it sees only the tasks there
	wakeCh         chan struct{}
	last           time.Time // start of the last round
	chain          time.Time // when the tasks polled in the last round are due again; guarded by q.mu
	pollsHeldUntil time.Time // no rounds before (rate limit, backoff)
	failures       int       // consecutive failed rounds
	// learned are the solve time distributions learned from this
	// provider's answers, for the default scheduler; guarded by q.mu.
	learned *pollsched.Learned
}

func newPoller(q *Queue, l *lane.Lane) *poller {
	return &poller{q: q, lane: l, wakeCh: make(chan struct{}, 1), learned: pollsched.NewLearned()}
}

// polls reports whether st is this poller's: in flight at its provider.
// Callers hold q.mu.
func (p *poller) polls(st *taskState) bool { return st.lane == p.lane }

// adaptive: rounds follow the default scheduler (internal/pollsched), not a
// fixed interval. Pingbacks keep the fixed slow fallback.
func (p *poller) adaptive() bool { return p.q.cfg.adaptive && p.q.cfg.PingbackURL == "" }

// logPolling says, once at Start, which cadence polls follow.
func (q *Queue) logPolling() {
	switch {
	case q.pollers[0].adaptive():
		q.log.Info("polling", "schedule", "default", "poll_gap", q.cfg.PollGap)
	case q.cfg.PingbackURL != "":
		q.log.Info("polling", "schedule", "pingback", "fallback_every", q.repoll())
	default:
		q.log.Info("polling", "schedule", "fixed", "poll_interval", q.cfg.PollInterval)
	}
}

func (p *poller) wake() {
	select {
	case p.wakeCh <- struct{}{}:
	default:
	}
}

// minGap is the least time between two rounds: the request rate bound.
// The default scheduler starts rounds at least PollGap apart, so every
// round may ask for every id (none is within its per-id gap) and ids
// polled together stay together.
func (p *poller) minGap() time.Duration {
	if p.adaptive() {
		return p.q.cfg.PollGap
	}
	return p.q.cfg.PollInterval / 4
}

func (p *poller) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := p.q.now()
		next := p.nextRound(now)
		if !next.IsZero() && !next.After(now) {
			p.round(now)
			continue
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = next.Sub(now)
		}
		timer.Reset(wait)
		select {
		case <-p.wakeCh:
		case <-timer.C:
		case <-ctx.Done():
			return
		}
	}
}

// nextRound is when the next round may go: the earliest due time, no
// sooner than the rate bound and any hold allow. Zero: nothing to poll.
func (p *poller) nextRound(now time.Time) time.Time {
	q := p.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if pause := p.lane.Paused(now); pause != nil {
		return pause.Until
	}
	var due time.Time
	if p.adaptive() {
		// No round can go before the rate bound allows: deciding now
		// would only be done again then (each submit wakes the loop).
		if g := p.last.Add(p.minGap()); g.After(now) && q.inflightAt(p.lane) > 0 {
			return g
		}
		decide := p.learned.Decide
		if p.eachID() {
			decide = p.learned.DecideEach
		}
		due = decide(p.inflight(), now, p.last.Add(p.minGap()), q.queue.Len() == 0, q.cfg.PollGap)
	} else {
		for _, st := range q.inflight {
			if !p.polls(st) {
				continue
			}
			if at := p.pollAt(st); due.IsZero() || at.Before(due) {
				due = at
			}
		}
	}
	if due.IsZero() {
		return due
	}
	if g := p.last.Add(p.minGap()); g.After(due) {
		due = g
	}
	if p.pollsHeldUntil.After(due) {
		due = p.pollsHeldUntil
	}
	return due
}

// inflight is the tasks in flight at the poller's provider, as the
// default scheduler weighs them. Callers hold q.mu.
func (p *poller) inflight() []pollsched.InFlight {
	var out []pollsched.InFlight
	for _, st := range p.q.inflight {
		if p.polls(st) {
			out = append(out, p.timing(st))
		}
	}
	return out
}

// eachID reports whether the provider answers one id a request (a
// createTask provider, an in.php one without bulk polls): then every id a
// round asks for costs a request, and the default scheduler weighs each
// alone (pollsched.DecideEach).
func (p *poller) eachID() bool {
	b, ok := p.lane.Provider().(interface{ BulkSupported() bool })
	return ok && !b.BulkSupported()
}

// dueEach is, for a provider that answers one id a request, the tasks in
// flight there worth their own request at now. Callers hold q.mu.
func (p *poller) dueEach(now time.Time) map[*taskState]bool {
	var sts []*taskState
	var tasks []pollsched.InFlight
	for _, st := range p.q.inflight {
		if p.polls(st) {
			sts = append(sts, st)
			tasks = append(tasks, p.timing(st))
		}
	}
	worth := p.learned.DueEach(tasks, now, p.q.queue.Len() == 0, p.q.cfg.PollGap)
	out := make(map[*taskState]bool, len(sts))
	for i, st := range sts {
		out[st] = worth[i]
	}
	return out
}

// timing is st as the default scheduler sees it. Callers hold q.mu.
func (p *poller) timing(st *taskState) pollsched.InFlight {
	return pollsched.InFlight{Kind: st.kind, Submitted: st.rec.SubmittedAt, LastPoll: st.lastPoll, PolledAt: st.polledAt, Deadline: st.rec.Task.Deadline}
}

// floor is the earliest st may be polled again: PollInterval after the
// round that last polled it. Callers hold q.mu.
func (p *poller) floor(st *taskState) time.Time {
	if st.polledAt.IsZero() {
		return time.Time{}
	}
	return st.polledAt.Add(p.q.cfg.PollInterval)
}

// pollAt is when st is next polled: its due time, not before its floor.
// Callers hold q.mu.
func (p *poller) pollAt(st *taskState) time.Time {
	if f := p.floor(st); f.After(st.due) {
		return f
	}
	return st.due
}

// align moves a first poll wanted at want onto the round cadence: the
// round of the last round's tasks nearest to it, or want itself when no
// round is coming. Without it every task would keep its own phase and
// rounds would go out up to four times per PollInterval. Callers hold q.mu.
func (p *poller) align(now, want time.Time) time.Time {
	every := p.q.repoll()
	if p.chain.IsZero() || !p.chain.After(now) {
		return want
	}
	if !want.After(p.chain) {
		return p.chain
	}
	k := (want.Sub(p.chain) + every/2) / every
	return p.chain.Add(k * every)
}

// round polls, in bulk, every task due before the next round: asking for
// an id a little early costs nothing in a bulk request, while leaving it
// for the next round would let its answer sit ready for up to a whole
// interval.
func (p *poller) round(now time.Time) {
	q := p.q
	p.last = now
	slack := q.repoll()
	q.mu.Lock()
	var due []*taskState
	adaptive := p.adaptive()
	// Which ids a round asks for is judged with the prior blended in,
	// busy or idle: a kind learned from its first few answers (its
	// fastest) would otherwise rule out every id younger than all of
	// them, and an answer that came sooner waited for rounds that left
	// its id out (a reCAPTCHA v3 solved in 5.1 s, after one learned
	// 5.0–5.6 s, waited 2.2 s on the model of the realistic mix).
	model := p.learned.Models(true)
	var each map[*taskState]bool // ids worth their own request, when each costs one
	if adaptive && p.eachID() {
		each = p.dueEach(now)
	}
	for _, st := range q.inflight {
		switch {
		case !p.polls(st):
		case each != nil:
			if each[st] {
				due = append(due, st)
			}
		case adaptive:
			if pollsched.Due(p.timing(st), now, q.cfg.PollGap, model) {
				due = append(due, st)
			}
		// Due before the next round joins this one, but never sooner
		// than PollInterval after its last poll: providers ban an IP that
		// polls one id too often.
		case !st.due.After(now.Add(slack)) && !p.floor(st).After(now):
			due = append(due, st)
		}
	}
	for _, st := range due {
		st.polledAt = now
	}
	if !adaptive {
		p.chain = now.Add(q.repoll())
		// Tasks polled in an earlier round that would come due before
		// the next one wait for it instead: phases merge, and the cadence
		// stays one request per interval however the tasks came in.
		for _, st := range q.inflight {
			if p.polls(st) && st.polledAt.Before(now) && !st.polledAt.IsZero() && st.due.Before(p.chain) {
				st.due = p.chain
			}
		}
	}
	ids := make([]string, len(due))
	slices.SortFunc(due, func(a, b *taskState) int { return a.due.Compare(b.due) })
	for i, st := range due {
		ids[i] = st.rec.CaptchaID
	}
	q.mu.Unlock()
	// Chunks go out a few at a time, so a plan with thousands of threads
	// still gets through a round within the interval.
	var (
		pool = startstop.NewPool(pollParallel)
		fmu  sync.Mutex
		fail error
		fAt  time.Time
		fEp  int
		ok   bool
	)
	for start := 0; start < len(due); start += pollChunk {
		end := min(start+pollChunk, len(due))
		chunk, chunkIDs := due[start:end], ids[start:end]
		pool.Go(func() {
			epoch := q.epoch()
			res, err := p.lane.Provider().PollMany(q.runCtx, chunkIDs)
			at := q.now()
			if err != nil {
				fmu.Lock()
				fail, fAt, fEp = err, at, epoch
				fmu.Unlock()
				return
			}
			fmu.Lock()
			ok = true
			fmu.Unlock()
			for i, st := range chunk {
				if i < len(res) {
					p.handle(st, chunkIDs[i], res[i], now, at, epoch)
				}
			}
		})
	}
	pool.Wait()
	if ok {
		p.failures = 0
		p.lane.Answered()
	}
	if fail != nil && !q.stopping() {
		p.failed(fail, fAt, fEp)
	}
}

// failed acts on a round that failed as a whole.
func (p *poller) failed(err error, now time.Time, epoch int) {
	q := p.q
	var pe *provider.Error
	errors.As(err, &pe)
	switch provider.ClassOf(err) {
	case provider.ClassAccount:
		q.pauseAll(p.lane, err, epoch)
		if q.multi() {
			// Its answers cannot be fetched: solve them elsewhere.
			q.moveInflight(p.lane, CodeProviderDown, err)
		}
	case provider.ClassRateLimit:
		wait := q.cfg.PollInterval
		if pe != nil && pe.RetryAfter > 0 {
			wait = pe.RetryAfter
		}
		p.pollsHeldUntil = now.Add(wait)
		q.log.Warn("provider rate limit: polls held", "for", wait)
	default:
		if lane.TransportFailure(err) && q.transportFailed(p.lane, now) {
			q.moveInflight(p.lane, CodeProviderDown, err)
		}
		p.failures++
		p.pollsHeldUntil = now.Add(q.backoff(p.failures))
		q.log.Warn("poll failed; retrying", "provider", p.lane.Name(), "err", err, "retry", p.failures)
	}
}

// handle acts on the poll result for captchaID, st's id when the round
// started at sent asked for it, answered at at.
func (p *poller) handle(st *taskState, captchaID string, r provider.PollResult, sent, at time.Time, epoch int) {
	q := p.q
	switch {
	case r.Ready:
		q.solved(st, captchaID, r.Answer, at, false)
	case r.Err != nil:
		var pe *provider.Error
		errors.As(r.Err, &pe)
		code := ""
		if pe != nil {
			code = pe.Code
		}
		switch provider.ClassOf(r.Err) {
		case provider.ClassUnsolvable:
			q.mu.Lock()
			attempts := st.rec.Attempts
			q.mu.Unlock()
			q.retryOrFail(st, attempts, code, r.Err, at)
		case provider.ClassTask:
			q.mu.Lock()
			unknown := st.resumed && code == provider.ErrWrongCaptchaID.Code
			st.resumed = false
			attempts := st.rec.Attempts
			q.mu.Unlock()
			if unknown {
				// The provider forgot an id we resumed: the only way to an
				// answer is a new submit. The lost attempt is not counted.
				q.log.Warn("resumed captcha id unknown to the provider; submitting again", "id", st.rec.Task.ID)
				q.requeue(st, max(attempts-1, 0), at, code, r.Err)
				return
			}
			q.finish(st, q.failure(st, attempts, code, r.Err.Error()))
		case provider.ClassAccount:
			q.pauseAll(p.lane, r.Err, epoch)
		default:
			q.mu.Lock()
			st.due = at.Add(q.cfg.PollInterval)
			q.mu.Unlock()
		}
	default:
		q.mu.Lock()
		st.lastPoll = at
		st.polls++
		// Due again with the rest of its round: tasks polled together stay
		// together, so one request per PollInterval covers them all.
		st.due = sent.Add(q.repoll())
		q.mu.Unlock()
	}
}

// repoll is the time between polls of one task.
func (q *Queue) repoll() time.Duration {
	if q.cfg.PingbackURL != "" {
		return q.pingbackFallback()
	}
	return q.cfg.PollInterval
}

// pingbackFallback is how often a task is polled when pingbacks should
// bring its answer.
func (q *Queue) pingbackFallback() time.Duration { return 10 * q.cfg.PollInterval }

// solved finishes st with its answer to the attempt with captchaID, seen
// at `at` by a poll or a pingback, and learns from the solve time. An
// answer that lost to another (a poll and a pingback) or to a move of the
// task (claimSolved) is dropped.
func (q *Queue) solved(st *taskState, captchaID string, a provider.Answer, at time.Time, pingback bool) {
	if !q.claimSolved(st, captchaID, at) {
		q.log.Debug("answer dropped: the task has another answer or has left this attempt", "id", st.rec.Task.ID, "captcha_id", captchaID)
		return
	}
	q.mu.Lock()
	submitted, lastPoll := st.rec.SubmittedAt, st.lastPoll
	if p := q.pollerOf(st.lane); !pingback && p.adaptive() {
		p.learned.Learn(st.kind, submitted, lastPoll, at)
	}
	q.mu.Unlock()
	lower := at
	observed := at.Sub(submitted)
	if !pingback {
		// The answer became ready after the last poll that did not see it.
		lower = lastPoll
		if lower.IsZero() {
			lower = at.Add(-q.cfg.PollInterval)
			// Found on the first poll: the true time is unknown and
			// shorter, so learn a shorter one until first polls start
			// finding answers not yet ready.
			observed /= 2
		}
		if lower.Before(submitted) {
			lower = submitted
		}
	}
	ready := lower.Add(at.Sub(lower) / 2)
	if lastPoll.IsZero() && !pingback {
		q.estimate.Observe(string(st.kind), observed)
	} else {
		q.estimate.Observe(string(st.kind), ready.Sub(submitted))
	}
	r := q.success(st, a, ready, lower)
	if pingback {
		q.complete(st, r, ready)
		return
	}
	q.completeLater(st, r, ready)
}
