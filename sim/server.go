package sim

import (
	"context"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/captchaq/captchaq/internal/apiform"
	"github.com/captchaq/captchaq/internal/startstop"
)

// Account is the simulated account's state, switchable at run time.
type Account struct {
	// BadKey answers ERROR_WRONG_USER_KEY to every call.
	BadKey bool `json:"bad_key"`
	// ZeroBalance answers ERROR_ZERO_BALANCE to submits and 0 to getbalance.
	ZeroBalance bool `json:"zero_balance"`
	// IPBanned answers IP_BANNED to every call from every client.
	IPBanned bool `json:"ip_banned"`
}

// Server is a simulated provider. It is an http.Handler serving in.php,
// res.php and the /sim/ admin API. Create it with New or Start; Close it.
//
// It is a composition of parts, each owning its state: mu guards the
// parts from dice to journal (they have no lock of their own, and call
// each other with mu held); the token book and the pingback sender lock
// themselves.
type Server struct {
	cfg Config

	mu      sync.Mutex
	dice    dice       // the random stream
	table   taskTable  // the tasks, their events and the threads they hold
	gate    gate       // the account, the poll bans and what a submit must pass
	st      statsState // the counters behind Stats
	journal *journal   // Config.StateFile, while open

	tokens    *tokenBook // the tokens issued, for the demo site and siteverify
	sites     sites      // the demo site and siteverify, which check them
	pingbacks *pingbackSender
	httpSrv   *http.Server
	closeErr  error

	timer     *startstop.Loop // runTimer, from New until Close
	done      chan struct{}   // closed at Close: slow answers end at once
	closeOnce sync.Once
	wg        sync.WaitGroup
}

// New returns a running simulator (its timer loop and pingback sender are
// started) that serves requests through ServeHTTP. Close it when done.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, tokens: &tokenBook{life: cfg.Siteverify}, done: make(chan struct{})}
	s.dice = dice{rng: rand.New(rand.NewPCG(cfg.Seed, 0x5157_0001)), cfg: &s.cfg}
	s.table = newTaskTable(&s.cfg, &s.st, 70_000_000_000+s.dice.rng.Uint64N(9_000_000_000))
	s.gate = gate{cfg: &s.cfg, st: &s.st, bans: make(map[string]time.Time)}
	s.sites = sites{tokens: s.tokens, due: s.catchUp}
	s.st.reset(cfg.Seed, cfg.ResultTTL)
	if cfg.StateFile != "" {
		now := cfg.Now()
		kept, j, err := openJournal(cfg.StateFile, now, cfg.ResultTTL)
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		for _, e := range kept {
			s.table.restore(e, now)
		}
		s.journal = j
		s.mu.Unlock()
	}
	s.pingbacks = newPingbackSender(pingbackParams{
		parallel: cfg.Pingback.Parallel,
		timeout:  cfg.Pingback.Timeout,
		started:  s.pingbackStarted,
		finished: s.pingbackFinished,
	})
	s.timer = startstop.New(s.runTimer)
	_ = s.timer.Start(context.Background())
	s.pingbacks.start(&s.wg)
	return s, nil
}

// Start creates a simulator and serves it on addr ("127.0.0.1:0" picks a
// free port). It returns the base URL, such as "http://127.0.0.1:8085",
// under which in.php and res.php live.
func Start(cfg Config, addr string) (*Server, string, error) {
	s, err := New(cfg)
	if err != nil {
		return nil, "", err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		s.Close()
		return nil, "", err
	}
	s.httpSrv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second, TLSConfig: cfg.TLS}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		// Both return ErrServerClosed on Close.
		if cfg.TLS != nil {
			_ = s.httpSrv.ServeTLS(l, "", "")
			return
		}
		_ = s.httpSrv.Serve(l)
	}()
	if cfg.TLS != nil {
		return s, "https://" + l.Addr().String(), nil
	}
	return s, "http://" + l.Addr().String(), nil
}

// Close stops the simulator: the listener opened by Start is closed and its
// connections with it, the timer loop stops, pending pingbacks are dropped
// and one in flight is cancelled, slow answers being delayed end at once.
// Close waits for all of that and then returns; it is safe to call twice.
// After Close, ServeHTTP still answers requests from the state as it was,
// but no task is solved any more. Its error is the first failed write of
// Config.StateFile, if any.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		close(s.done)
		s.timer.Stop()
		if s.httpSrv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			if err := s.httpSrv.Shutdown(ctx); err != nil {
				_ = s.httpSrv.Close()
			}
			cancel()
		}
		s.pingbacks.shutdown()
		s.wg.Wait()
		s.pingbacks.client.CloseIdleConnections()
		s.mu.Lock()
		j := s.journal
		s.journal = nil
		s.mu.Unlock()
		s.closeErr = j.close()
	})
	return s.closeErr
}

// Config returns the configuration in effect, defaults filled in.
func (s *Server) Config() Config { return s.cfg }

// Account returns the account's state.
func (s *Server) Account() Account {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gate.account
}

// SetAccount switches the account's state.
func (s *Server) SetAccount(a Account) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gate.account = a
}

// Withdraw makes the service refuse methods (RouteMethod names) from now
// on, with Config.Refusal, as a service withdraws a type it solved;
// Withdraw() takes every one of Config.Methods again.
func (s *Server) Withdraw(methods ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gate.withdrawn = slices.Clone(methods)
}

// Unban lifts every poll ban.
func (s *Server) Unban() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.gate.bans)
}

// ServeHTTP serves /in.php, /res.php (under any path prefix), the
// createTask protocol's methods at the root (/createTask, /getTaskResult,
// /getBalance and the report methods), /sim/…, the demo site under
// /demo/ and the siteverify endpoints.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case strings.HasPrefix(r.URL.Path, "/sim/"):
		s.serveAdmin(w, r)
	case (strings.HasSuffix(r.URL.Path, "/in.php") || strings.HasSuffix(r.URL.Path, "/res.php")) && apiform.Preflight(w, r):
	case strings.HasSuffix(r.URL.Path, "/in.php"):
		s.serveSubmit(w, r)
	case strings.HasSuffix(r.URL.Path, "/res.php"):
		s.serveResult(w, r)
	case createTaskMethods[r.URL.Path]:
		s.serveCreateTask(w, r)
	case r.URL.Path == "/turnstile/v0/siteverify":
		s.sites.serveSiteverify(w, r, familyTurnstile)
	case r.URL.Path == "/recaptcha/api/siteverify":
		s.sites.serveSiteverify(w, r, familyRecaptcha)
	case r.URL.Path == "/captchafox/siteverify":
		s.sites.serveSiteverify(w, r, familyCaptchaFox)
	case r.URL.Path == "/friendlycaptcha/api/v1/siteverify":
		s.sites.serveSiteverify(w, r, familyFriendly)
	case r.URL.Path == "/" || r.URL.Path == "/demo" || strings.HasPrefix(r.URL.Path, "/demo/"):
		s.sites.serveDemo(w, r)
	default:
		s.mu.Lock()
		s.st.calls.Other++
		s.mu.Unlock()
		http.NotFound(w, r)
	}
}

// catchUp solves what is due and returns the time it did so at.
func (s *Server) catchUp() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.Now()
	s.runDueLocked(now)
	return now
}

// clientIP is the address a ban applies to.
func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
