package server

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"time"
)

// Intake caps, the defaults of the Config fields of the same names.
const (
	MaxTasksPerRequestDefault  = 1000
	MaxBodyInflightDefault     = 128 << 20
	MaxStreamsPerClientDefault = 8
	MaxStreamsDefault          = 256
	MaxWaitsPerClientDefault   = 64
	MaxWaitsDefault            = 1024
	KeylessBodyTimeoutDefault  = 10 * time.Second
)

// gauge is a count of things held, with a cap: take refuses past it. A
// refused take never moves the count, so it cannot refuse another take
// that fits.
type gauge struct{ n atomic.Int64 }

func (g *gauge) take(k, limit int64) bool {
	for {
		n := g.n.Load()
		if n+k > limit {
			return false
		}
		if g.n.CompareAndSwap(n, n+k) {
			return true
		}
	}
}

// takeUpTo takes as much of k as fits under limit, maybe none, and
// returns what it took.
func (g *gauge) takeUpTo(k, limit int64) int64 {
	for {
		n := g.n.Load()
		got := min(k, max(limit-n, 0))
		if got == 0 || g.n.CompareAndSwap(n, n+got) {
			return got
		}
	}
}

func (g *gauge) give(k int64) { g.n.Add(-k) }

// slot takes one of a client's and one of the server's places of a kind
// (event streams, long polls), or answers 429 and returns false.
func slot(w http.ResponseWriter, mine, all *gauge, perClient, overall int, what string) bool {
	if !mine.take(1, int64(perClient)) {
		retryAfter(w, 5*time.Second)
		apiFail(w, http.StatusTooManyRequests, "", fmt.Sprintf("this client already has %d open %s, its limit: close one first", perClient, what))
		return false
	}
	if !all.take(1, int64(overall)) {
		mine.give(1)
		retryAfter(w, 5*time.Second)
		apiFail(w, http.StatusTooManyRequests, "", fmt.Sprintf("the server has %d open %s, its limit: try again shortly", overall, what))
		return false
	}
	return true
}

// bodyRefused answers an API request whose body was cut short: 429 for
// want of room.
func bodyRefused(w http.ResponseWriter, err error) {
	retryAfter(w, time.Second)
	apiFail(w, http.StatusTooManyRequests, "", err.Error())
}
