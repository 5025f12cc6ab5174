package captchaq

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/captchaq/captchaq/internal/lane"
	"github.com/captchaq/captchaq/internal/pingback"
	"github.com/captchaq/captchaq/provider"
)

// submit sends one task to in.php and acts on the answer by its class.
// It runs on its own goroutine, holding a slot taken by the dispatcher.
func (q *Queue) submit(st *taskState) {
	defer q.wg.Done()
	// Captured now: a failed submit puts st back in the queue, where the
	// dispatcher may give it another lane before the deferred count below.
	l, price, route := st.lane, st.price, st.route
	// The cap covers the checkpoint too: a task the provider accepted is
	// at risk of a second solve until its captcha id is durable, and while
	// the Store cannot write (a broker outage) at most the cap of them
	// are.
	defer func() {
		l.Ledger.EndSubmit(price)
		q.wakeDispatcher()
	}()
	t := st.rec.Task
	pt, perr := st.proxy.For(q.runCtx, st.pt, q.cfg.proxyAddressesOf(l), q.cfg.ProxyResolver)
	if perr != nil {
		l.Refusals.NotSent(route, q.now())
		q.proxyRefused(st, perr)
		return
	}
	if q.fleet != nil && !q.fleet.Admit(t.ID) {
		l.Refusals.NotSent(route, q.now())
		q.table.Do(func(tx table) {
			q.leaveFlight(tx, st)
			st.rec.NotBefore = q.now().Add(q.cfg.PollInterval)
			if !q.stopped.Load() {
				q.push(tx, st)
			}
		})
		return
	}
	epoch := q.pauses.Epoch()
	captchaID, err := l.Submit(q.runCtx, pt, q.inboxes[l.Index()].URL())
	now := q.now()
	if l.Refusals.Sent(route, err, now) {
		q.refusals.Save(q.storeCtx())
	}
	if err == nil {
		if l.Health.Answered() {
			q.recovered(l)
		}
		q.accepted(st, captchaID, now)
		return
	}
	if q.stopping() {
		// Abandoned by Close: the task is still queued in the Store.
		q.table.Do(func(tx table) { q.leaveFlight(tx, st) })
		return
	}
	q.submitFailed(st, err, now, epoch)
}

// accepted checkpoints the provider's id before anything polls it.
func (q *Queue) accepted(st *taskState, captchaID string, now time.Time) {
	t := st.rec.Task
	l := st.lane
	attempt := st.rec.Attempts + 1
	if err := q.journal.Checkpoint(q.storeCtx(), t.ID, l.StoredID(captchaID), attempt, now); err != nil {
		// The provider is solving it now: polling it is right; only a
		// crash before the next write would cost a second solve.
		q.log.Error("checkpoint failed; polling anyway", "id", t.ID, "err", err)
	}
	key := l.StoredID(captchaID)
	var early pingback.Pingback
	var isEarly bool
	checkpointed := q.now()
	q.table.Do(func(tx table) {
		st.rec.Status, st.rec.CaptchaID, st.rec.Attempts, st.rec.SubmittedAt = StatusInFlight, captchaID, attempt, now
		st.rec.NotBefore = time.Time{}
		st.transient = 0
		l.Ledger.Accepted(now, st.price)
		q.pollerOf(l).Track(t.ID, st, captchaID, st.kind, now, t.Deadline, now.Add(q.firstPoll(st.kind)), false, provider.GivenBindings(st.kind, t.Params))
		tx.Fly(t.ID, key, st)
		early, isEarly = q.inboxes[l.Index()].Take(key, checkpointed)
	})
	q.log.Debug("task submitted", "id", t.ID, "type", st.kind, "attempt", attempt, "provider", l.Name())
	if isEarly {
		// One that beat the submit's answer would date the solve before
		// the submit: it is dated at the submit.
		if early.At.Before(now) {
			early.At = now
		}
		q.pingbackArrived(st, captchaID, early)
	}
}

