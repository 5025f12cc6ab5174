package server

import (
	"time"

	"github.com/captchaq/captchaq"
)

// NewLocalBackend is the server's own Backend, for the conformance suite.
func NewLocalBackend(cfg captchaq.Config, submitWait time.Duration) Backend {
	return newLocalBackend(cfg, submitWait)
}
