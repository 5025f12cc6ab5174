package server_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/amqp"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/server"
	"github.com/captchaq/captchaq/server/backendtest"
)

// The server's own queue keeps the Backend contract.
func TestLocalBackend(t *testing.T) {
	t.Parallel()
	backendtest.Run(t, func(t *testing.T, env backendtest.Env) server.Backend {
		pc, err := provider.NewClient(provider.ClientConfig{BaseURL: env.ProviderURL, Key: "local-provider-key"})
		if err != nil {
			t.Fatal(err)
		}
		return server.NewLocalBackend(captchaq.Config{Provider: pc, Store: env.Store, Threads: 4,
			PollInterval: 10 * time.Millisecond, RetryBackoff: 10 * time.Millisecond, RetryBackoffMax: 100 * time.Millisecond,
			Logger: slog.New(slog.DiscardHandler)}, 10*time.Second)
	})
}

// A gateway in front of a fleet on the real broker, with one worker
// solving at the suite's provider, keeps the Backend contract.
func TestGatewayBackend(t *testing.T) {
	t.Parallel()
	backendtest.Run(t, func(t *testing.T, env backendtest.Env) server.Backend {
		f := newFleetAt(t, env.ProviderURL)
		f.worker("conf-w", 4)
		c := f.dial()
		f.mu.Lock()
		f.gateways = append(f.gateways, "conf")
		f.mu.Unlock()
		gw, err := amqp.NewGateway(c, amqp.GatewayConfig{Store: env.Store, Name: "conf", Logger: f.log})
		if err != nil {
			t.Fatal(err)
		}
		// Runs after the suite shuts the gateway down.
		t.Cleanup(func() { c.Close() })
		return gw
	})
}