// firstPoll is how long after submit the first poll goes out: the learned
// early quantile of the kind's solve time; with pingbacks, well past it.
// Until a kind's first answer is seen its tasks are polled every
// PollInterval (one bulk request covers them all) rather than waiting for
// the published typical time, which a fast provider may beat by far.
func (q *Queue) firstPoll(k provider.Kind) time.Duration {
	est, ok := q.estimate.Learned(string(k))
	if !ok {
		est = min(q.cfg.PollInterval, provider.TypicalSolveTime(k))
	}
	if q.cfg.PingbackURL != "" {
		return 3*est + q.pingbackFallback()
	}
	return est
}

func (q *Queue) submitFailed(st *taskState, err error, now time.Time, epoch int) {
	var pe *provider.Error
	errors.As(err, &pe)
	code, wait := "NETWORK", time.Duration(0)
	if pe != nil {
		code, wait = pe.Code, pe.RetryAfter
	}
	attempts := st.rec.Attempts
	l := st.lane
	class := provider.ClassOf(err)
	if lane.TransportFailure(err) {
		if q.transportFailed(l, now, err) {
			// Down: the task goes to another provider at once.
			q.requeue(st, attempts, time.Time{}, code, err)
			return
		}
	} else if l.Health.Answered() {
		q.recovered(l)
	}
	if provider.TypeRefused(err) && l.Refusals.Refuses(st.route, now) {
		q.typeRefused(st, code, err, now)
		return
	}
	switch class {
	case provider.ClassTask:
		if code == "" || code == "NETWORK" {
			code = CodeInvalidTask
		}
		q.finish(st, q.failure(st, attempts+1, code, err.Error()))
	case provider.ClassUnsolvable:
		q.retryOrFail(st, attempts+1, code, err, now)
	case provider.ClassNoSlot:
		wait = q.noSlotWait(st.kind, wait)
		l.Limiter.NoSlot(now, wait)
		// The limiter's hold decides when submits go again; the task
		// keeps its place for the first of them.
		q.requeue(st, attempts, time.Time{}, code, err)
		if q.zeroBalanceRun(l, code) {
			// On a pay-per-solve service this is an empty balance, not a
			// busy plan: say so instead of retrying silently forever,
			// unless getbalance shows funds (then it is a busy plan).
			if state, funds := l.CheckAccount(q.runCtx); state != lane.AccountFine || funds <= 0 {
				q.pauseFor(l, err, epoch, zeroBalancePause)
			}
		}
	case provider.ClassRateLimit:
		wait = max(wait, q.cfg.RetryBackoff)
		l.Health.HoldSubmits(now.Add(wait))
		q.log.Warn("provider rate limit: submits held", "provider", l.Name(), "for", wait)
		q.requeue(st, attempts, time.Time{}, code, err)
	case provider.ClassAccount:
		q.accountRefused(st, err, code, epoch)
	default:
		// Transient: never an attempt, never a failure; back off and retry.
		st.transient++
		q.log.Warn("submit failed; retrying", "id", st.rec.Task.ID, "code", code, "retry", st.transient)
		q.requeue(st, attempts, now.Add(q.backoff(st.transient)), code, err)
	}
}

// typeRefused acts on l's refusal of st's type (provider.TypeRefused),
// which l.Sent holds off l: st goes to another provider that solves its
// type, its attempt not counted; with none left that takes it, st fails
// with CodeUnsupportedType, and the next pass fails the other tasks of
// its type that wait (failUnserved).
func (q *Queue) typeRefused(st *taskState, code string, err error, now time.Time) {
	if q.lanes.Unserved(st.class, st.route, now) {
		q.unserved.Store(true)
		q.wakeDispatcher()
		q.finish(st, q.failure(st, st.rec.Attempts+1, CodeUnsupportedType, q.unservedText(st.route, now)))
		return
	}
	q.requeue(st, st.rec.Attempts, time.Time{}, code, err)
}

