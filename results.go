package captchaq

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/captchaq/captchaq/internal/lane"
	"github.com/captchaq/captchaq/internal/pingback"
	"github.com/captchaq/captchaq/provider"
)

// failure builds a failed Result for st.
func (q *Queue) failure(st *taskState, attempts int, code, text string) (r Result) {
	q.table.Do(func(table) {
		r = Result{
			ID: st.rec.Task.ID, Status: StatusFailed, Method: st.rec.Task.Method, Kind: st.kind,
			Error: text, ErrorCode: code, Attempts: attempts,
			AcceptedAt: st.rec.AcceptedAt, SubmittedAt: st.rec.SubmittedAt,
			Price: st.paid, Abandoned: st.abandoned,
		}
		if st.lane != nil {
			r.Provider = st.lane.Name()
		}
	})
	return r
}

// success builds a solved Result for an answer judged ready at ready;
// lower is the earliest it can have been ready, which dates the token's
// expiry conservatively.
func (q *Queue) success(st *taskState, a provider.Answer, ready, lower time.Time) (r Result) {
	q.table.Do(func(table) {
		r = Result{
			ID: st.rec.Task.ID, Status: StatusSolved, Method: st.rec.Task.Method, Kind: st.kind,
			Token: a.Token, Attempts: st.rec.Attempts, CaptchaID: st.rec.CaptchaID,
			SolveSeconds: ready.Sub(st.rec.SubmittedAt).Seconds(),
			AcceptedAt:   st.rec.AcceptedAt, SubmittedAt: st.rec.SubmittedAt,
			Provider: st.lane.Name(), Price: st.paid + st.price, Abandoned: st.abandoned,
		}
	})
	if r.Token == "" {
		r.Token = a.Raw
	}
	if len(a.JSON) > 0 {
		r.Answer = json.RawMessage(a.JSON)
	}
	if life := provider.TokenLifetime(st.kind); life > 0 {
		r.ExpiresAt = lower.Add(life)
	}
	return r
}

// claim marks st as finishing; only the first caller wins (a pingback and
// a poll may race). It takes st off the poller and frees its slot.
func (q *Queue) claim(st *taskState) (won bool) {
	q.table.Do(func(tx table) {
		if st.done {
			return
		}
		st.done = true
		q.leaveFlight(tx, st)
		won = true
	})
	return won
}

// claimSolved is claim for an answer to the attempt with captchaID (a poll
// result or a pingback): it wins only while that attempt is st's current
// one, in flight. The move of a task to another provider (moveInflight)
// and every requeue take it out of flight under the same lock, so an
// answer and a move never both win: a task that has its answer is not
// submitted again, and an answer to an attempt left behind is dropped
// rather than delivered beside the new attempt's. at is when the answer
// was seen: a win counts as a success at the lane's limiter before its
// slot is freed.
func (q *Queue) claimSolved(st *taskState, captchaID string, at time.Time) (won bool) {
	q.table.Do(func(tx table) {
		if f, ok := tx.InFlight(st.rec.Task.ID); st.done || st.rec.CaptchaID != captchaID || !ok || f != st {
			return
		}
		st.done = true
		st.lane.Limiter.Success(at)
		q.leaveFlight(tx, st)
		won = true
	})
	return won
}

// leaveFlight takes st off the poller and frees its slot, if it has
// them. It runs inside q.table.Do.
func (q *Queue) leaveFlight(tx table, st *taskState) {
	key := ""
	if st.rec.CaptchaID != "" && st.lane != nil {
		key = st.lane.StoredID(st.rec.CaptchaID)
	}
	if tx.Land(st.rec.Task.ID, key, st) {
		q.pollerOf(st.lane).Forget(st.rec.Task.ID)
	}
	if st.slot {
		st.slot = false
		st.lane.Limiter.Release()
		q.wakeDispatcher()
	}
}

// finish stores a final result, then delivers it: Futures, callbacks and
// OnResult see only durable results. ready, when set, is when the answer
// was judged ready at the provider (for the delivery delay).
func (q *Queue) finish(st *taskState, r Result) { q.finishAt(st, r, time.Time{}) }

