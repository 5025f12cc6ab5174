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

// takeBodyRoom reserves room for a request body among the bodies of g
// being read (the most it may be: its Content-Length, else the body cap)
// and reports whether there was room. The caller gives the room back
// with g.give.
func (s *Server) takeBodyRoom(g *gauge, r *http.Request) (int64, bool) {
	n := s.cfg.MaxBodyBytes
	if r.ContentLength >= 0 && r.ContentLength < n {
		n = r.ContentLength
	}
	return n, g.take(n, s.cfg.MaxBodyInflight)
}

// bodiesBusy says why a body was not read: the bodies being read fill
// Config.MaxBodyInflight.
func (s *Server) bodiesBusy() string {
	return fmt.Sprintf("the server is reading %d bytes of request bodies, its limit: try again shortly", s.cfg.MaxBodyInflight)
}

// bodyRoom is takeBodyRoom for the JSON API: without room it answers 429
// and returns false.
func (s *Server) bodyRoom(w http.ResponseWriter, r *http.Request) (int64, bool) {
	n, ok := s.takeBodyRoom(&s.bodies, r)
	if !ok {
		retryAfter(w, time.Second)
		apiFail(w, http.StatusTooManyRequests, "", s.bodiesBusy())
	}
	return n, ok
}
