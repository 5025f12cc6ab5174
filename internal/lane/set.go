package lane

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/captchaq/captchaq/provider"
)

// Set is a queue's lanes in order of preference, and the routing among
// them: which lanes solve a task (its class), which may take it now
// (spill-over, spend cap, fail-over), which lane a stored captcha id
// belongs to, and which probes are due. A Set is fixed once built; the
// state it reads is each lane's, behind its parts' locks, so its methods
// are safe for concurrent use.
type Set struct {
	lanes []*Lane
	// single: one unnamed lane (a queue of one Config.Provider), whose
	// stored captcha ids carry no "name:" and whose pingbacks name none.
	single bool
}

// NewSet builds a lane from each of cs, in order of preference: lane i is
// cs[i] with Index i. Only a set of several lanes lets one go down
// (Config.MayGoDown): with one there is nowhere else to send. A set of
// one lane with no Name is single.
func NewSet(cs []Config) *Set {
	s := &Set{lanes: make([]*Lane, len(cs)), single: len(cs) == 1 && cs[0].Name == ""}
	for i, c := range cs {
		c.Index, c.MayGoDown = i, len(cs) > 1
		s.lanes[i] = New(c)
	}
	return s
}

// Lanes are the lanes in order of preference; the caller must not change
// the slice.
func (s *Set) Lanes() []*Lane { return s.lanes }

// Single reports whether the set is one unnamed lane.
func (s *Set) Single() bool { return s.single }

// Named is the lane called name, or nil.
func (s *Set) Named(name string) *Lane {
	for _, l := range s.lanes {
		if l.Name() == name {
			return l
		}
	}
	return nil
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidName reports whether s may name a lane: 1 to 64 letters, digits,
// '-' or '_', so that a stored "name:id" splits at its first colon.
func ValidName(s string) bool { return nameRE.MatchString(s) }

// NameProblem says what is wrong with name, a what's, among the names
// seen before it ("" when nothing), and marks it seen.
func NameProblem(name string, seen map[string]bool, what string) string {
	defer func() { seen[name] = true }()
	switch {
	case !ValidName(name):
		return fmt.Sprintf("%q must be 1 to 64 letters, digits, '-' or '_'", name)
	case seen[name]:
		return fmt.Sprintf("%q is used twice; give each %s its own name", name, what)
	}
	return ""
}

// Of finds the lane of a captcha id as stored (Lane.StoredID) and its bare
// id. An id with no known prefix belongs to the first lane; ok is false
// for an id whose prefix names a lane the set does not have.
func (s *Set) Of(stored string) (l *Lane, captchaID string, ok bool) {
	if !s.single {
		if name, id, found := strings.Cut(stored, ":"); found {
			if l := s.Named(name); l != nil {
				return l, id, true
			}
			if ValidName(name) {
				return nil, "", false
			}
		}
	}
	return s.lanes[0], stored, true
}

// Class is the set of lanes (bit i for lane i) that solve the route
// method m.
func (s *Set) Class(m string) uint64 {
	var c uint64
	for _, l := range s.lanes {
		if l.Solves(m) {
			c |= 1 << l.Index()
		}
	}
	return c
}

// Waiting is what routing knows of a waiting task.
type Waiting struct {
	Class uint64        // the lanes that solve it (Class)
	Route string        // its route method, which prices it at each lane
	Kind  provider.Kind // its median solve time bounds a wait before Deadline
	// Since is when it last joined the queue: SpillAfter counts from it.
	Since    time.Time
	Deadline time.Time // zero: none
}

// Route tells whether lane l may take the waiting task t at now, and if
// not, when it may (zero: not by waiting).
//
// A task goes to the first routable lane that solves it and does not
// refuse its method (Takes). A later lane takes a task an earlier such
// lane solves only once it has waited
// the later lane's SpillAfter, or sooner when waiting that long would
// leave less than its kind's median solve time before its deadline. A
// lane with MaxSpendPerHour takes nothing that would pass it.
func (s *Set) Route(l *Lane, t Waiting, now time.Time) (ok bool, retry time.Time) {
	if t.Class&(1<<l.Index()) == 0 {
		return false, time.Time{}
	}
	if ok, retry := l.Refusals.Takes(t.Route, now); !ok {
		return false, retry
	}
	if ok, retry := l.Ledger.Affords(now, l.PriceOf(t.Route)); !ok {
		return false, retry
	}
	earlier := false
	for _, e := range s.lanes[:l.Index()] {
		if t.Class&(1<<e.Index()) != 0 && e.Health.Routable(now) && !e.Refusals.Refuses(t.Route, now) {
			earlier = true
			break
		}
	}
	if !earlier {
		return true, time.Time{}
	}
	at := t.Since.Add(l.SpillAfter())
	if !t.Deadline.IsZero() && t.Deadline.Sub(at) < provider.MedianSolveTime(t.Kind) {
		return true, time.Time{}
	}
	if !now.Before(at) {
		return true, time.Time{}
	}
	return false, at
}

// Probes calls start for each lane whose probe is due at now
// (Health.ProbeDue; start runs it and ends it with Health.ProbeDone), and
// returns when the next probe is due (zero: none).
func (s *Set) Probes(now time.Time, start func(*Lane)) time.Time {
	var next time.Time
	for _, l := range s.lanes {
		due, at := l.Health.ProbeDue(now)
		if due {
			start(l)
			continue
		}
		if !at.IsZero() && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	return next
}

// Unserved reports whether every lane of class (Class) refuses route
// method m at now: no provider takes its tasks before a hold ends.
func (s *Set) Unserved(class uint64, m string, now time.Time) bool {
	if class == 0 {
		return false
	}
	for _, l := range s.lanes {
		if class&(1<<l.Index()) != 0 && !l.Refusals.Refuses(m, now) {
			return false
		}
	}
	return true
}

// Refusals are every lane's refusals, lanes in order of preference.
func (s *Set) Refusals() []Refusal {
	var out []Refusal
	for _, l := range s.lanes {
		out = append(out, l.Refusals.List()...)
	}
	return out
}
