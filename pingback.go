package captchaq

import (
	"net/http"
	"time"

	"github.com/captchaq/captchaq/internal/lane"
	"github.com/captchaq/captchaq/internal/pingback"
)

// The pingbacks' state is internal/pingback's: an Inbox per provider
// (its secret and the pingbacks that beat their checkpoint, under its own
// lock), and the reading of a pingback request. This file is the API's
// handler and the task table's side: a pingback finds its task, or waits
// in its provider's Inbox for the checkpoint.

// pingbackSecretMin is the shortest Config.PingbackSecret.
const pingbackSecretMin = 16

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
