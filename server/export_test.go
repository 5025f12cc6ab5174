package server

import (
	"strconv"
	"time"

	"github.com/captchaq/captchaq"
)

// NewLocalBackend is the server's own Backend, for the conformance suite.
func NewLocalBackend(cfg captchaq.Config, submitWait time.Duration) Backend {
	return newLocalBackend(cfg, submitWait)
}

// SetNextID makes id the next clock id the server hands out, as a
// restart whose clock reads earlier than the last run's (with the same
// key) would: id must be one the server handed out.
func SetNextID(s *Server, id string) {
	n, _ := strconv.ParseUint(id, 10, 64)
	c, ok := s.ids.localIDs.counter(n)
	if !ok {
		panic("SetNextID: " + id + " is no id of the server's")
	}
	s.ids.clock.Store(c - 1)
}

// IDCounter is the counter of a shared id: its place in the IDSource's
// blocks.
func IDCounter(s *Server, id uint64) (uint64, bool) {
	s.ids.mu.Lock()
	defer s.ids.mu.Unlock()
	return s.ids.sharedIDs.counter(id)
}
