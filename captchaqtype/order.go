package captchaqtype

import (
	"cmp"
	"slices"
	"time"

	"github.com/captchaq/captchaq/provider"
)

// ExpectedSolveTime is how long t's kind typically takes to solve
// (provider.MedianSolveTime), or 0 when t does not validate.
func (t Task) ExpectedSolveTime() time.Duration {
	k, err := t.ProviderTask().Kind()
	if err != nil {
		return 0
	}
	return provider.MedianSolveTime(k)
}

// LongestFirst reorders tasks as the queue serves them, lower priority
// numbers first, and within a priority so the kinds that take longest to
// solve go first (reCAPTCHA before Turnstile before images), keeping
// input order among tasks of equal ExpectedSolveTime; tasks that do not
// validate go last among their priority. Submitted in this order, a
// batch's last answers come from short tasks, so the batch ends sooner:
// in input order, the whole batch can wait for a reCAPTCHA submitted near
// the end. Priority first keeps the order the queue's own whoever takes
// the tasks first: on one thread, the first task handed over is the one
// the queue would pick.
//
// The queue itself orders this way the tasks of one burst (accepted
// within a second of each other, see bursts) and keeps lower priority
// numbers first, so this order matters among tasks of one priority that
// reach the queue over more than a second: a batch larger than
// Config.MaxQueued, or one fed slowly. It is for callers that hold a
// whole batch and care only when all of it is done.
func LongestFirst(tasks []Task) {
	SortLongestFirst(tasks, func(t Task) Task { return t })
}

// SortLongestFirst is LongestFirst for a slice of anything that carries a
// Task.
func SortLongestFirst[E any](s []E, task func(E) Task) {
	type keyed struct {
		e        E
		priority int
		expected time.Duration
	}
	ks := make([]keyed, len(s))
	for i, e := range s {
		t := task(e)
		ks[i] = keyed{e, effectivePriority(t), t.ExpectedSolveTime()}
	}
	slices.SortStableFunc(ks, func(a, b keyed) int {
		return cmp.Or(cmp.Compare(a.priority, b.priority), cmp.Compare(b.expected, a.expected))
	})
	for i, k := range ks {
		s[i] = k.e
	}
}

// effectivePriority is t's priority, PriorityDefault for none.
func effectivePriority(t Task) int {
	if t.Priority == 0 {
		return PriorityDefault
	}
	return t.Priority
}
