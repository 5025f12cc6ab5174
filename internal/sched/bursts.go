package sched

import "time"

// BurstWindow is how close tasks' acceptances must be for them to count
// as arrived together: a task accepted within BurstWindow of the first
// task of the current burst joins it, a later one starts the next.
const BurstWindow = time.Second

// Bursts numbers the bursts of accepted tasks (Item.Burst), for the
// queue's order: within a priority and tenant, bursts go in arrival
// order, and within a burst the kinds that take longest
// (provider.MedianSolveTime) go first, FIFO among equals. A batch handed
// over at once is a burst, so its last answers come from short tasks
// instead of a long one started last; tasks that stream in are reordered
// only among those accepted within BurstWindow of each other, so none is
// passed by a task accepted later than that. Its owner guards it (the
// queue: its task table's lock).
type Bursts struct {
	n     int64
	start time.Time // acceptance of the current burst's first task
}

// Of is the burst of a task accepted at accepted.
func (b *Bursts) Of(accepted time.Time) int64 {
	if b.n == 0 || accepted.Sub(b.start) > BurstWindow {
		b.n++
		b.start = accepted
	}
	return b.n
}
