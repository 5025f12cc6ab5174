package captchaq

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"github.com/captchaq/captchaq/internal/lane"
	"github.com/captchaq/captchaq/internal/sched"
)

// The queue's lanes are its providers, in order of preference: one per
// Config.Providers entry, or one unnamed lane for Config.Provider, in a
// lane.Set that owns the routing among them (which lanes solve a task,
// which may take it now). This file is the queue's side: what becomes of
// the tasks of a lane that fails, comes back or is paused.

// transportFailed records a network error or 5xx from l and reports
// whether l has now failed for longer than its DownAfter (and so leaves
// routing, in a queue of several).
func (q *Queue) transportFailed(l *lane.Lane, now time.Time, err error) bool {
	down, wentDown := l.Health.TransportFailed(now, err)
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

// probe runs l's probe (lane.Set.Probes starts it when due) and brings
// l back on an answer.
func (q *Queue) probe(l *lane.Lane) {
	q.wg.Go(func() {
		l.Health.ProbeDone(l.Probe(q.runCtx), q.now())
		q.wakeDispatcher()
		q.pollerOf(l).Wake()
	})
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
	l.Ledger.Moved(len(moved), spend)
	if len(moved) == 0 {
		return
	}
	q.log.Warn("provider cannot be polled: its tasks in flight are submitted elsewhere", "provider", l.Name(), "tasks", len(moved))
	for _, st := range moved {
		q.storeRetry(st)
	}
}

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

// pauseFor stops all sending to l after an account error, keeping every
// task, for at least d (0: as long as the error says). An answer to a
// request sent before the latest Resume is stale and does not pause
// again. OnPause is called when the last lane sending pauses.
func (q *Queue) pauseFor(l *lane.Lane, err error, sentAt int, d time.Duration) {
	now := q.now()
	p := lane.PauseFor(err, d, now)
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

// unservedWaiting takes out of waiting, and returns, the tasks of a type
// every provider that solves it refuses at now (lane.Set.Unserved). It
// runs inside q.table.Do.
func (q *Queue) unservedWaiting(tx table, now time.Time) []*taskState {
	var out []*taskState
	tx.Waiting().Each(func(it sched.Item[*taskState]) {
		if st := it.Value; q.lanes.Unserved(st.class, st.route, now) {
			out = append(out, st)
		}
	})
	for _, st := range out {
		tx.Waiting().Remove(st.rec.Task.ID)
	}
	return out
}

// unservedText is the error of a task of route method m that no provider
// takes at now: who refused it, with which code, and when a probe may try
// again.
func (q *Queue) unservedText(m string, now time.Time) string {
	var by []string
	for _, r := range q.lanes.Refusals() {
		if r.Method == m && now.Before(r.Until) {
			who := cmp.Or(r.Provider, "the provider")
			by = append(by, fmt.Sprintf("%s answered %s (since %s; a task after %s tries again)",
				who, r.Code, r.Since.UTC().Format(time.RFC3339), r.Until.UTC().Format(time.RFC3339)))
		}
	}
	return fmt.Sprintf("no provider takes %s tasks now: %s", m, strings.Join(by, "; "))
}