func (q *Queue) finishAt(st *taskState, r Result, ready time.Time) {
	if !q.claim(st) {
		return
	}
	q.complete(st, r, ready)
}

// completeLater is complete on a goroutine of its own: a poll round
// claims many answers at once, and their durable writes (a broker confirm
// each, for a fleet) overlap instead of queueing one behind another. Only
// the queue's own loops call it, so q.wg is never at zero here.
func (q *Queue) completeLater(st *taskState, r Result, ready time.Time) {
	q.wg.Add(1)
	go func() {
		defer q.wg.Done()
		q.complete(st, r, ready)
	}()
}

// complete stores a claimed task's final result and delivers it.
func (q *Queue) complete(st *taskState, r Result, ready time.Time) {
	r.FinishedAt = q.now()
	if err := q.journal.Finish(q.storeCtx(), r); err != nil {
		// Delivering anyway beats holding a paid answer; the Store still
		// has the task as pending, so a restart would poll it again.
		q.log.Error("storing result failed; delivering it anyway", "id", r.ID, "status", r.Status, "err", err)
	}
	delivered := q.now()
	var ws []func(Result, error)
	q.table.Do(func(tx table) {
		tx.Remove(r.ID)
		ws = st.waiters
		st.waiters = nil
		q.metrics.Result(r.Status == StatusSolved, r.SolveSeconds, ready, delivered)
		if l := st.lane; l != nil {
			l.Ledger.Finished(r.Status == StatusSolved, st.price)
		}
	})
	q.logResult(r)
	for _, w := range ws {
		w(r, nil)
	}
	if q.res.Finished(r) {
		return // a refill's token: stocked, for no client
	}
	if q.cfg.OnResult != nil {
		q.cfg.OnResult(r)
	}
}

func (q *Queue) logResult(r Result) {
	if r.Status == StatusSolved {
		q.log.Debug("task solved", "id", r.ID, "type", r.Kind, "attempts", r.Attempts, "solve_seconds", r.SolveSeconds)
		return
	}
	q.log.Info("task failed", "id", r.ID, "type", r.Kind, "attempts", r.Attempts, "code", r.ErrorCode, "error", r.Error)
}

// retryOrFail retries an attempt the provider could not solve, up to the
// task's max attempts.
func (q *Queue) retryOrFail(st *taskState, attempts int, code string, err error, now time.Time) {
	if attempts >= q.maxAttempts(st.rec.Task) {
		q.finish(st, q.failure(st, attempts, code, err.Error()))
		return
	}
	q.requeue(st, attempts, now.Add(q.backoff(attempts)), code, err)
}

// requeue puts st back in the queue after a failed attempt. It does
// nothing to a task already finishing (an answer won: see claimSolved).
func (q *Queue) requeue(st *taskState, attempts int, notBefore time.Time, code string, err error) {
	var ok bool
	q.table.Do(func(tx table) { ok = q.retryLocked(tx, st, attempts, notBefore, code, err.Error()) })
	if ok {
		q.storeRetry(st)
	}
}

// retryLocked ends st's attempt in memory: st leaves flight (an answer to
// the attempt that comes later is stale) and is marked queued with
// attempts, notBefore and the error; storeRetry stores it and queues it.
// It reports false, changing nothing, when st is finishing. It runs
// inside q.table.Do.
func (q *Queue) retryLocked(tx table, st *taskState, attempts int, notBefore time.Time, code, text string) bool {
	if st.done {
		return false
	}
	q.leaveFlight(tx, st)
	st.rec.Status, st.rec.CaptchaID, st.rec.Attempts, st.rec.NotBefore = StatusQueued, "", attempts, notBefore
	st.rec.LastError, st.rec.LastErrorCode = text, code
	q.metrics.Retry(code)
	return true
}

