// Package simrig builds the stack the tests of several packages run on: a
// simulator, on loopback or in-process, the provider client on it (in.php
// or createTask) and a captchaq.Queue from a Config, each closed with the
// test. Each package keeps its own defaults and helpers on top. Only
// _test.go files import it (internal/layers checks that).
package simrig

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/provider/createtask"
	"github.com/captchaq/captchaq/sim"
)

// KeyDefault is the provider key the client sends when Options.Key is "".
const KeyDefault = "test-key"

// Options says how to reach the simulator.
type Options struct {
	// Sim is the simulator's Config, used as given.
	Sim sim.Config
	// InProcess serves the client's requests by the simulator's handler
	// in the calling goroutine, with no socket (sim.New and
	// InProcessClient): inside a synctest bubble the clock is fake.
	InProcess bool
	// CreateTask reaches the simulator by createTask and getTaskResult
	// instead of in.php and res.php.
	CreateTask bool
	// Key is the provider key; KeyDefault when "".
	Key string
	// Methods is the client's ClientConfig.Methods.
	Methods []string
	// Timeout, when set, bounds each request: on loopback the client then
	// has a transport of its own, its idle connections closed after the
	// simulator. Zero: the provider client's default HTTP client, or the
	// in-process one with no timeout.
	Timeout time.Duration
}

// Rig is a simulator and the provider client on it.
type Rig struct {
	Sim  *sim.Server
	Base string // the simulator's base URL
	// HTTP is the client's HTTP client; nil for the provider's default.
	HTTP *http.Client
	// Client is the in.php client; nil with Options.CreateTask.
	Client *provider.Client
	// CreateTask is the createTask client; nil without Options.CreateTask.
	CreateTask *createtask.Client
	// Provider is whichever client the options chose.
	Provider captchaq.Provider
	// Balance is that client's account balance.
	Balance func(context.Context) (float64, error)
	// Store is the memory store Queue made when its Config had none.
	Store *captchaq.MemoryStore
}

// Start starts a simulator as o says and builds the client on it; the
// simulator closes when the test ends.
func Start(t testing.TB, o Options) *Rig {
	t.Helper()
	if o.InProcess {
		srv, err := sim.New(o.Sim)
		if err != nil {
			t.Fatal(err)
		}
		hc := srv.InProcessClient()
		hc.Timeout = o.Timeout
		return On(t, srv, sim.InProcessBaseURL, hc, o)
	}
	srv, base, err := sim.Start(o.Sim, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var hc *http.Client
	if o.Timeout > 0 {
		tr := &http.Transport{}
		t.Cleanup(tr.CloseIdleConnections) // runs after the simulator closes
		hc = &http.Client{Transport: tr, Timeout: o.Timeout}
	}
	return On(t, srv, base, hc, o)
}

// On builds the client on srv, reached at base with hc (nil: the
// provider's default); srv closes when the test ends. o.Sim, o.InProcess
// and o.Timeout are not used.
func On(t testing.TB, srv *sim.Server, base string, hc *http.Client, o Options) *Rig {
	t.Helper()
	t.Cleanup(func() { srv.Close() })
	if o.Key == "" {
		o.Key = KeyDefault
	}
	cc := provider.ClientConfig{BaseURL: base, Key: o.Key, HTTPClient: hc, Methods: o.Methods}
	r := &Rig{Sim: srv, Base: base, HTTP: hc}
	if o.CreateTask {
		c, err := createtask.NewClient(cc)
		if err != nil {
			t.Fatal(err)
		}
		r.CreateTask, r.Provider, r.Balance = c, c, c.Balance
		return r
	}
	c, err := provider.NewClient(cc)
	if err != nil {
		t.Fatal(err)
	}
	r.Client, r.Provider, r.Balance = c, c, c.Balance
	return r
}

// Queue is NewQueue with the rig's client as cfg.Provider when it has
// none, and a memory store, kept in r.Store, when cfg.Store is nil.
func (r *Rig) Queue(t testing.TB, cfg captchaq.Config, fleet ...captchaq.Fleet) *captchaq.Queue {
	t.Helper()
	if cfg.Provider == nil {
		cfg.Provider = r.Provider
	}
	if cfg.Store == nil {
		r.Store = captchaq.NewMemoryStore(captchaq.MemoryStoreConfig{})
		cfg.Store = r.Store
	}
	return NewQueue(t, cfg, fleet...)
}

// NewQueue builds a queue (not started) from cfg, in the fleet when one
// is given (captchaq.NewFleetQueue), logging at debug level to stderr
// under go test -v when cfg.Logger is nil. The queue closes when the test
// ends, before a simulator started earlier.
func NewQueue(t testing.TB, cfg captchaq.Config, fleet ...captchaq.Fleet) *captchaq.Queue {
	t.Helper()
	if cfg.Logger == nil && testing.Verbose() {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	q, err := New(cfg, fleet...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

// New is captchaq.New, or captchaq.NewFleetQueue in the fleet given.
func New(cfg captchaq.Config, fleet ...captchaq.Fleet) (*captchaq.Queue, error) {
	if len(fleet) > 0 {
		return captchaq.NewFleetQueue(cfg, fleet[0])
	}
	return captchaq.New(cfg)
}

// Run starts q, bounded by testbound.Context.
func Run(t testing.TB, q *captchaq.Queue) {
	t.Helper()
	if err := q.Start(testbound.Context(t)); err != nil {
		t.Fatal(err)
	}
}
