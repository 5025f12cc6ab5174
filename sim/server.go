package sim

import (
	"context"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/captchaq/captchaq/internal/apiform"
	"github.com/captchaq/captchaq/internal/startstop"
	"github.com/captchaq/captchaq/provider"
)

// taskState is where a task is in its life.
type taskState uint8

const (
	statePending    taskState = iota // holds a thread, not solved yet
	stateSolved                      // has an answer
	stateUnsolvable                  // answered ERROR_CAPTCHA_UNSOLVABLE
)

// task is one accepted submit. Its answer is not stored: it is derived from
// the seed and the id whenever it is needed, which keeps memory small.
type task struct {
	id         uint64
	kind       provider.Kind
	state      taskState
	unsolvable bool // decided at submit, shown at solve time
	acceptedAt time.Time
	doneAt     time.Time
	forgetAt   time.Time
	delivered  bool // the final answer reached the client (poll or pingback)
	fetched    bool // the final answer reached a poll
	reported   bool // a report on it was taken
	pingback   string
	pbJSON     bool // pingback is a createTask callbackUrl
	hint       answerHint
	salt       uint64 // seeds its answer with id: from Config.Seed and what is solved (saltFor)

	pollWindow time.Time // start of the current poll-ban window
	pollCount  int
	polls      int64     // all its polls (Stats.MaxPollsPerTask)
	resultAt   time.Time // last getTaskResult answered for it (Config.TaskResultGap)
}

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
type Server struct {
	cfg Config

	mu      sync.Mutex
	rng     *rand.Rand
	nextID  uint64
	tasks   map[uint64]*task
	events  eventHeap
	inUse   int
	account Account
	// withdrawn are methods of Config.Methods refused now (Withdraw).
	withdrawn []string
	bans      map[string]time.Time // client IP → end of its poll ban
	st        statsState
	tokens    tokenBook

	pingbacks *pingbackSender
	httpSrv   *http.Server
	journal   *journal // Config.StateFile, while open
	closeErr  error

	timer     *startstop.Loop // runTimer, from New until Close
	wake      chan struct{}
	done      chan struct{} // closed at Close: slow answers end at once
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
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5157_0001))
	s := &Server{
		cfg:    cfg,
		rng:    rng,
		nextID: 70_000_000_000 + rng.Uint64N(9_000_000_000),
		tasks:  make(map[uint64]*task),
		bans:   make(map[string]time.Time),
		wake:   make(chan struct{}, 1),
		done:   make(chan struct{}),
	}
	s.st.reset(cfg.Seed, cfg.ResultTTL)
	if cfg.StateFile != "" {
		s.mu.Lock()
		err := s.openJournalLocked(cfg.StateFile)
		s.mu.Unlock()
		if err != nil {
			return nil, err
		}
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
		s.closeErr = s.closeJournal()
	})
	return s.closeErr
}

// Config returns the configuration in effect, defaults filled in.
func (s *Server) Config() Config { return s.cfg }

// Account returns the account's state.
func (s *Server) Account() Account {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.account
}

// SetAccount switches the account's state.
func (s *Server) SetAccount(a Account) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.account = a
}

// Withdraw makes the service refuse methods (RouteMethod names) from now
// on, with Config.Refusal, as a service withdraws a type it solved;
// Withdraw() takes every one of Config.Methods again.
func (s *Server) Withdraw(methods ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.withdrawn = slices.Clone(methods)
}

// Unban lifts every poll ban.
func (s *Server) Unban() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.bans)
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
		s.serveSiteverify(w, r, familyTurnstile)
	case r.URL.Path == "/recaptcha/api/siteverify":
		s.serveSiteverify(w, r, familyRecaptcha)
	case r.URL.Path == "/captchafox/siteverify":
		s.serveSiteverify(w, r, familyCaptchaFox)
	case r.URL.Path == "/friendlycaptcha/api/v1/siteverify":
		s.serveSiteverify(w, r, familyFriendly)
	case r.URL.Path == "/" || r.URL.Path == "/demo" || strings.HasPrefix(r.URL.Path, "/demo/"):
		s.serveDemo(w, r)
	default:
		s.mu.Lock()
		s.st.calls.Other++
		s.mu.Unlock()
		http.NotFound(w, r)
	}
}

// clientIP is the address a ban applies to.
func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// fault is a transport failure chosen for one call.
type fault uint8

const (
	faultNone fault = iota
	faultDrop
	fault5xx
	faultSlow
)

// drawFaultLocked picks this call's fault, if any.
func (s *Server) drawFaultLocked() fault {
	f := s.cfg.Faults
	if f.DropRate == 0 && f.HTTP5xxRate == 0 && f.SlowRate == 0 {
		return faultNone
	}
	x := s.rng.Float64()
	switch {
	case x < f.DropRate:
		s.st.faultsDropped++
		return faultDrop
	case x < f.DropRate+f.HTTP5xxRate:
		s.st.faults5xx++
		return fault5xx
	case x < f.DropRate+f.HTTP5xxRate+f.SlowRate:
		s.st.faultsSlow++
		return faultSlow
	}
	return faultNone
}

// applyFault carries out a fault. It reports whether the call must still be
// answered normally.
func (s *Server) applyFault(w http.ResponseWriter, r *http.Request, f fault, status int) bool {
	switch f {
	case faultDrop:
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return false
			}
		}
		panic(http.ErrAbortHandler) // net/http closes the connection quietly
	case fault5xx:
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(status)
		text := http.StatusText(status)
		_, _ = w.Write([]byte("<html>\r\n<head><title>" + strconv.Itoa(status) + " " + text + "</title></head>\r\n<body>\r\n<center><h1>" +
			strconv.Itoa(status) + " " + text + "</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"))
		return false
	case faultSlow:
		t := time.NewTimer(s.cfg.Faults.SlowDelay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return false
		case <-s.done:
		}
	}
	return true
}