// storeRetry stores the retry retryLocked marked, then queues st: the
// write comes before the dispatcher can send st again, so the next
// attempt's checkpoint follows it.
func (q *Queue) storeRetry(st *taskState) {
	var r Record
	q.table.Do(func(table) { r = st.rec })
	if err := q.journal.Retry(q.storeCtx(), r.Task.ID, r.Attempts, r.NotBefore, r.LastError, r.LastErrorCode); err != nil {
		q.log.Error("storing retry failed", "id", r.Task.ID, "err", err)
	}
	q.table.Do(func(tx table) {
		if !q.stopped.Load() {
			q.push(tx, st)
		}
	})
}

// backoff is the wait before retry number n (1-based): exponential from
// RetryBackoff up to RetryBackoffMax, with jitter in [d/2, d] so many
// tasks failing together do not return together.
func (q *Queue) backoff(n int) time.Duration {
	d := q.cfg.RetryBackoff
	for i := 1; i < n && d < q.cfg.RetryBackoffMax; i++ {
		d *= 2
	}
	d = min(d, q.cfg.RetryBackoffMax)
	return d/2 + rand.N(d/2+1)
}

// The pingbacks' state is internal/pingback's: an Inbox per provider
// (its secret and the pingbacks that beat their checkpoint, under its own
// lock), and the reading of a pingback request. PingbackHandler is the API's
// handler and the task table's side: a pingback finds its task, or waits
// in its provider's Inbox for the checkpoint.

// PingbackHandler serves the provider's pingback. Two forms are read:
//
//   - in.php's: a GET or POST with the provider's id and the answer
//     (id=…&code=…), as 2captcha and CaptchaAI send it (and 2captcha's
//     API v2 for its callbackUrl);
//   - createTask's: a POST of getTaskResult's JSON with the task's taskId
//     (Content-Type application/json), as CapMonster Cloud and
//     Anti-Captcha send to a callbackUrl (createtask.ReadCallback).
//
// A solved task is finished at once; a failed one, or one said to be
// still processing, is polled at once for the authoritative state. Serve
// it at Config.PingbackURL. Each provider's submits carry that URL with
// sig=SECRET added to its query, a secret of that provider's own (an
// HMAC-SHA256 of its name keyed by Config.PingbackSecret), and with
// Config.Providers provider=NAME too. A pingback is matched by the
// provider and the id together, and only with that provider's secret
// (compared in constant time): two providers may give out the same id,
// and one provider, or anyone who learns its URL, must never finish
// another's task. A pingback naming none of the providers is refused
// with 400, one without its provider's secret with 403; one for an id
// the provider has not given out changes no task, unless the id is
// checkpointed within 10 s.
func (q *Queue) PingbackHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		query := r.URL.Query()
		l := q.lanes.Lanes()[0]
		if !q.lanes.Single() {
			if l = q.lanes.Named(query.Get("provider")); l == nil {
				http.Error(w, "provider names none of the queue's providers", http.StatusBadRequest)
				return
			}
		}
		inbox := q.inboxes[l.Index()]
		if !inbox.Believe(query.Get("sig")) {
			http.Error(w, "sig is missing or not the provider's: give each provider the pingback URL its submits carry", http.StatusForbidden)
			return
		}
		id, pb, err := pingback.Read(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		key := l.StoredID(id) // as the table indexes it
		pb.At = q.now()
		var st *taskState
		var ok bool
		q.table.Do(func(tx table) {
			if st, ok = tx.ByKey(key); !ok {
				inbox.Keep(key, pb) // the answer beat our checkpoint
			}
		})
		if ok {
			q.pingbackArrived(st, id, pb)
		}
		w.Write([]byte("OK"))
	})
}

// pingbackArrived finishes a task from a pingback for its attempt with
// captchaID. A pingback that says the task is not solved makes the poller
// ask for the authoritative state at once.
func (q *Queue) pingbackArrived(st *taskState, captchaID string, pb pingback.Pingback) {
	if pb.Code != "" {
		var l *lane.Lane
		q.table.Do(func(table) { l = st.lane })
		if l != nil {
			q.pollerOf(l).DueNow(st.rec.Task.ID, captchaID, pb.At)
		}
		return
	}
	q.solved(st, captchaID, pb.Answer, pb.At, time.Time{}, true)
}
