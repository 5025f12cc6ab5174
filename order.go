package captchaq

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

// LongestFirst reorders tasks so the kinds that take longest to solve go
// first (reCAPTCHA before Turnstile before images), keeping input order
// among tasks of equal ExpectedSolveTime; tasks that do not validate go
// last. Submitted in this order, a batch's last answers come from short
// tasks, so the batch ends sooner: in input order, the whole batch can
// wait for a reCAPTCHA submitted near the end.
//
// The queue itself stays FIFO within a priority and serves lower priority
// numbers first, so this order matters among tasks of one priority. It is
// for callers that hold a whole batch and care only when all of it is done.
func LongestFirst(tasks []Task) {
	SortLongestFirst(tasks, func(t Task) Task { return t })
}

// SortLongestFirst is LongestFirst for a slice of anything that carries a
// Task.
func SortLongestFirst[E any](s []E, task func(E) Task) {
	type keyed struct {
		e        E
		expected time.Duration
	}
	ks := make([]keyed, len(s))
	for i, e := range s {
		ks[i] = keyed{e, task(e).ExpectedSolveTime()}
	}
	slices.SortStableFunc(ks, func(a, b keyed) int { return cmp.Compare(b.expected, a.expected) })
	for i, k := range ks {
		s[i] = k.e
	}
}
