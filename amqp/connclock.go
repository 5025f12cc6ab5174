package amqp

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// readClock is when a connection last read anything from the broker (a
// heartbeat at the least: RabbitMQ sends one when it has sent nothing for
// half the heartbeat timeout). A connection silent for longer than
// Config.Heartbeat may be cut off: the broker may give up on it, and give
// its deliveries to others, before the client notices (see "Recovery" in
// the package doc).
type readClock struct{ at atomic.Int64 }

func (r *readClock) last() time.Time { return time.Unix(0, r.at.Load()) }

// stallClock notes when the process last ran its connection watcher
// (Conn.watch ticks it four times a heartbeat), so that a stall longer
// than Config.Heartbeat (SIGSTOP, a suspended machine) is known after:
// bytes read from the broker right after one may have waited in the
// socket through it, and say nothing of the broker now.
type stallClock struct {
	mu       sync.Mutex
	last     time.Time
	from, to time.Time // the latest stall
}

// reset starts counting at now, as after a reconnect (the watcher did not
// tick meanwhile, and the process ran).
func (s *stallClock) reset(now time.Time) {
	s.mu.Lock()
	s.last = now
	s.mu.Unlock()
}

// tick notes that the process runs at now; a gap since the last tick
// longer than limit was a stall.
func (s *stallClock) tick(now time.Time, limit time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.last.IsZero() && now.Sub(s.last) > limit {
		s.from, s.to = s.last, now
	}
	s.last = now
}

// before returns t, or, when a stall longer than limit is under way at
// now (the watcher has not ticked since) or ended within limit of t, the
// moment it began, if that is earlier: what was read near t may have
// been waiting through the stall.
func (s *stallClock) before(t, now time.Time, limit time.Duration) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.last.IsZero() && now.Sub(s.last) > limit && s.last.Before(t) {
		return s.last
	}
	if !s.from.IsZero() && s.to.After(t.Add(-limit)) && s.from.Before(t) {
		return s.from
	}
	return t
}

// clockedConn is a broker connection's socket that keeps its readClock.
type clockedConn struct {
	net.Conn
	heard *readClock
}

func (c clockedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.heard.at.Store(time.Now().UnixNano())
	}
	return n, err
}
