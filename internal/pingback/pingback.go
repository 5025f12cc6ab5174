// Package pingback is a queue's side of its providers' pingbacks: the
// secret each provider's pingback URL carries, the pingbacks that come
// before their task's checkpoint (an Inbox per provider, under its own
// lock), and reading a pingback request of either form (Read).
package pingback

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/provider/createtask"
)

// Pingbacks that come before their checkpoint (the provider answered
// before the queue recorded the id it gave) are kept EarlyTTL, at most
// EarlyMax a provider; the others are dropped and counted. A checkpoint
// follows its submit by a Store write, so seconds are plenty; an answer
// kept longer could only finish a later task that happened to get the
// same id.
const (
	EarlyTTL = 10 * time.Second
	EarlyMax = 256
)

// Pingback is what a provider's pingback says of one task.
type Pingback struct {
	Code   string          // not solved: an ERROR_… or CAPCHA_NOT_READY (in.php's codes)
	Answer provider.Answer // solved: its answer
	At     time.Time       // when it came
}

// Secret is secret, or 32 random bytes when it is empty.
func Secret(secret []byte) []byte {
	if len(secret) > 0 {
		return secret
	}
	secret = make([]byte, 32)
	rand.Read(secret)
	return secret
}

// Inbox is one provider's side of the pingbacks: the secret its URL
// carries and the pingbacks for ids not yet checkpointed. Its lock is a
// leaf: the queue takes it under the task table's, so a pingback kept
// and a checkpoint taking it do not pass each other.
//
// The secret is per provider, not per task. The captcha id is assigned by
// the provider after the URL is sent, so no MAC over it can be in the URL.
// A MAC over the queue's own task id (the URL carrying the task's id)
// would let a callback finish only the task it was sent with, but that
// task's provider answers it anyway: it adds nothing against the
// provider, while it would hand every provider the queue's task ids (a
// client's name and its id) and give each submit a URL of its own. Per
// provider, a callback finishes tasks of the provider it was given to and
// of no other, which is what is needed.
type Inbox struct {
	sig string // hex HMAC-SHA256 of the provider's name
	url string

	mu      sync.Mutex
	early   map[string]Pingback // by the id as stored (lane.StoredID)
	dropped int64               // early ones expired or past the bound
}

// NewInbox returns the inbox of the provider named name; its submits carry
// urlOf(sig), sig being its secret, keyed by secret.
func NewInbox(secret []byte, name string, urlOf func(sig string) string) *Inbox {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("captchaq pingback\x00" + name))
	sig := hex.EncodeToString(m.Sum(nil))
	return &Inbox{sig: sig, url: urlOf(sig), early: map[string]Pingback{}}
}

// URL is the pingback URL the provider's submits carry.
func (b *Inbox) URL() string { return b.url }

// Sig is the provider's secret, as its URL carries it.
func (b *Inbox) Sig() string { return b.sig }

// Believe reports whether sig is the provider's secret, compared in
// constant time.
func (b *Inbox) Believe(sig string) bool { return hmac.Equal([]byte(sig), []byte(b.sig)) }

// Keep holds an early pingback for key, dropping the expired ones first;
// past EarlyMax it is dropped.
func (b *Inbox) Keep(key string, pb Pingback) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k, o := range b.early {
		if pb.At.Sub(o.At) >= EarlyTTL {
			delete(b.early, k)
			b.dropped++
		}
	}
	if _, again := b.early[key]; !again && len(b.early) >= EarlyMax {
		b.dropped++
		return
	}
	b.early[key] = pb
}

// Take removes key's early pingback and reports it if it is younger than
// EarlyTTL at now.
func (b *Inbox) Take(key string, now time.Time) (Pingback, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	pb, ok := b.early[key]
	if !ok {
		return Pingback{}, false
	}
	delete(b.early, key)
	if now.Sub(pb.At) >= EarlyTTL {
		b.dropped++
		return Pingback{}, false
	}
	return pb, true
}

// Counts are the early pingbacks kept now and those dropped so far.
func (b *Inbox) Counts() (kept int, dropped int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.early), b.dropped
}

// Read reads a pingback of either form: in.php's (id=…&code=…, a GET or a
// form POST) or createTask's (a POST of getTaskResult's JSON,
// createtask.ReadCallback). It returns the provider's id and what it says;
// At is left for the caller.
func Read(r *http.Request) (string, Pingback, error) {
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); r.Method == http.MethodPost && ct == "application/json" {
		body, err := io.ReadAll(io.LimitReader(r.Body, createtask.CallbackLimit+1))
		if err != nil {
			return "", Pingback{}, errors.New("reading the body failed")
		}
		cb, err := createtask.ReadCallback(body)
		if err != nil {
			return "", Pingback{}, err
		}
		if !cb.Ready {
			return cb.TaskID, Pingback{Code: cb.Code}, nil
		}
		return cb.TaskID, Pingback{Answer: cb.Answer}, nil
	}
	id, code := r.FormValue("id"), r.FormValue("code")
	if id == "" || code == "" {
		return "", Pingback{}, errors.New("id and code are required (or a createTask callback: getTaskResult's JSON with the taskId)")
	}
	if strings.HasPrefix(code, "ERROR") || code == "CAPCHA_NOT_READY" {
		return id, Pingback{Code: code}, nil
	}
	a := provider.Answer{Raw: code, Token: code}
	if t := strings.TrimSpace(code); strings.HasPrefix(t, "{") && json.Valid([]byte(t)) {
		a.JSON = json.RawMessage(t)
	}
	return id, Pingback{Answer: a}, nil
}
