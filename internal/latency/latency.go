// Package latency learns how long things take: per-kind solve times, so the
// first poll of a task goes out about when its answer is likely ready, and
// the ready-to-delivered delay reported in metrics.
//
// Both keep a bounded window of recent samples; memory does not grow with
// the length of a run.
package latency

import (
	"slices"
	"sync"
	"time"
)

// Window keeps the last n samples and answers quantiles over them. It is
// not safe for concurrent use.
type Window struct {
	buf  []time.Duration
	next int
	full bool
}

// NewWindow returns a Window of n samples (at least 1).
func NewWindow(n int) *Window { return &Window{buf: make([]time.Duration, max(n, 1))} }

// Add records a sample, dropping the oldest when full.
func (w *Window) Add(d time.Duration) {
	w.buf[w.next] = d
	w.next++
	if w.next == len(w.buf) {
		w.next, w.full = 0, true
	}
}

// Len is the number of samples held.
func (w *Window) Len() int {
	if w.full {
		return len(w.buf)
	}
	return w.next
}

// Quantile returns the q-quantile (0..1, nearest rank) of the samples, or 0
// when there are none.
func (w *Window) Quantile(q float64) time.Duration {
	n := w.Len()
	if n == 0 {
		return 0
	}
	s := slices.Clone(w.buf[:n])
	slices.Sort(s)
	i := int(q * float64(n-1))
	return s[min(max(i, 0), n-1)]
}

// Estimator learns, per kind, an early quantile of solve times: polling at
// the 10th–25th percentile finds most answers on the first or second poll
// without asking long before anything can be ready. It is safe for
// concurrent use.
type Estimator struct {
	mu      sync.Mutex
	q       float64
	n       int
	prior   func(kind string) time.Duration
	samples map[string]*Window
}

// NewEstimator returns an Estimator of quantile q over the last n samples
// per kind; prior gives the estimate for a kind not yet observed.
func NewEstimator(q float64, n int, prior func(kind string) time.Duration) *Estimator {
	return &Estimator{q: q, n: n, prior: prior, samples: map[string]*Window{}}
}

// Observe records a solve time for kind.
func (e *Estimator) Observe(kind string, d time.Duration) {
	if d < 0 {
		d = 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	w := e.samples[kind]
	if w == nil {
		w = NewWindow(e.n)
		e.samples[kind] = w
	}
	w.Add(d)
}

// Learned is the learned quantile for kind; ok is false before any sample.
func (e *Estimator) Learned(kind string) (d time.Duration, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if w := e.samples[kind]; w != nil && w.Len() > 0 {
		return w.Quantile(e.q), true
	}
	return 0, false
}

// Estimate is the expected early solve time for kind: the learned quantile,
// or the prior before any sample.
func (e *Estimator) Estimate(kind string) time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	if w := e.samples[kind]; w != nil && w.Len() > 0 {
		return w.Quantile(e.q)
	}
	if e.prior == nil {
		return 0
	}
	return e.prior(kind)
}
