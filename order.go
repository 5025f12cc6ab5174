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

// burstWindow is how close tasks' acceptances must be for them to count
// as arrived together: a task accepted within burstWindow of the first
// task of the current burst joins it, a later one starts the next.
const burstWindow = time.Second

// bursts numbers the bursts of accepted tasks, for the queue's order:
// within a priority and tenant, bursts go in arrival order, and within a
// burst the kinds that take longest (provider.MedianSolveTime) go first,
// FIFO among equals. A batch handed over at once is a burst, so its last
// answers come from short tasks instead of a long one started last;
// tasks that stream in are reordered only among those accepted within
// burstWindow of each other, so none is passed by a task accepted later
// than that. Guarded by the task table's lock (Queue.table).
type bursts struct {
	n     int64
	start time.Time // acceptance of the current burst's first task
}

// of is the burst of a task accepted at accepted.
func (b *bursts) of(accepted time.Time) int64 {
	if b.n == 0 || accepted.Sub(b.start) > burstWindow {
		b.n++
		b.start = accepted
	}
	return b.n
}

// effectivePriority is t's priority, PriorityDefault for none.
func effectivePriority(t Task) int {
	if t.Priority == 0 {
		return PriorityDefault
	}
	return t.Priority
}
