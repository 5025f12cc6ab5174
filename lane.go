package captchaq

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"time"

	"github.com/captchaq/captchaq/internal/limiter"
	"github.com/captchaq/captchaq/provider"
)

// lane is one provider behind the queue: its client and methods, its
// threads (a limiter with its own AIMD window), its poll loop, its pause,
// health and spend. A queue built with Config.Provider has one lane; with
// Config.Providers, one per entry, in order of preference.
type lane struct {
	idx     int
	name    string
	prov    Provider
	threads int
	methods []string
	// price is the price of 1000 solves by route method, "default" for
	// the others; empty for a flat-rate plan.
	price           map[string]float64
	spillAfter      time.Duration
	maxSpendPerHour float64
	downAfter       time.Duration

	limiter *limiter.Limiter
	poller  *poller
	// pool shares the lane's threads with other processes (nil: none);
	// the lane submits only on threads it holds.
	pool ThreadPool

	// Guarded by q.mu.
	pause             *AccountError
	submitsHeldUntil  time.Time // no submits before (rate limited)
	zeroBalanceStreak int       // ERROR_ZERO_BALANCE refusals in a row with nothing of ours in flight here
	submits           int       // submit requests in progress
	// failingSince is the first network error or 5xx since the lane last
	// answered; zero while it answers.
	failingSince time.Time
	// down: failing longer than downAfter; out of routing until a probe
	// answers. Only a queue with several lanes takes a lane down.
	down      bool
	probing   bool
	nextProbe time.Time
	// reserved are the prices of submits accepted in the last hour, and
	// launching those of submits in progress, for MaxSpendPerHour.
	reserved  []spendEntry
	launching float64
	stats     laneStats
}

type spendEntry struct {
	at    time.Time
	price float64
}

// laneStats are a lane's counters for Metrics.
type laneStats struct {
	submitted, solved, failed, moved int64
	spend                            float64
}

// Lane defaults.
const (
	// DownAfterDefault is how long a provider may fail (network errors,
	// 5xx) before it leaves routing.
	DownAfterDefault = 30 * time.Second
	// spendWindow is the window MaxSpendPerHour bounds.
	spendWindow = time.Hour
)

// storedID is the captcha id as the Store keeps it: prefixed with the
// lane's name in a queue of named providers, so a restart polls the right
// one. A one-provider queue keeps the bare id, as always.
func (l *lane) storedID(captchaID string) string {
	if l.name == "" {
		return captchaID
	}
	return l.name + ":" + captchaID
}

// pingbackURL is the pingback URL the lane's submits carry: in a queue
// of named providers, base with provider=NAME in its query, so a
// pingback names its provider (two may give out the same captcha id).
func (l *lane) pingbackURL(base string) string {
	if l.name == "" || base == "" {
		return base
	}
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	return base + sep + "provider=" + url.QueryEscape(l.name)
}

// laneOf finds the lane of a stored captcha id and its bare id. An id with
// no known prefix belongs to the first lane; ok is false for an id whose
// prefix names a provider this queue no longer has.
func (q *Queue) laneOf(stored string) (l *lane, captchaID string, ok bool) {
	if len(q.lanes) > 1 || q.lanes[0].name != "" {
		if name, id, found := strings.Cut(stored, ":"); found {
			for _, l := range q.lanes {
				if l.name == name {
					return l, id, true
				}
			}
			if validLaneName(name) {
				return nil, "", false
			}
		}
	}
	return q.lanes[0], stored, true
}

// multi reports whether the queue routes among several providers: only
// then does a failing provider leave routing, since there is nowhere else
// to send its tasks otherwise.
func (q *Queue) multi() bool { return len(q.lanes) > 1 }

// routeClass is the set of lanes (bit i for lane i) that solve t.
func (q *Queue) routeClass(t Task) uint64 {
	m := t.ProviderTask().RouteMethod()
	var c uint64
	for _, l := range q.lanes {
		if l.solves(m) {
			c |= 1 << l.idx
		}
	}
	return c
}

