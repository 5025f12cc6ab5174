package server

import (
	"context"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/captchaq/captchaq"
)

// clientBook is the clients by key and by name with their limits and
// counts; each clientState has its own lock. front, when set, keeps
// max_inflight and rate across the replicas of a front.
type clientBook struct {
	byKey  map[string]*clientState
	byName map[string]*clientState
	front  FrontLimiter // nil: max_inflight and rate are counted here alone
	log    *slog.Logger
}

// newClientBook holds cfg's clients, each replaying at most once per
// cfg.ReplayEvery.
func newClientBook(cfg Config) *clientBook {
	b := &clientBook{byKey: map[string]*clientState{}, byName: map[string]*clientState{}, log: cfg.Logger}
	for _, c := range cfg.Clients {
		cs := &clientState{Client: c, inflight: map[string]struct{}{}, replayRate: rate.NewLimiter(rate.Every(cfg.ReplayEvery), 1)}
		if c.Rate > 0 {
			cs.limiter = rate.NewLimiter(rate.Limit(c.Rate), max(1, int(c.Rate)))
		}
		b.byKey[c.Key] = cs
		b.byName[c.Name] = cs
	}
	return b
}

// weights are the clients' weights by name, for the Backend.
func (b *clientBook) weights() map[string]int {
	w := map[string]int{}
	for name, cs := range b.byName {
		w[name] = max(cs.Weight, 1)
	}
	return w
}

// pending counts rec among its client's unfinished tasks.
func (b *clientBook) pending(rec captchaq.Record) error {
	if cs := b.byName[rec.Task.Tenant]; cs != nil {
		cs.mu.Lock()
		cs.inflight[rec.Task.ID] = struct{}{}
		cs.mu.Unlock()
	}
	return nil
}

// finished counts r, a final result, for its client.
func (b *clientBook) finished(tenant string, r captchaq.Result) {
	cs := b.byName[tenant]
	if cs == nil {
		return
	}
	cs.mu.Lock()
	delete(cs.inflight, r.ID)
	if r.Status == captchaq.StatusSolved {
		cs.solved++
	} else {
		cs.failed++
	}
	cs.mu.Unlock()
}

