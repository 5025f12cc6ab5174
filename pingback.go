package captchaq

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/captchaq/captchaq/provider"
)

// earlyPingbacksMax bounds pingbacks kept for ids not yet checkpointed.
const earlyPingbacksMax = 1024

type pingback struct {
	code string
	at   time.Time
}

// PingbackHandler serves the provider's pingback: a GET or POST with the
// provider's id and the answer (id=…&code=…). The task is finished at
// once. Serve it at Config.PingbackURL; use a URL that is hard to guess,
// since the answer is taken as sent.
func (q *Queue) PingbackHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, code := r.FormValue("id"), r.FormValue("code")
		if id == "" || code == "" {
			http.Error(w, "id and code are required", http.StatusBadRequest)
			return
		}
		now := q.now()
		q.mu.Lock()
		st, ok := q.byCaptchaID[id]
		if ok && q.sharedIDLocked(st) {
			// Its answer could be any of theirs: poll them all instead.
			q.log.Warn("pingback for an id in flight at several providers: polling them instead", "captcha_id", id)
			var wake []*lane
			for _, o := range q.inflight {
				if o.rec.CaptchaID == id {
					o.due = now
					wake = append(wake, o.lane)
				}
			}
			q.mu.Unlock()
			for _, l := range wake {
				l.poller.wake()
			}
			w.Write([]byte("OK"))
			return
		}
		if !ok {
			// The answer beat our checkpoint: keep it briefly.
			if len(q.earlyPingbacks) >= earlyPingbacksMax {
				for k := range q.earlyPingbacks {
					delete(q.earlyPingbacks, k)
					break
				}
			}
			q.earlyPingbacks[id] = pingback{code: code, at: now}
		}
		q.mu.Unlock()
		if ok {
			q.pingbackArrived(st, id, code, now)
		}
		w.Write([]byte("OK"))
	})
}

// sharedIDLocked reports whether another provider has a task in flight
// under st's captcha id. A pingback names the id, not the provider, and
// providers number their ids independently. Callers hold q.mu.
func (q *Queue) sharedIDLocked(st *taskState) bool {
	if !q.multi() {
		return false
	}
	for _, o := range q.inflight {
		if o != st && o.rec.CaptchaID == st.rec.CaptchaID && o.lane != st.lane {
			return true
		}
	}
	return false
}

// pingbackArrived finishes a task from a pingback for its attempt with
// captchaID. An error code in a pingback makes the poller ask for the
// authoritative state at once.
func (q *Queue) pingbackArrived(st *taskState, captchaID, code string, at time.Time) {
	if strings.HasPrefix(code, "ERROR") || code == "CAPCHA_NOT_READY" {
		q.mu.Lock()
		var l *lane
		if !st.done && st.rec.CaptchaID == captchaID {
			st.due = at
			l = st.lane
		}
		q.mu.Unlock()
		if l != nil {
			l.poller.wake()
		}
		return
	}
	a := provider.Answer{Raw: code, Token: code}
	if t := strings.TrimSpace(code); strings.HasPrefix(t, "{") && json.Valid([]byte(t)) {
		a.JSON = json.RawMessage(t)
	}
	q.solved(st, captchaID, a, at, true)
}