func (l *lane) solves(method string) bool {
	for _, m := range l.methods {
		if m == method {
			return true
		}
	}
	return false
}

// priceOf is what one solve of t costs here (0 on a flat-rate plan).
func (l *lane) priceOf(t Task) float64 {
	if len(l.price) == 0 {
		return 0
	}
	p, ok := l.price[t.ProviderTask().RouteMethod()]
	if !ok {
		p = l.price["default"]
	}
	return p / 1000
}

// pausedLocked returns the lane's pause in force at now, lifting an
// expired one. Callers hold q.mu.
func (l *lane) pausedLocked(q *Queue, now time.Time) *AccountError {
	if l.pause != nil && !l.pause.Until.IsZero() && !now.Before(l.pause.Until) {
		q.log.Info("sending resumed", "provider", l.name, "after", l.pause.Code)
		l.pause = nil
	}
	return l.pause
}

// routable reports whether new submits may go to l at now. Callers hold
// q.mu.
func (l *lane) routable(q *Queue, now time.Time) bool {
	return !l.down && l.pausedLocked(q, now) == nil
}

// spentLocked is what l reserved in the hour before now. Callers hold q.mu.
func (l *lane) spentLocked(now time.Time) float64 {
	cut := now.Add(-spendWindow)
	i := 0
	for i < len(l.reserved) && !l.reserved[i].at.After(cut) {
		i++
	}
	l.reserved = l.reserved[i:]
	var s float64
	for _, e := range l.reserved {
		s += e.price
	}
	return s
}

// routeDecision tells whether lane l may take the waiting task st at now,
// and if not, when it may (zero: not by waiting). Callers hold q.mu.
//
// A task goes to the first routable lane that solves it. A later lane
// takes a task an earlier routable lane solves only once it has waited
// the later lane's SpillAfter, or sooner when waiting that long would
// leave less than its kind's median solve time before its deadline. A
// lane with MaxSpendPerHour takes nothing that would pass it.
func (q *Queue) routeDecision(l *lane, st *taskState, now time.Time) (ok bool, retry time.Time) {
	if st.class&(1<<l.idx) == 0 {
		return false, time.Time{}
	}
	if l.maxSpendPerHour > 0 {
		if p := l.priceOf(st.rec.Task); l.spentLocked(now)+l.launching+p > l.maxSpendPerHour+1e-9 {
			if len(l.reserved) > 0 {
				return false, l.reserved[0].at.Add(spendWindow)
			}
			return false, time.Time{}
		}
	}
	earlier := false
	for _, e := range q.lanes[:l.idx] {
		if st.class&(1<<e.idx) != 0 && e.routable(q, now) {
			earlier = true
			break
		}
	}
	if !earlier {
		return true, time.Time{}
	}
	at := st.waitingSince.Add(l.spillAfter)
	if dl := st.rec.Task.Deadline; !dl.IsZero() && dl.Sub(at) < provider.MedianSolveTime(st.kind) {
		return true, time.Time{}
	}
	if !now.Before(at) {
		return true, time.Time{}
	}
	return false, at
}

// reserveLocked counts an accepted submit's price against the lane's
// hourly bound. Callers hold q.mu.
func (l *lane) reserveLocked(now time.Time, price float64) {
	l.stats.submitted++
	if price > 0 {
		l.reserved = append(l.reserved, spendEntry{at: now, price: price})
	}
}

// answered records that the lane answered a request (any protocol answer,
// even an error code): it is up.
func (q *Queue) answered(l *lane) {
	q.mu.Lock()
	l.failingSince = time.Time{}
	q.mu.Unlock()
}

