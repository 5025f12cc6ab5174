package lane

import (
	"errors"
	"maps"
	"slices"
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
func (l *Lane) methodLocked(m string) *method {
	if l.known == nil {
		l.known = map[string]*method{}
	}
	ms := l.known[m]
	if ms == nil {
		ms = &method{}
		l.known[m] = ms
	}
	return ms
}

// Takes tells whether a task of route method m may go to the lane at now,
// as far as the provider's answers about m go, and if not, when it may
// (zero: when the submit of m in progress ends).
func (l *Lane) Takes(m string, now time.Time) (ok bool, retry time.Time) {
	if l.refusalHold < 0 {
		return true, time.Time{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	ms := l.known[m]
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
func (l *Lane) Refuses(m string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	ms := l.known[m]
	return ms != nil && ms.refusal != nil && now.Before(ms.refusal.Until)
}

// Sending is told that a task of route method m was taken for a submit
// here: in a set of several lanes, a method not known to be taken goes
// alone (Takes).
func (l *Lane) Sending(m string) {
	if l.refusalHold < 0 || !l.mayGoDown {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if ms := l.methodLocked(m); !ms.taken {
		ms.trying = true
	}
}

// errNotSent is Sent's err for a submit that was never sent.
var errNotSent = errors.New("not sent")

// NotSent ends a submit of route method m that Sending counted and that
// was not sent.
func (l *Lane) NotSent(m string, now time.Time) { l.Sent(m, errNotSent, now) }

// Sent learns from the answer to a submit of route method m at now (err
// nil: accepted): an acceptance lifts a refusal of m, a refusal of the
// type (provider.TypeRefused) holds m off the lane for its refusal hold.
// changed reports whether the lane's refusals changed (to be stored).
func (l *Lane) Sent(m string, err error, now time.Time) (changed bool) {
	if l.refusalHold < 0 {
		return false
	}
	var pe *provider.Error
	refused := errors.As(err, &pe) && pe.TypeRefused()
	l.mu.Lock()
	ms := l.methodLocked(m)
	ms.trying = false
	was := ms.refusal
	switch {
	case err == nil:
		ms.taken, ms.refusal = true, nil
	case refused:
		ms.taken = false
		r := &Refusal{Provider: l.name, Method: m, Code: pe.Code, Since: now, Until: now.Add(l.refusalHold)}
		if was != nil {
			r.Since = was.Since
		}
		ms.refusal = r
	}
	l.mu.Unlock()
	switch {
	case refused:
		l.log.Warn("provider refuses a type: its tasks go to the other providers that solve it until a probe after the hold",
			"provider", l.name, "method", m, "code", pe.Code, "hold", l.refusalHold)
	case err == nil && was != nil:
		l.log.Info("provider takes a type again: a probe was accepted", "provider", l.name, "method", m, "refused_since", was.Since)
	}
	return refused || err == nil && was != nil
}

// Refusals are the lane's refusals (held, or past their hold and waiting
// for a probe), by method.
func (l *Lane) Refusals() []Refusal {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Refusal
	for _, m := range slices.Sorted(maps.Keys(l.known)) {
		if r := l.known[m].refusal; r != nil {
			out = append(out, *r)
		}
	}
	return out
}

// Restore takes back refusals stored earlier (Refusals); those of other
// providers are left out.
func (l *Lane) Restore(rs []Refusal) {
	if l.refusalHold < 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range rs {
		if r.Provider == l.name && r.Method != "" {
			l.methodLocked(r.Method).refusal = &r
		}
	}
}

// Unserved reports whether every lane of class (Class) refuses route
// method m at now: no provider takes its tasks before a hold ends.
func (s *Set) Unserved(class uint64, m string, now time.Time) bool {
	if class == 0 {
		return false
	}
	for _, l := range s.lanes {
		if class&(1<<l.Index()) != 0 && !l.Refuses(m, now) {
			return false
		}
	}
	return true
}

// Refusals are every lane's refusals, lanes in order of preference.
func (s *Set) Refusals() []Refusal {
	var out []Refusal
	for _, l := range s.lanes {
		out = append(out, l.Refusals()...)
	}
	return out
}
