package captchaq

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/captchaq/captchaq/internal/lane"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/provider/createtask"
)

// Pingbacks that come before their checkpoint (the provider answered
// before the queue recorded the id it gave) are kept earlyPingbackTTL, at
// most earlyPingbacksMax a provider; the others are dropped and counted
// (ProviderMetrics.EarlyPingbacksDropped). A checkpoint follows its submit
// by a Store write, so seconds are plenty; an answer kept longer could
// only finish a later task that happened to get the same id.
const (
	earlyPingbackTTL  = 10 * time.Second
	earlyPingbacksMax = 256
)

// pingbackSecretMin is the shortest Config.PingbackSecret.
const pingbackSecretMin = 16

// pingback is what a provider's pingback says of one task.
type pingback struct {
	code   string          // not solved: an ERROR_… or CAPCHA_NOT_READY (in.php's codes)
	answer provider.Answer // solved: its answer
	at     time.Time
}

// laneCallbacks is one provider's side of the pingbacks: the secret its
// URL carries and the pingbacks for ids not yet checkpointed. early and
// dropped are guarded by the task table's lock.
//
// The secret is per provider, not per task. The captcha id is assigned by
// the provider after the URL is sent, so no MAC over it can be in the URL.
// A MAC over our own task id (the URL carrying the task's id) would let a
// callback finish only the task it was sent with, but that task's provider
// answers it anyway: it adds nothing against the provider, while it would
// hand every provider our task ids (a client's name and its id) and give
// each submit a URL of its own. Per provider, a callback finishes tasks of
// the provider it was given to and of no other, which is what is needed.
type laneCallbacks struct {
	sig     string              // hex HMAC-SHA256 of the provider's name
	early   map[string]pingback // by the id as stored (lane.StoredID)
	dropped int64               // early ones expired or past the bound
}

func newLaneCallbacks(secret []byte, name string) *laneCallbacks {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("captchaq pingback\x00" + name))
	return &laneCallbacks{sig: hex.EncodeToString(m.Sum(nil)), early: map[string]pingback{}}
}

// keep holds an early pingback for key, dropping the expired ones first;
// past earlyPingbacksMax it is dropped. Call it inside q.table.Do.
func (c *laneCallbacks) keep(key string, pb pingback) {
	for k, o := range c.early {
		if pb.at.Sub(o.at) >= earlyPingbackTTL {
			delete(c.early, k)
			c.dropped++
		}
	}
	if _, again := c.early[key]; !again && len(c.early) >= earlyPingbacksMax {
		c.dropped++
		return
	}
	c.early[key] = pb
}

// take removes key's early pingback and reports it if it is younger than
// earlyPingbackTTL at now. Call it inside q.table.Do.
func (c *laneCallbacks) take(key string, now time.Time) (pingback, bool) {
	pb, ok := c.early[key]
	if !ok {
		return pingback{}, false
	}
	delete(c.early, key)
	if now.Sub(pb.at) >= earlyPingbackTTL {
		c.dropped++
		return pingback{}, false
	}
	return pb, true
}

// pingbackURL is the URL l's submits carry: Config.PingbackURL with l's
// name and secret.
func (q *Queue) pingbackURL(l *lane.Lane) string {
	return l.PingbackURL(q.cfg.PingbackURL, q.pingbackByLane[l].sig)
}

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
// checkpointed within earlyPingbackTTL (10 s).
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
		cb := q.pingbackByLane[l]
		if !hmac.Equal([]byte(query.Get("sig")), []byte(cb.sig)) {
			http.Error(w, "sig is missing or not the provider's: give each provider the pingback URL its submits carry", http.StatusForbidden)
			return
		}
		id, pb, err := readPingback(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		key := l.StoredID(id) // as the table indexes it
		pb.at = q.now()
		var st *taskState
		var ok bool
		q.table.Do(func(tx table) {
			if st, ok = tx.ByKey(key); !ok {
				cb.keep(key, pb) // the answer beat our checkpoint
			}
		})
		if ok {
			q.pingbackArrived(st, id, pb)
		}
		w.Write([]byte("OK"))
	})
}

// readPingback reads a pingback of either form: the provider's id and
// what it says.
func readPingback(r *http.Request) (string, pingback, error) {
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); r.Method == http.MethodPost && ct == "application/json" {
		body, err := io.ReadAll(io.LimitReader(r.Body, createtask.CallbackLimit+1))
		if err != nil {
			return "", pingback{}, errors.New("reading the body failed")
		}
		cb, err := createtask.ReadCallback(body)
		if err != nil {
			return "", pingback{}, err
		}
		if !cb.Ready {
			return cb.TaskID, pingback{code: cb.Code}, nil
		}
		return cb.TaskID, pingback{answer: cb.Answer}, nil
	}
	id, code := r.FormValue("id"), r.FormValue("code")
	if id == "" || code == "" {
		return "", pingback{}, errors.New("id and code are required (or a createTask callback: getTaskResult's JSON with the taskId)")
	}
	if strings.HasPrefix(code, "ERROR") || code == "CAPCHA_NOT_READY" {
		return id, pingback{code: code}, nil
	}
	a := provider.Answer{Raw: code, Token: code}
	if t := strings.TrimSpace(code); strings.HasPrefix(t, "{") && json.Valid([]byte(t)) {
		a.JSON = json.RawMessage(t)
	}
	return id, pingback{answer: a}, nil
}

// pingbackArrived finishes a task from a pingback for its attempt with
// captchaID. A pingback that says the task is not solved makes the poller
// ask for the authoritative state at once.
func (q *Queue) pingbackArrived(st *taskState, captchaID string, pb pingback) {
	if pb.code != "" {
		var l *lane.Lane
		q.table.Do(func(table) { l = st.lane })
		if l != nil {
			q.pollerOf(l).DueNow(st.rec.Task.ID, captchaID, pb.at)
		}
		return
	}
	q.solved(st, captchaID, pb.answer, pb.at, time.Time{}, true)
}