// transportFailed records a network error or 5xx from the lane and
// reports whether the lane has now failed for longer than its downAfter
// (and so leaves routing, in a queue of several).
func (q *Queue) transportFailed(l *lane, now time.Time) bool {
	q.mu.Lock()
	if l.failingSince.IsZero() {
		l.failingSince = now
	}
	down := q.multi() && now.Sub(l.failingSince) > l.downAfter
	wasDown := l.down
	if down && !wasDown {
		l.down = true
		l.nextProbe = now.Add(l.downAfter)
	}
	q.mu.Unlock()
	if down && !wasDown {
		q.log.Error("provider down: out of routing until a probe answers; its queued tasks go to the others", "provider", l.name, "failing_for", now.Sub(l.failingSince))
		q.dispatcher.wake()
	}
	return down
}

// transportFailure reports whether err says the provider did not answer
// in its protocol: a network error, a 5xx page, a body that is no answer.
func transportFailure(err error) bool {
	return errors.Is(err, provider.ErrNetwork) || errors.Is(err, provider.ErrHTTP5xx) || errors.Is(err, provider.ErrBadAnswer)
}

// probeLocked starts the probes that are due: a lane that is down, or
// paused for good in a queue of several, is asked for its balance every
// downAfter; an answer (with funds, for a priced lane) brings it back.
// It returns when the next probe is due (zero: none). Callers hold q.mu.
func (q *Queue) probeLocked(now time.Time) time.Time {
	if !q.multi() {
		return time.Time{}
	}
	var next time.Time
	for _, l := range q.lanes {
		if !l.down && (l.pause == nil || !l.pause.Until.IsZero()) {
			continue
		}
		if l.nextProbe.IsZero() {
			l.nextProbe = now.Add(l.downAfter)
		}
		if !l.probing && !now.Before(l.nextProbe) {
			l.probing = true
			q.wg.Add(1)
			go q.probe(l)
			continue
		}
		if !l.probing && (next.IsZero() || l.nextProbe.Before(next)) {
			next = l.nextProbe
		}
	}
	return next
}

// probe asks l's account for its balance (a provider with no Balance: for
// an id, any answer in the protocol will do) and brings l back on an
// answer.
func (q *Queue) probe(l *lane) {
	defer q.wg.Done()
	var up bool
	if _, ok := l.prov.(BalanceChecker); ok {
		state, funds := q.checkAccount(l)
		up = state == accountFine && (len(l.price) == 0 || funds > 0)
	} else {
		ctx, cancel := context.WithTimeout(q.runCtx, accountCheckTimeout)
		_, err := l.prov.PollMany(ctx, []string{"0"})
		cancel()
		up = err == nil
	}
	now := q.now()
	q.mu.Lock()
	l.probing = false
	if up {
		l.down, l.pause, l.failingSince, l.nextProbe = false, nil, time.Time{}, time.Time{}
	} else {
		l.nextProbe = now.Add(l.downAfter)
	}
	q.mu.Unlock()
	if up {
		q.log.Info("provider back in routing: a probe answered", "provider", l.name)
	}
	q.dispatcher.wake()
	l.poller.wake()
}

// moveInflight takes every task in flight at l off it and queues it for
// the other providers: l cannot be polled (failing longer than its
// downAfter, or refusing the account), so its answers cannot be fetched.
// The attempt is not counted; the result names l in Abandoned, since l may
// bill the abandoned solve too. The tasks leave flight under the lock an
// answer's claim takes (claimSolved): a task whose answer came first is
// not moved, and an answer that comes after the move is dropped.
func (q *Queue) moveInflight(l *lane, code string, err error) {
	now := q.now()
	q.mu.Lock()
	var moved []*taskState
	for _, st := range q.inflight {
		if st.lane != l || st.done {
			continue
		}
		st.abandoned = append(st.abandoned, l.name)
		st.paid += st.price
		l.stats.spend += st.price
		q.retryLocked(st, max(st.rec.Attempts-1, 0), now, code, err.Error())
		moved = append(moved, st)
	}
	l.stats.moved += int64(len(moved))
	q.mu.Unlock()
	if len(moved) == 0 {
		return
	}
	q.log.Warn("provider cannot be polled: its tasks in flight are submitted elsewhere", "provider", l.name, "tasks", len(moved))
	for _, st := range moved {
		q.storeRetry(st)
	}
}
