package captchaq

import (
	"cmp"
	"context"
	"errors"
	"strings"
	"time"

	"github.com/captchaq/captchaq/internal/lane"
	"github.com/captchaq/captchaq/internal/sched"
	"github.com/captchaq/captchaq/provider"
)

// The queue's lanes are its providers (internal/lane), in order of
// preference: one per Config.Providers entry, or one unnamed lane for
// Config.Provider. This file is the queue's part of routing among them:
// which lanes solve a task, which may take it now, and what becomes of
// the tasks of a lane that goes down.

// laneOf finds the lane of a stored captcha id and its bare id. An id with
// no known prefix belongs to the first lane; ok is false for an id whose
// prefix names a provider this queue no longer has.
func (q *Queue) laneOf(stored string) (l *lane.Lane, captchaID string, ok bool) {
	if !q.single {
		if name, id, found := strings.Cut(stored, ":"); found {
			for _, l := range q.lanes {
				if l.Name() == name {
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

// routeClass is the set of lanes (bit i for lane i) that solve the route
// method m.
func (q *Queue) routeClass(m string) uint64 {
	var c uint64
	for _, l := range q.lanes {
		if l.Solves(m) {
			c |= 1 << l.Index()
		}
	}
	return c
}

// priceAt is what one solve of st costs at l (0 on a flat-rate plan).
func priceAt(l *lane.Lane, st *taskState) float64 { return l.PriceOf(st.route) }

// routeDecision tells whether lane l may take the waiting task st at now,
// and if not, when it may (zero: not by waiting). It runs inside
// q.table.Do.
//
// A task goes to the first routable lane that solves it. A later lane
// takes a task an earlier routable lane solves only once it has waited
// the later lane's SpillAfter, or sooner when waiting that long would
// leave less than its kind's median solve time before its deadline. A
// lane with MaxSpendPerHour takes nothing that would pass it.
func (q *Queue) routeDecision(l *lane.Lane, st *taskState, now time.Time) (ok bool, retry time.Time) {
	if st.class&(1<<l.Index()) == 0 {
		return false, time.Time{}
	}
	if ok, retry := l.Affords(now, priceAt(l, st)); !ok {
		return false, retry
	}
	earlier := false
	for _, e := range q.lanes[:l.Index()] {
		if st.class&(1<<e.Index()) != 0 && e.Routable(now) {
			earlier = true
			break
		}
	}
	if !earlier {
		return true, time.Time{}
	}
	at := st.waitingSince.Add(l.SpillAfter())
	if dl := st.rec.Task.Deadline; !dl.IsZero() && dl.Sub(at) < provider.MedianSolveTime(st.kind) {
		return true, time.Time{}
	}
	if !now.Before(at) {
		return true, time.Time{}
	}
	return false, at
}

// transportFailed records a network error or 5xx from l and reports
// whether l has now failed for longer than its DownAfter (and so leaves
// routing, in a queue of several).
func (q *Queue) transportFailed(l *lane.Lane, now time.Time, err error) bool {
	down, wentDown := l.TransportFailed(now, err)
	if wentDown {
		q.wakeDispatcher()
	}
	return down
}

// recovered is told that l answered after transport failures: the tasks
// waiting out a backoff those failures built go at once, rather than
// after the outage's longest backoff (RetryBackoffMax). A task waiting
// for another reason (an attempt the provider refused, a rate limit, a
// busy plan) keeps its wait.
func (q *Queue) recovered(l *lane.Lane) {
	q.log.Info("provider answers again: tasks backing off after its network errors go now", "provider", l.Name())
	now := q.now()
	q.table.Do(func(tx table) {
		var back []*taskState
		tx.Waiting().Each(func(it sched.Item[*taskState]) {
			st := it.Value
			if st.transient > 0 && st.rec.NotBefore.After(now) {
				back = append(back, st)
			}
		})
		for _, st := range back {
			tx.Waiting().Remove(st.rec.Task.ID)
			st.rec.NotBefore, st.transient = time.Time{}, 0
			q.push(tx, st)
		}
	})
}

// probes starts the probes that are due: a lane that is down, or paused
// for good in a queue of several, is asked for its balance every
// DownAfter; an answer (with funds, for a priced lane) brings it back.
// It returns when the next probe is due (zero: none).
func (q *Queue) probes(now time.Time) time.Time {
	var next time.Time
	for _, l := range q.lanes {
		start, at := l.ProbeDue(now)
		if start {
			q.wg.Add(1)
			go q.probe(l)
			continue
		}
		if !at.IsZero() && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	return next
}

// probe asks l's account for its balance (a provider with no Balance: for
// an id, any answer in the protocol will do) and brings l back on an
// answer.
func (q *Queue) probe(l *lane.Lane) {
	defer q.wg.Done()
	var up bool
	if l.HasBalance() {
		state, funds := q.checkAccount(l)
		up = state == lane.AccountFine && (!l.Priced() || funds > 0)
	} else {
		ctx, cancel := context.WithTimeout(q.runCtx, accountCheckTimeout)
		_, err := l.Provider().PollMany(ctx, []string{"0"})
		cancel()
		up = err == nil
	}
	l.ProbeDone(up, q.now())
	q.wakeDispatcher()
	q.pollerOf(l).Wake()
}

// moveInflight takes every task in flight at l off it and queues it for
// the other providers: l cannot be polled (failing longer than its
// DownAfter, or refusing the account), so its answers cannot be fetched.
// The attempt is not counted; the result names l in Abandoned, since l may
// bill the abandoned solve too. The tasks leave flight under the lock an
// answer's claim takes (claimSolved): a task whose answer came first is
// not moved, and an answer that comes after the move is dropped.
func (q *Queue) moveInflight(l *lane.Lane, code string, err error) {
	now := q.now()
	var moved []*taskState
	var spend float64
	q.table.Do(func(tx table) {
		tx.EachInFlight(func(st *taskState) {
			if st.lane != l || st.done {
				return
			}
			moved = append(moved, st)
		})
		for _, st := range moved {
			st.abandoned = append(st.abandoned, l.Name())
			st.paid += st.price
			spend += st.price
			q.retryLocked(tx, st, max(st.rec.Attempts-1, 0), now, code, err.Error())
		}
	})
	l.Moved(len(moved), spend)
	if len(moved) == 0 {
		return
	}
	q.log.Warn("provider cannot be polled: its tasks in flight are submitted elsewhere", "provider", l.Name(), "tasks", len(moved))
	for _, st := range moved {
		q.storeRetry(st)
	}
}

// pollGapOf is the shortest time between two polls of one task at l on
// the default scheduler: its own rule, else PollGap.
func (c Config) pollGapOf(l *lane.Lane) time.Duration {
	if len(c.Providers) > 0 {
		return cmp.Or(c.Providers[l.Index()].PollGap, c.PollGap)
	}
	return cmp.Or(c.providerGap, c.PollGap)
}

// pollRuleOf is l's own rule for polling one task (0: none), which a
// fixed PollInterval keeps too.
func (c Config) pollRuleOf(l *lane.Lane) time.Duration {
	if len(c.Providers) > 0 {
		return c.Providers[l.Index()].PollGap
	}
	return publishedPollGap(c.Provider)
}

// newLanes builds the queue's lanes: one per Config.Providers entry, or one
// unnamed lane for Config.Provider, solving CaptchaAI's methods. Only a
// queue of several takes a failing lane out of routing.
func newLanes(cfg Config, fleet Fleet) []*lane.Lane {
	ps := cfg.Providers
	if len(ps) == 0 {
		ps = []ProviderConfig{{Provider: cfg.Provider, Threads: cfg.Threads, Methods: provider.CaptchaAIMethods, DownAfter: DownAfterDefault}}
	}
	lanes := make([]*lane.Lane, len(ps))
	for i, p := range ps {
		var pool lane.Pool
		if fleet != nil {
			if tp := fleet.Threads(p.Name); tp != nil {
				pool = tp
			}
		}
		lanes[i] = lane.New(lane.Config{
			Index: i, Name: p.Name, Provider: p.Provider, Threads: p.Threads, Methods: p.Methods,
			PricePer1000: p.PricePer1000, SpillAfter: p.SpillAfter, MaxSpendPerHour: p.MaxSpendPerHour,
			DownAfter: p.DownAfter, Pool: pool, MayGoDown: len(ps) > 1, Logger: cfg.Logger,
		})
	}
	return lanes
}

// epoch identifies the pause state a request was sent under.
func (q *Queue) epoch() int { return q.pauses.Epoch() }

// pausedNow returns the pause in force at now when every lane is paused,
// lifting expired ones.
func (q *Queue) pausedNow(now time.Time) *AccountError {
	if l, p := q.pauses.All(now); p != nil {
		return accountError(l, p)
	}
	return nil
}

// accountError is l's pause as the API tells it.
func accountError(l *lane.Lane, p *lane.Pause) *AccountError {
	return &AccountError{Code: p.Code, Until: p.Until, Err: p.Err, Provider: l.Name()}
}

// pauseAll stops all sending to l after an account error, keeping every
// task. An answer to a request sent before the latest Resume is stale and
// does not pause again.
func (q *Queue) pauseAll(l *lane.Lane, err error, sentAt int) { q.pauseFor(l, err, sentAt, 0) }

// pauseFor is pauseAll with a pause of at least d. OnPause is called when
// the last lane sending pauses.
func (q *Queue) pauseFor(l *lane.Lane, err error, sentAt int, d time.Duration) {
	var pe *provider.Error
	errors.As(err, &pe)
	p := &lane.Pause{Err: err}
	if pe != nil {
		p.Code = pe.Code
		d = max(d, pe.RetryAfter)
	}
	now := q.now()
	if d > 0 {
		p.Until = now.Add(d)
	}
	ae := accountError(l, p)
	set := q.pauses.Set(l, p, sentAt, now)
	if set.Stale {
		return
	}
	if set.First {
		if l.MayGoDown() {
			q.log.Error("PROVIDER PAUSED: it refused the account; its tasks go to the other providers", "provider", l.Name(), "code", ae.Code, "reason", ae.Error())
		} else {
			q.log.Error("ALL SENDING PAUSED: the provider refused the account; every task is kept", "code", ae.Code, "reason", ae.Error())
		}
	}
	if set.All && q.cfg.OnPause != nil {
		q.cfg.OnPause(ae, set.Permanent)
	}
	q.wakeDispatcher()
	q.pollerOf(l).Wake()
}

// accountCheckTimeout bounds the getbalance that confirms an account error.
const accountCheckTimeout = 30 * time.Second

// checkAccount asks l's provider for the balance (lane.CheckAccount),
// within accountCheckTimeout.
func (q *Queue) checkAccount(l *lane.Lane) (lane.AccountState, float64) {
	ctx, cancel := context.WithTimeout(q.runCtx, accountCheckTimeout)
	defer cancel()
	return l.CheckAccount(ctx)
}