// otherAccepted counts a task another replica of the front accepted among
// its client's unfinished tasks (its max_inflight and rate are the
// front's, FrontLimiter).
func (b *clientBook) otherAccepted(rec captchaq.Record) {
	cs := b.byName[rec.Task.Tenant]
	if cs == nil {
		return
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if _, known := cs.inflight[rec.Task.ID]; known {
		return
	}
	if !rec.Status.Final() {
		// Not when it is final already: its result was told first, and
		// nothing would take it out again.
		cs.inflight[rec.Task.ID] = struct{}{}
	}
	cs.accepted++
}

// releaseID gives back the room a Store id took in its client's limits.
func (b *clientBook) releaseID(id string) {
	client, _ := splitID(id)
	if cs := b.byName[client]; cs != nil {
		b.release(cs, id)
	}
}

// clientState is one client with its limits and live counts.
type clientState struct {
	Client
	limiter *rate.Limiter

	streams, waits gauge // open event streams and long polls
	// bodyShare is the client's own share of the bodies being read
	// (Config.MaxBodyPerClient): no other client's bytes take it.
	bodyShare gauge
	// replays is the replay running (at most one); replayRate spaces
	// their starts by Config.ReplayEvery.
	replays    gauge
	replayRate *rate.Limiter

	mu       sync.Mutex
	inflight map[string]struct{} // unfinished task ids (store ids)
	solved   int64
	failed   int64
	accepted int64
}

// client finds the client with key, in constant time per key.
func (b *clientBook) client(key string) *clientState {
	if key == "" {
		return nil
	}
	var found *clientState
	for k, c := range b.byKey {
		if subtle.ConstantTimeCompare([]byte(k), []byte(key)) == 1 {
			found = c
		}
	}
	return found
}

// reserve takes room for n new tasks of cs against its rate and in-flight
// bound. It returns a non-nil *limitError when refused.
func (cs *clientState) reserve(ids []string) *limitError {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	fresh := 0
	for _, id := range ids {
		if _, ok := cs.inflight[id]; !ok {
			fresh++
		}
	}
	if cs.MaxInflight > 0 && len(cs.inflight)+fresh > cs.MaxInflight {
		return &limitError{inflight: true, msg: fmt.Sprintf("client %q has %d unfinished tasks; its max_inflight is %d", cs.Name, len(cs.inflight), cs.MaxInflight), retry: time.Second}
	}
	if le := cs.takeRate(len(ids)); le != nil {
		return le
	}
	for _, id := range ids {
		cs.inflight[id] = struct{}{}
	}
	return nil
}

// takeRate takes n of cs's rate (its tasks per second: submits, replays
// and reports alike), or returns why not. Called with cs.mu held or not:
// the limiter has its own lock.
func (cs *clientState) takeRate(n int) *limitError {
	if cs.limiter == nil {
		return nil
	}
	now := time.Now()
	r := cs.limiter.ReserveN(now, max(n, 1))
	if !r.OK() {
		return &limitError{msg: fmt.Sprintf("client %q sent %d tasks at once; its rate allows %d per second", cs.Name, n, cs.limiter.Burst()), retry: time.Second}
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return &limitError{msg: fmt.Sprintf("client %q is over its rate of %g tasks per second", cs.Name, cs.Rate), retry: d}
	}
	return nil
}

// reserve takes room for new tasks of cs against its max_inflight and
// rate: counted here (cs.reserve), or, when the Backend keeps them across
// the replicas of a front (FrontLimiter), there, in one round trip for a
// client with either bound (none for a client with neither); the tasks
// then count among the client's unfinished tasks here too.
func (b *clientBook) reserve(ctx context.Context, cs *clientState, ids []string) *limitError {
	if b.front == nil {
		return cs.reserve(ids)
	}
	if cs.MaxInflight > 0 || cs.limiter != nil {
		burst := 0
		if cs.limiter != nil {
			burst = cs.limiter.Burst()
			if len(ids) > burst {
				return &limitError{msg: fmt.Sprintf("client %q sent %d tasks at once; its rate allows %d per second", cs.Name, len(ids), burst), retry: time.Second}
			}
		}
		ok, held, wait, err := b.front.Admit(ctx, cs.Name, ids, cs.MaxInflight, cs.Rate, burst)
		switch {
		case err != nil:
			b.log.Error("store read failed", "err", err)
			return &limitError{inflight: true, msg: "the store cannot be reached now; try again shortly", retry: time.Second}
		case !ok && wait > 0:
			return &limitError{msg: fmt.Sprintf("client %q is over its rate of %g tasks per second across the front's replicas", cs.Name, cs.Rate), retry: wait}
		case !ok:
			return &limitError{inflight: true, msg: fmt.Sprintf("client %q has %d unfinished tasks on the front's replicas; its max_inflight is %d", cs.Name, held, cs.MaxInflight), retry: time.Second}
		}
	}
	cs.mu.Lock()
	for _, id := range ids {
		cs.inflight[id] = struct{}{}
	}
	cs.mu.Unlock()
	return nil
}

// takeRate takes n of cs's rate (a report's), here or across the front
// (FrontLimiter, under id).
func (b *clientBook) takeRate(ctx context.Context, cs *clientState, id string) *limitError {
	if b.front == nil || cs.limiter == nil {
		return cs.takeRate(1)
	}
	ok, _, wait, err := b.front.Admit(ctx, cs.Name, []string{id}, 0, cs.Rate, cs.limiter.Burst())
	switch {
	case err != nil:
		b.log.Error("store read failed", "err", err)
		return &limitError{msg: "the store cannot be reached now; try again shortly", retry: time.Second}
	case !ok:
		return &limitError{msg: fmt.Sprintf("client %q is over its rate of %g tasks per second across the front's replicas", cs.Name, cs.Rate), retry: wait}
	}
	return nil
}

// release gives back the room of tasks of cs that were not accepted,
// here and at the front (FrontLimiter).
func (b *clientBook) release(cs *clientState, ids ...string) {
	for _, id := range ids {
		cs.release(id)
	}
	if b.front == nil || cs.MaxInflight <= 0 || len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.front.FreeSlots(ctx, ids); err != nil {
		// The room comes back by itself a minute after it was taken.
		b.log.Warn("giving back a client's room at the front failed", "client", cs.Name, "err", err)
	}
}

// release gives back the room of a task that was not accepted.
func (cs *clientState) release(id string) {
	cs.mu.Lock()
	delete(cs.inflight, id)
	cs.mu.Unlock()
}

func (cs *clientState) inflightCount() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return len(cs.inflight)
}

// limitError is a refused submit: over the rate or the in-flight bound.
type limitError struct {
	inflight bool
	msg      string
	retry    time.Duration
}

func (e *limitError) Error() string { return e.msg }

// authed wraps an API handler with the Bearer key check.
func (b *clientBook) authed(h func(http.ResponseWriter, *http.Request, *clientState)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok && r.URL.Path == "/v1/events" {
			// EventSource cannot set headers; everywhere else a key in the
			// URL would end up in logs and histories, so it is not read.
			// An admin's key, which sees every client, is not read here
			// either.
			if cs := b.client(strings.TrimSpace(r.URL.Query().Get("key"))); cs != nil && cs.Admin {
				w.Header().Set("WWW-Authenticate", `Bearer realm="captchaq"`)
				apiFail(w, http.StatusUnauthorized, "key", "an admin key is not taken from the URL (it would stay in logs and histories): send Authorization: Bearer <admin key>")
				return
			}
			key = r.URL.Query().Get("key")
		}
		cs := b.client(strings.TrimSpace(key))
		if cs == nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="captchaq"`)
			apiFail(w, http.StatusUnauthorized, "Authorization", "missing or unknown key: send Authorization: Bearer <a key from the clients file>")
			return
		}
		h(w, r, cs)
	}
}
