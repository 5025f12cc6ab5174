package captchaq

import (
	"errors"
	"time"

	"github.com/captchaq/captchaq/internal/lane"
	"github.com/captchaq/captchaq/internal/poller"
	"github.com/captchaq/captchaq/provider"
)

// Each lane has a poller (internal/poller) that owns the poll timing of
// the tasks in flight there. This file is the task table's side of it:
// what the queue does with what a round finds (laneSink), and how often
// a task is polled.

// newPoller builds l's poller.
func (q *Queue) newPoller(l *lane.Lane) *poller.Poller[*taskState] {
	b := q.cfg.pollBudgetOf(l)
	return poller.New(poller.Config{
		Budget: b.Polls, Window: b.Window,
		Lane: l, Adaptive: q.cfg.adaptive && q.cfg.PingbackURL == "",
		PollInterval: q.cfg.PollInterval, PollGap: q.cfg.pollGapOf(l), Rule: q.cfg.pollRuleOf(l), RequestCost: q.cfg.PollGap, Repoll: q.repoll(),
		Backoff: q.backoff, Requests: q.runCtx, Now: q.cfg.Now, Logger: q.log,
	}, laneSink{q, l})
}

// logPolling says, once at Start, which cadence polls follow.
func (q *Queue) logPolling() {
	switch {
	case q.pollers[0].Adaptive():
		if q.lanes.Single() {
			q.log.Info("polling", "schedule", "default", "poll_gap", q.cfg.pollGapOf(q.lanes.Lanes()[0]))
			return
		}
		for _, l := range q.lanes.Lanes() {
			q.log.Info("polling", "schedule", "default", "provider", l.Name(), "poll_gap", q.cfg.pollGapOf(l))
		}
	case q.cfg.PingbackURL != "":
		q.log.Info("polling", "schedule", "pingback", "fallback_every", q.repoll())
	default:
		q.log.Info("polling", "schedule", "fixed", "poll_interval", q.cfg.PollInterval)
	}
}

// laneSink is the queue as one lane's poller reports to it.
type laneSink struct {
	q *Queue
	l *lane.Lane
}

func (s laneSink) Ready(st *taskState, captchaID string, a provider.Answer, at, lastPoll time.Time) bool {
	return s.q.solved(st, captchaID, a, at, lastPoll, false)
}

func (s laneSink) Refused(st *taskState, captchaID string, err error, at time.Time, epoch int) {
	q := s.q
	var pe *provider.Error
	errors.As(err, &pe)
	code := ""
	if pe != nil {
		code = pe.Code
	}
	switch provider.ClassOf(err) {
	case provider.ClassUnsolvable:
		var attempts int
		q.table.Do(func(table) { attempts = st.rec.Attempts })
		q.retryOrFail(st, attempts, code, err, at)
	case provider.ClassTask:
		var unknown bool
		var attempts int
		q.table.Do(func(table) {
			unknown = st.resumed && code == provider.ErrWrongCaptchaID.Code
			st.resumed = false
			attempts = st.rec.Attempts
		})
		if unknown {
			// The provider forgot an id we resumed: the only way to an
			// answer is a new submit. The lost attempt is not counted.
			q.log.Warn("resumed captcha id unknown to the provider; submitting again", "id", st.rec.Task.ID)
			q.requeue(st, max(attempts-1, 0), at, code, err)
			return
		}
		q.finish(st, q.failure(st, attempts, code, err.Error()))
	case provider.ClassAccount:
		q.pauseFor(s.l, err, epoch, 0)
	}
}

func (s laneSink) RoundFailed(err error, at time.Time, epoch int) {
	q := s.q
	if provider.ClassOf(err) == provider.ClassAccount {
		q.pauseFor(s.l, err, epoch, 0)
		if s.l.MayGoDown() {
			// Its answers cannot be fetched: solve them elsewhere.
			q.moveInflight(s.l, CodeProviderDown, err)
		}
		return
	}
	if q.transportFailed(s.l, at, err) {
		q.moveInflight(s.l, CodeProviderDown, err)
	}
}

// Expired: the task's id may not be polled again (its budget is spent or
// its result window is over), so only a new submit can bring an answer:
// it is retried as a new attempt, and fails with the code once its
// attempts are spent.
func (s laneSink) Expired(st *taskState, _ string, err error, at time.Time) {
	code := CodeResultWindow
	if errors.Is(err, poller.ErrPollBudget) {
		code = CodePollBudget
	}
	var attempts int
	s.q.table.Do(func(table) { attempts = st.rec.Attempts })
	s.q.retryOrFail(st, attempts, code, err, at)
}

func (s laneSink) Epoch() int { return s.q.pauses.Epoch() }

func (s laneSink) Recovered() { s.q.recovered(s.l) }

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
// at `at` by a poll (lastPoll: the last one that found it not ready) or a
// pingback, learns from the solve time and reports true. An answer that
// lost to another (a poll and a pingback) or to a move of the task
// (claimSolved) is dropped.
func (q *Queue) solved(st *taskState, captchaID string, a provider.Answer, at, lastPoll time.Time, pingback bool) bool {
	if !q.claimSolved(st, captchaID, at) {
		q.log.Debug("answer dropped: the task has another answer or has left this attempt", "id", st.rec.Task.ID, "captcha_id", captchaID)
		return false
	}
	var submitted time.Time
	q.table.Do(func(table) { submitted = st.rec.SubmittedAt })
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
		return true
	}
	q.completeLater(st, r, ready)
	return true
}
