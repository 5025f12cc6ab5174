package testlock

import "testing"

// Lock is lock, for the tests of the gate, which take the lock as tests of
// other names.
func (s *Server) Lock(t testing.TB, how int) (release func()) { return s.lock(t, how) }
