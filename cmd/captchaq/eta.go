package main

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
)

// etaModel estimates a batch's time left from the solve-time model rather
// than from the rate so far: a batch's first answers are its quickest (the
// images), so an ETA from the rate reads seconds while its reCAPTCHAs still
// have most of their solve ahead.
//
// Each unfinished task is expected to take its kind's solve time: the
// published median (provider.MedianSolveTime), moved towards the mean of
// this batch's answers of that kind as they come (the median counts as
// priorWeight answers). The work done so far on the tasks in flight is the
// thread-time the queue has used (sampled) less what the
// tasks it finished took of it (from their submit, or this run's start,
// to their answer). The time left is the largest of: the work left spread
// over the threads; what the last of the longest kind in flight (the queue
// starts the longest kinds first) is expected to take still at the tasks
// in flight's average age (tailLeft); the longest waiting task's whole
// solve time. A task resumed at the provider from an earlier run counts
// its age from its submit then (atProviderSince).
type etaModel struct {
	open    map[string]provider.Kind // tasks read and not finished
	count   map[provider.Kind]int    // open tasks by kind
	learned map[provider.Kind]kindMean
	busy    time.Duration // thread-time used up to sampled
	sampled time.Time
	started time.Time     // the first sample: this run's start
	done    time.Duration // thread-time of this run the finished tasks took
	// since holds the submit of each task at the provider since before
	// this run (resumed from an earlier one): the solve time it has had
	// already, which the thread-time of this run does not count.
	since map[string]time.Time
}

// solveSpread is the spread of solve times around their median: the
// standard deviation of their logarithm, as the simulator draws
// reCAPTCHA's (0.25 to 0.35 for the other kinds).
const solveSpread = 0.35

// tailLeft is how much longer the last of n tasks in flight, whose solve
// times are log-normal around median (solveSpread) and which have taken
// age, is expected to take: the last of n draws lands about at the
// n/(n+1) quantile, here of the solve times longer than age. A task past
// its median still has a good part of its solve ahead, and the last of
// four is later than one alone.
func tailLeft(median, age time.Duration, n int) time.Duration {
	if median <= 0 || n < 1 {
		return 0
	}
	phi := func(x float64) float64 { return 0.5 * math.Erfc(-x/math.Sqrt2) }
	p0 := 0.0 // the share of solve times shorter than age
	if age > 0 {
		p0 = phi((math.Log(float64(age)) - math.Log(float64(median))) / solveSpread)
	}
	q := p0 + (1-p0)*float64(n)/float64(n+1)
	if q >= 1 {
		return 0 // far past anything drawn: no estimate beyond the floor
	}
	quantile := math.Sqrt2 * math.Erfinv(2*q-1)
	return max(time.Duration(float64(median)*math.Exp(solveSpread*quantile))-age, 0)
}

// kindMean is the sum and count of the solve times seen for a kind.
type kindMean struct {
	sum time.Duration
	n   int
}

// priorWeight is how many answers the published median counts as.
const priorWeight = 2

func newETAModel() *etaModel {
	return &etaModel{open: map[string]provider.Kind{}, count: map[provider.Kind]int{}, learned: map[provider.Kind]kindMean{},
		since: map[string]time.Time{}}
}

// atProviderSince notes a task at the provider since submitted, in an
// earlier run.
func (e *etaModel) atProviderSince(id string, submitted time.Time) {
	e.since[id] = submitted
}

// read notes a task the batch will submit.
func (e *etaModel) read(t captchaq.Task) {
	k, err := t.ProviderTask().Kind()
	if _, dup := e.open[t.ID]; err != nil || dup {
		return
	}
	e.open[t.ID] = k
	e.count[k]++
}

// finished notes a result; its solve time teaches the model its kind's.
func (e *etaModel) finished(r captchaq.Result) {
	k, ok := e.open[r.ID]
	if !ok {
		return
	}
	delete(e.open, r.ID)
	delete(e.since, r.ID)
	e.count[k]--
	// Only this run's part: a task resumed from an earlier run, or
	// answered from the store, held no thread of it before.
	if !r.FinishedAt.IsZero() && !e.started.IsZero() {
		e.done += max(r.FinishedAt.Sub(later(r.SubmittedAt, e.started)), 0)
	}
	if r.Status == captchaq.StatusSolved && r.SolveSeconds > 0 {
		m := e.learned[k]
		m.sum += time.Duration(r.SolveSeconds * float64(time.Second))
		m.n++
		e.learned[k] = m
	}
}

// sample adds the thread-time used since the last sample.
func (e *etaModel) sample(now time.Time, threadsInUse int) {
	if !e.sampled.IsZero() && now.After(e.sampled) {
		e.busy += time.Duration(max(threadsInUse, 0)) * now.Sub(e.sampled)
	}
	if e.started.IsZero() {
		e.started = now
	}
	e.sampled = now
}

// expected is a kind's expected solve time.
func (e *etaModel) expected(k provider.Kind) time.Duration {
	prior := provider.MedianSolveTime(k)
	m := e.learned[k]
	return (prior*priorWeight + m.sum) / time.Duration(priorWeight+m.n)
}

// left is the time left for the open tasks and unread more of unknown
// kind, given the queue's metrics; ok is false when nothing is left.
func (e *etaModel) left(m captchaq.Metrics, unread int) (time.Duration, bool) {
	type group struct {
		d time.Duration
		n int
	}
	var groups []group
	var work time.Duration
	n := 0
	for k, c := range e.count {
		if c > 0 {
			d := e.expected(k)
			groups = append(groups, group{d, c})
			work += d * time.Duration(c)
			n += c
		}
	}
	if unread > 0 {
		// Lines not read yet: the mean of those read so far.
		mean := provider.MedianSolveTime(provider.KindImage)
		if n > 0 {
			mean = work / time.Duration(n)
		}
		groups = append(groups, group{mean, unread})
		work += mean * time.Duration(unread)
		n += unread
	}
	if n == 0 {
		return 0, false
	}
	slices.SortFunc(groups, func(a, b group) int { return cmp.Compare(b.d, a.d) })
	inFlightDone := max(e.busy-e.done, 0)
	for id, at := range e.since {
		// What the resumed tasks had before this run.
		if _, open := e.open[id]; open && !e.started.IsZero() {
			inFlightDone += max(e.started.Sub(at), 0)
		}
	}
	flying := min(max(m.ThreadsInUse, 0), n)
	left := max(work-inFlightDone, 0) / time.Duration(max(m.Window, 1))
	if flying > 0 {
		left = max(left, tailLeft(groups[0].d, inFlightDone/time.Duration(flying), min(groups[0].n, flying)))
	}
	// The longest waiting task: the first after the flying ones.
	for i, seen := 0, 0; i < len(groups) && flying < n; i++ {
		if seen += groups[i].n; seen > flying {
			left = max(left, groups[i].d)
			break
		}
	}
	return max(left, time.Second), true
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
