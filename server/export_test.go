package server

import (
	"time"

	"github.com/captchaq/captchaq"
)

// NewLocalBackend is the server's own Backend, for the conformance suite.
func NewLocalBackend(cfg captchaq.Config, submitWait time.Duration) Backend {
	return newLocalBackend(cfg, submitWait)
}

// SetLastID sets the last numeric id handed out, as a server does at New
// from its clock: a restart whose clock reads earlier than the last run's
// starts below the ids that run handed out.
func SetLastID(s *Server, n uint64) { s.ids.Store(n) }
