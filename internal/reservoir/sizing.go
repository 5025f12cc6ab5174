// Package reservoir sizes a reservoir of pre-solved tokens from the demand
// it observes: enough tokens in stock and in flight to cover the requests
// expected over a solve time (Little's law: L = λW), with a margin for the
// spread of a Poisson count, never more than the reservoir's max, and
// never more than the demand can use before the tokens age out.
//
// A Pool runs a queue's reservoirs on that rule: which requests draw from
// which, the refills each needs within the threads they may take, the
// refills in flight, and their counts.
//
// Nothing here reads a clock: every call takes the time it is asked at,
// so the rule is tested on made-up times.
package reservoir

import (
	"math"
	"slices"
	"time"
)

// WindowDefault is how far back Demand looks by default: long enough to smooth
// a steady rate, short enough that a reservoir shrinks within a minute of
// demand falling.
const WindowDefault = time.Minute

// demandBuckets is how many buckets a Demand's window is cut into.
const demandBuckets = 60

// Demand counts the arrivals of matching requests over a sliding window,
// in buckets: its memory does not grow with the rate.
type Demand struct {
	bucket time.Duration
	counts [demandBuckets]int
	index  [demandBuckets]int64 // the bucket number each slot counts
	// early and late are each slot's earliest and latest arrival (Unix
	// nanoseconds), for the gaps between arrivals.
	early, late [demandBuckets]int64
	first       time.Time // the first arrival; zero before any
	last        time.Time // the latest arrival
}

// NewDemand returns a Demand over window (WindowDefault when 0).
func NewDemand(window time.Duration) *Demand {
	if window <= 0 {
		window = WindowDefault
	}
	return &Demand{bucket: max(window/demandBuckets, time.Millisecond)}
}

// Arrive counts a request at.
func (d *Demand) Arrive(at time.Time) {
	if d.first.IsZero() {
		d.first = at
	}
	if at.After(d.last) {
		d.last = at
	}
	ns := at.UnixNano()
	n := ns / int64(d.bucket)
	slot := int(n % demandBuckets)
	if d.index[slot] != n || d.counts[slot] == 0 {
		d.index[slot], d.counts[slot], d.early[slot], d.late[slot] = n, 0, ns, ns
	}
	d.counts[slot]++
	d.early[slot], d.late[slot] = min(d.early[slot], ns), max(d.late[slot], ns)
}

// Rate is the arrivals per second over the window ending at now, or since
// the first arrival when that is sooner (so a new reservoir does not wait
// a whole window to see its demand); 0 before any arrival.
func (d *Demand) Rate(now time.Time) float64 {
	if d.first.IsZero() {
		return 0
	}
	n := now.UnixNano() / int64(d.bucket)
	sum := 0
	for i, idx := range d.index {
		if idx > n-demandBuckets && idx <= n {
			sum += d.counts[i]
		}
	}
	// The buckets from the first arrival's to now's, at most the window.
	buckets := min(n-d.first.UnixNano()/int64(d.bucket)+1, demandBuckets)
	return float64(sum) / (time.Duration(buckets) * d.bucket).Seconds()
}

// Last is the latest arrival, zero before any.
func (d *Demand) Last() time.Time { return d.last }

// LongestGap is the longest time between two arrivals in a row within the
// window ending at now, measured between buckets (a gap inside one bucket
// is shorter than a bucket and not measured); 0 with fewer than two
// buckets of arrivals.
func (d *Demand) LongestGap(now time.Time) time.Duration {
	n := now.UnixNano() / int64(d.bucket)
	var longest, prev int64
	for k := n - demandBuckets + 1; k <= n; k++ {
		slot := int(k % demandBuckets)
		if d.index[slot] != k || d.counts[slot] == 0 {
			continue
		}
		if prev != 0 {
			longest = max(longest, d.early[slot]-prev)
		}
		prev = d.late[slot]
	}
	return time.Duration(longest)
}

// Live reports whether the demand lasts at now: an arrival came at or
// after since, or the time since the latest arrival is within the longest
// gap between arrivals of the window. A steady demand of one a second is
// live up to a second past its latest arrival; one that stops is not
// once it has been silent for longer than it ever was.
func (d *Demand) Live(now, since time.Time) bool {
	if d.last.IsZero() {
		return false
	}
	return !d.last.Before(since) || now.Sub(d.last) <= d.LongestGap(now)
}

// solveSamples is how many recent solve times SolveTimes keeps.
const solveSamples = 64

// SolveTimes keeps the latest solve times of a reservoir's refills.
type SolveTimes struct {
	prior   time.Duration
	size    int             // how many it keeps
	samples []time.Duration // a ring of at most size
	next    int
}

// NewSolveTimes returns SolveTimes that answer prior (the kind's published
// median, say) until a refill has been timed.
func NewSolveTimes(prior time.Duration) *SolveTimes {
	return &SolveTimes{prior: prior, size: solveSamples}
}

// Add records a refill's solve time.
func (s *SolveTimes) Add(d time.Duration) {
	if len(s.samples) < s.size {
		s.samples = append(s.samples, d)
		return
	}
	s.samples[s.next] = d
	s.next = (s.next + 1) % s.size
}

// Quantile is the q-quantile (0 < q ≤ 1) of the recorded solve times, the
// prior before any.
func (s *SolveTimes) Quantile(q float64) time.Duration {
	if len(s.samples) == 0 {
		return s.prior
	}
	sorted := slices.Clone(s.samples)
	slices.Sort(sorted)
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// SolveQuantile is the solve time a reservoir plans on: most refills
// finish sooner.
const SolveQuantile = 0.9

// spread is how many standard deviations of a Poisson count of the
// expected demand a reservoir holds beyond its mean.
const spread = 2.0

// Target is how many tokens to hold in stock and in flight for a demand
// of rate per second, when a refill takes solve and a token can be handed
// out for usable after it is solved: the requests expected over a solve
// (rate × solve) plus spread standard deviations of that count, at most
// what the demand takes within usable (more would age out unused), and at
// most limit. Zero when there is no demand or no usable life.
func Target(rate float64, solve, usable time.Duration, limit int) int {
	mean := rate * solve.Seconds()
	if mean <= 0 || usable <= 0 || limit <= 0 {
		return 0
	}
	n := int(math.Ceil(mean + spread*math.Sqrt(mean)))
	if use := int(math.Ceil(rate * usable.Seconds())); use < n {
		n = use
	}
	return min(max(n, 1), limit)
}
