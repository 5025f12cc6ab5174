package captchaq

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/captchaq/captchaq/internal/lane"
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
// since the answer is taken as sent. With Config.Providers each
// provider's submits carry the URL with provider=NAME added to its query,
// and a pingback is matched by that name and the id together: two
// providers may give out the same id, and an id must never finish another
// provider's task. A pingback without a provider is refused then.
func (q *Queue) PingbackHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, code := r.FormValue("id"), r.FormValue("code")
		if id == "" || code == "" {
			http.Error(w, "id and code are required", http.StatusBadRequest)
			return
		}
		l := q.lanes[0]
		if l.Name() != "" {
			name := r.FormValue("provider")
			i := slices.IndexFunc(q.lanes, func(o *lane.Lane) bool { return o.Name() == name })
			if i < 0 {
				http.Error(w, "provider names none of the queue's providers", http.StatusBadRequest)
				return
			}
			l = q.lanes[i]
		}
		key := l.StoredID(id) // as byCaptchaID holds it
		now := q.now()
		q.mu.Lock()
		st, ok := q.byCaptchaID[key]
		if !ok {
			// The answer beat our checkpoint: keep it briefly.
			if len(q.earlyPingbacks) >= earlyPingbacksMax {
				for k := range q.earlyPingbacks {
					delete(q.earlyPingbacks, k)
					break
				}
			}
			q.earlyPingbacks[key] = pingback{code: code, at: now}
		}
		q.mu.Unlock()
		if ok {
			q.pingbackArrived(st, id, code, now)
		}
		w.Write([]byte("OK"))
	})
}

// pingbackArrived finishes a task from a pingback for its attempt with
// captchaID. An error code in a pingback makes the poller ask for the
// authoritative state at once.
func (q *Queue) pingbackArrived(st *taskState, captchaID, code string, at time.Time) {
	if strings.HasPrefix(code, "ERROR") || code == "CAPCHA_NOT_READY" {
		q.mu.Lock()
		l := st.lane
		q.mu.Unlock()
		if l != nil {
			q.pollerOf(l).DueNow(st.rec.Task.ID, captchaID, at)
		}
		return
	}
	a := provider.Answer{Raw: code, Token: code}
	if t := strings.TrimSpace(code); strings.HasPrefix(t, "{") && json.Valid([]byte(t)) {
		a.JSON = json.RawMessage(t)
	}
	q.solved(st, captchaID, a, at, time.Time{}, true)
}