// accountRefused acts on an account error (bad key, IP not allowed or
// banned) answered to one task's submit. One task's content can draw it (an
// image the provider truncates, a param it misreads as the key), so the
// account is checked on its own (getbalance) before everyone's sending
// pauses: when the account answers fine, the task is at fault and fails
// alone with CodeAccountErrorTask. When the account is refused too, all
// sending pauses and the task waits with the others. When the check cannot
// tell (the provider has no Balance, or it could not be reached), sending
// pauses as before, but a task that draws the error accountErrorRepeats
// times fails alone rather than pausing the service again after each
// Resume.
func (q *Queue) accountRefused(st *taskState, err error, code string, epoch int) {
	attempts := st.rec.Attempts
	l := st.lane
	switch state, _ := l.CheckAccount(q.runCtx); state {
	case lane.AccountFine:
		q.log.Warn("account error on one task's submit while the account checks fine: the task fails alone", "id", st.rec.Task.ID, "code", code)
		q.finish(st, q.failure(st, attempts+1, CodeAccountErrorTask, fmt.Sprintf(
			"the provider answered %s to this task's submit while the account checked fine (getbalance): the task itself draws the refusal (an oversized image, a parameter the provider misreads); it failed alone and sending goes on for every other task", code)))
		return
	case lane.AccountUnknown:
		st.accountErrs++
		if st.accountErrs >= accountErrorRepeats {
			q.finish(st, q.failure(st, attempts+1, CodeAccountErrorTask, fmt.Sprintf(
				"the provider answered %s to this task's submit %d times and the account could not be checked apart from it; the task failed alone so it cannot pause sending again", code, st.accountErrs)))
			return
		}
	}
	q.pauseFor(l, err, epoch, 0)
	q.requeue(st, attempts, time.Time{}, code, err)
}

// accountErrorRepeats account errors drawn by the same task, with no check
// of the account that tells them apart, fail it alone.
const accountErrorRepeats = 3

// noSlotWait is how long submits pause after "no free thread": the
// provider's advice (at least RetryBackoff), or the kind's learned solve
// time if that is shorter, plus up to a quarter more as jitter so
// processes sharing the key do not all come back at once. Answers to our
// own tasks let submits through sooner (see the limiter's credits).
//
// A thread frees up when a solve ends, and solves are seen to end within
// the learned time (an early quantile of them): waiting longer only idles
// the threads, which is what a fixed 5 s costs when solves take a second
// (a simulator scaling latencies down, or a fast provider). Against
// CaptchaAI the advice stands for token kinds, whose solves take 10 s and
// more: the wait is 5 to 6.25 s. Only kinds solved faster than 5 s (some
// images) come back sooner, after about one solve time; refusals stay
// rare, since the window halves on each burst of them.
func (q *Queue) noSlotWait(k provider.Kind, advice time.Duration) time.Duration {
	w := max(advice, q.cfg.RetryBackoff)
	if est, ok := q.estimate.Learned(string(k)); ok {
		w = min(w, max(est, q.cfg.RetryBackoff))
	}
	return w + rand.N(w/4+1)
}

// lane.ZeroBalanceStreak ERROR_ZERO_BALANCE answers in a row, while none
// of our tasks is at the provider, pause all sending for
// zeroBalancePause.
const zeroBalancePause = time.Minute

// zeroBalanceRun counts a refusal and reports whether the streak is long
// enough to pause.
func (q *Queue) zeroBalanceRun(l *lane.Lane, code string) bool {
	var n int
	q.table.Do(func(tx table) { n = inflightAt(tx, l) })
	return l.Ledger.ZeroBalance(code, n)
}

// inflightAt counts the tasks in flight at l. It runs inside q.table.Do.
func inflightAt(tx table, l *lane.Lane) int {
	n := 0
	tx.EachInFlight(func(st *taskState) {
		if st.lane == l {
			n++
		}
	})
	return n
}

// proxyRefused acts on TaskProxy.For's refusal of st at its lane, before
// anything was sent: st goes to another provider that solves it, its
// attempt not counted; with none left, it fails with the reason.
func (q *Queue) proxyRefused(st *taskState, err error) {
	l := st.lane
	var last bool
	q.table.Do(func(table) {
		st.class &^= 1 << l.Index()
		last = st.class == 0
	})
	q.log.Info("provider cannot take the task's proxy", "id", st.rec.Task.ID, "provider", l.Name(), "err", err)
	if last {
		q.finish(st, q.failure(st, st.rec.Attempts, provider.ProxyRefused, err.Error()))
		return
	}
	q.requeue(st, st.rec.Attempts, time.Time{}, provider.ProxyRefused, err)
}
