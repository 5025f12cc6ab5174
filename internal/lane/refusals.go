package lane

import (
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/captchaq/captchaq/provider"
)

// RefusalHoldDefault is how long a lane keeps the tasks of a method its
// provider refused away from it before a probe tries again.
const RefusalHoldDefault = time.Hour

// Refusal is a provider's refusal of a route method (provider.TypeRefused):
// the lane takes no task of it before Until; the first task after that is
// the probe, sent alone, and an accepted probe lifts the refusal.
type Refusal struct {
	Provider string    `json:"provider"`
	Method   string    `json:"method"`
	Code     string    `json:"code"`  // the provider's code, e.g. ERROR_METHOD_CALL
	Since    time.Time `json:"since"` // the first refusal since the method was last taken
	Until    time.Time `json:"until"`
}

// Refusals is what a lane knows of the route methods its provider was
// sent: which it took, which a submit is trying, which it refused and
// until when. Its methods are safe for concurrent use and call out only
// to the logger.
type Refusals struct {
	name string
	// hold is how long a refused method stays off the lane (Config's
	// RefusalHold, its default filled in; negative: nothing is held).
	hold time.Duration
	// several: the lane's set has other lanes (Config.MayGoDown), so a
	// method not known to be taken goes alone (Sending).
	several bool
	log     *slog.Logger

	mu    sync.Mutex
	known map[string]*method // by route method
}

// method is what a lane knows of one route method at its provider.
type method struct {
	taken bool // the provider accepted a task of it
	// trying: a submit of it is in progress while it is not known to be
	// taken (the first, or a probe) in a set of several lanes; the others
	// wait for its answer, so a type the provider does not take costs one
	// refused submit, not one per submit in progress. (A lane alone sends
	// on: its tasks of a refused type fail either way.)
	trying  bool
	refusal *Refusal
}

// methodLocked is the state of route method m, made on first use.
func (r *Refusals) methodLocked(m string) *method {
	if r.known == nil {
		r.known = map[string]*method{}
	}
	ms := r.known[m]
	if ms == nil {
		ms = &method{}
		r.known[m] = ms
	}
	return ms
}

// Takes tells whether a task of route method m may go to the lane at now,
// as far as the provider's answers about m go, and if not, when it may
// (zero: when the submit of m in progress ends).
func (r *Refusals) Takes(m string, now time.Time) (ok bool, retry time.Time) {
	if r.hold < 0 {
		return true, time.Time{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	ms := r.known[m]
	switch {
	case ms == nil:
		return true, time.Time{}
	case ms.refusal != nil && now.Before(ms.refusal.Until):
		return false, ms.refusal.Until
	case ms.trying:
		return false, time.Time{}
	}
	return true, time.Time{}
}

// Refuses reports whether the lane holds a refusal of route method m at
// now.
func (r *Refusals) Refuses(m string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	ms := r.known[m]
	return ms != nil && ms.refusal != nil && now.Before(ms.refusal.Until)
}

// Sending is told that a task of route method m was taken for a submit
// here: in a set of several lanes, a method not known to be taken goes
// alone (Takes).
func (r *Refusals) Sending(m string) {
	if r.hold < 0 || !r.several {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if ms := r.methodLocked(m); !ms.taken {
		ms.trying = true
	}
}

// errNotSent is Sent's err for a submit that was never sent.
var errNotSent = errors.New("not sent")

// NotSent ends a submit of route method m that Sending counted and that
// was not sent.
func (r *Refusals) NotSent(m string, now time.Time) { r.Sent(m, errNotSent, now) }

// Sent learns from the answer to a submit of route method m at now (err
// nil: accepted): an acceptance lifts a refusal of m, a refusal of the
// type (provider.TypeRefused) holds m off the lane for its refusal hold.
// changed reports whether the lane's refusals changed (to be stored).
func (r *Refusals) Sent(m string, err error, now time.Time) (changed bool) {
	if r.hold < 0 {
		return false
	}
	var pe *provider.Error
	refused := errors.As(err, &pe) && pe.TypeRefused()
	r.mu.Lock()
	ms := r.methodLocked(m)
	ms.trying = false
	was := ms.refusal
	switch {
	case err == nil:
		ms.taken, ms.refusal = true, nil
	case refused:
		ms.taken = false
		rf := &Refusal{Provider: r.name, Method: m, Code: pe.Code, Since: now, Until: now.Add(r.hold)}
		if was != nil {
			rf.Since = was.Since
		}
		ms.refusal = rf
	}
	r.mu.Unlock()
	switch {
	case refused:
		r.log.Warn("provider refuses a type: its tasks go to the other providers that solve it until a probe after the hold",
			"provider", r.name, "method", m, "code", pe.Code, "hold", r.hold)
	case err == nil && was != nil:
		r.log.Info("provider takes a type again: a probe was accepted", "provider", r.name, "method", m, "refused_since", was.Since)
	}
	return refused || err == nil && was != nil
}

// List is the lane's refusals (held, or past their hold and waiting for
// a probe), by method.
func (r *Refusals) List() []Refusal {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Refusal
	for _, m := range slices.Sorted(maps.Keys(r.known)) {
		if rf := r.known[m].refusal; rf != nil {
			out = append(out, *rf)
		}
	}
	return out
}

// Restore takes back refusals stored earlier (Refusals); those of other
// providers are left out.
func (r *Refusals) Restore(rs []Refusal) {
	if r.hold < 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rf := range rs {
		if rf.Provider == r.name && rf.Method != "" {
			r.methodLocked(rf.Method).refusal = &rf
		}
	}
}
