package captchaq

import (
	"cmp"
	"time"
)

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
func effectivePriority(t Task) int { return cmp.Or(t.Priority, PriorityDefault) }
