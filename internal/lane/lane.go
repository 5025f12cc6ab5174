// Package lane is one provider behind a queue: its client, the methods it
// solves and their prices, and the parts that own its changing state,
// each behind a lock of its own:
//
//   - Limiter (internal/limiter): its threads, the slots taken and the
//     AIMD window; Pool shares them with other processes.
//   - Health (health.go): its pause on account errors, its rate-limit
//     hold on submits, its reach (failing since, down, the next probe).
//   - Ledger (ledger.go): its submits in progress, its spend over the last
//     hour, its counts, the run of zero-balance refusals.
//   - Refusals (refusals.go): the route methods its provider refuses.
//
// The Lane itself holds only what its Config fixes, and has no lock. The
// queue reads and changes a part only through its methods, which never
// call out (no provider request, no callback) while its lock is held, and
// take no other part's lock: no two of a lane's locks nest.
//
// A Set is a queue's lanes in order of preference and the routing among
// them: which lanes solve a task, which may take it now (spill-over,
// spend cap, fail-over), the lane of a stored captcha id, the probes due.
// A queue of one provider is a Set of one lane with Config.Name empty: its
// captcha ids are stored bare, its pingback URL carries no provider name,
// and it never leaves routing (there is nowhere else to send). Pauses is
// the queue's side of the lanes' pauses, under a lock of its own taken
// before a lane's Health lock (Pauses.mu, then Health.mu), never after.
package lane

import (
	"cmp"
	"context"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/captchaq/captchaq/internal/limiter"
	"github.com/captchaq/captchaq/provider"
)

// Provider is what a lane sends to: in.php submits and res.php polls. It
// has the methods of captchaq.Provider.
type Provider interface {
	Submit(ctx context.Context, t provider.Task, pingback string) (captchaID string, err error)
	PollMany(ctx context.Context, ids []string) ([]provider.PollResult, error)
}

// Pool shares a lane's threads with other processes on the same key; it
// has the methods of captchaq.ThreadPool.
type Pool interface {
	Want(busy, waiting int)
	Held() int
	Ready() <-chan struct{}
}

// balancer is a Provider that reads the account's balance.
type balancer interface {
	Balance(ctx context.Context) (float64, error)
}

// Config is one lane, with its defaults already filled in by the queue.
// Name through DownAfter are the fields of the queue's ProviderConfig of
// the same names, copied from it in one place (the root's laneConfigs).
type Config struct {
	// Index is the lane's place in the queue's order of preference
	// (NewSet sets it).
	Index int
	// Name names it in results, logs and stored captcha ids; empty for a
	// queue of one Config.Provider.
	Name     string
	Provider Provider
	Threads  int
	Methods  []string
	// PricePer1000 by route method, "default" for the others; empty for
	// a flat-rate plan.
	PricePer1000    map[string]float64
	SpillAfter      time.Duration
	MaxSpendPerHour float64
	DownAfter       time.Duration
	// RefusalHold is how long a method the provider refused stays off
	// the lane before a probe (zero: RefusalHoldDefault; negative: a
	// refusal is a task error like any other, and nothing is held).
	RefusalHold time.Duration
	Pool        Pool // nil: the threads are this process's alone
	// MayGoDown: failing longer than DownAfter takes the lane out of
	// routing. NewSet sets it for a set of several lanes.
	MayGoDown bool
	Logger    *slog.Logger
}

// Stats are a lane's counters and state, for Metrics.
type Stats struct {
	Threads, InUse, Window           int
	Submitted, Solved, Failed, Moved int64
	Spend, SpendLastHour             float64
	Down, Paused                     bool
}

// Lane is one provider: what its Config fixes, and the parts that own
// its changing state. Its methods are safe for concurrent use.
type Lane struct {
	idx        int
	name       string
	prov       Provider
	threads    int
	methods    []string
	price      map[string]float64
	spillAfter time.Duration
	mayGoDown  bool
	log        *slog.Logger
	pool       Pool

	// The parts, set by New and never replaced; each has its own lock.

	// Limiter is the lane's threads: slots taken and the AIMD window.
	Limiter *limiter.Limiter
	// Health is whether and when the lane may be sent to.
	Health *Health
	// Ledger is the lane's submits and what they cost.
	Ledger *Ledger
	// Refusals are the route methods its provider refuses.
	Refusals *Refusals
}

// New builds a lane from c.
func New(c Config) *Lane {
	return &Lane{
		idx: c.Index, name: c.Name, prov: c.Provider, threads: c.Threads, methods: c.Methods,
		price: c.PricePer1000, spillAfter: c.SpillAfter, mayGoDown: c.MayGoDown, log: c.Logger,
		pool: c.Pool, Limiter: limiter.New(c.Threads),
		Health: &Health{name: c.Name, mayGoDown: c.MayGoDown, downAfter: c.DownAfter, log: c.Logger},
		Ledger: &Ledger{maxSpendPerHour: c.MaxSpendPerHour},
		Refusals: &Refusals{name: c.Name, hold: cmp.Or(c.RefusalHold, RefusalHoldDefault),
			several: c.MayGoDown, log: c.Logger},
	}
}

// Index is the lane's place in the order of preference.
func (l *Lane) Index() int { return l.idx }

// Name is the provider's name; empty for a queue of one Config.Provider.
func (l *Lane) Name() string { return l.name }

// Provider is the lane's client.
func (l *Lane) Provider() Provider { return l.prov }

// Threads is the lane's thread count.
func (l *Lane) Threads() int { return l.threads }

// Pool is the lane's thread pool, or nil.
func (l *Lane) Pool() Pool { return l.pool }

// MayGoDown reports whether the lane leaves routing when it fails (or is
// paused for good): its queue has other lanes to send its tasks to.
func (l *Lane) MayGoDown() bool { return l.mayGoDown }

// SpillAfter is how long a task an earlier lane solves waits before this
// one takes it.
func (l *Lane) SpillAfter() time.Duration { return l.spillAfter }

// checkedSubmitter is a Provider that sends a task checked at the door
// without validating it again (provider.Client).
type checkedSubmitter interface {
	SubmitChecked(ctx context.Context, t provider.Checked, pingback string) (string, error)
}

// Submit sends a task checked at the door to the lane's provider: as it
// is to one that takes checked tasks, else as a plain provider.Task.
func (l *Lane) Submit(ctx context.Context, t provider.Checked, pingback string) (string, error) {
	if cs, ok := l.prov.(checkedSubmitter); ok {
		return cs.SubmitChecked(ctx, t, pingback)
	}
	return l.prov.Submit(ctx, t.Task, pingback)
}

// StoredID is a captcha id as the Store keeps it: "name:id" for a named
// provider, so a restart polls the right one; the bare id for a queue of
// one Config.Provider.
func (l *Lane) StoredID(captchaID string) string {
	if l.name == "" {
		return captchaID
	}
	return l.name + ":" + captchaID
}

// PingbackURL is the pingback URL the lane's submits carry: base with
// provider=NAME in its query for a named provider, so a pingback names
// its provider (two may give out the same captcha id), and sig=SIG, the
// provider's own secret, when sig is not empty.
func (l *Lane) PingbackURL(base, sig string) string {
	if base == "" {
		return base
	}
	var q []string
	if l.name != "" {
		q = append(q, "provider="+url.QueryEscape(l.name))
	}
	if sig != "" {
		q = append(q, "sig="+url.QueryEscape(sig))
	}
	if len(q) == 0 {
		return base
	}
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	return base + sep + strings.Join(q, "&")
}

// Solves reports whether the lane solves a route method.
func (l *Lane) Solves(method string) bool { return slices.Contains(l.methods, method) }

// PriceOf is what one solve of a task of this route method costs here (0
// on a flat-rate plan).
func (l *Lane) PriceOf(routeMethod string) float64 {
	if len(l.price) == 0 {
		return 0
	}
	p, ok := l.price[routeMethod]
	if !ok {
		p = l.price["default"]
	}
	return p / 1000
}

// Priced reports whether solves here cost anything.
func (l *Lane) Priced() bool { return len(l.price) > 0 }

// AccountState is what a check of the account (getbalance) found.
type AccountState int

// The account states CheckAccount tells apart.
const (
	AccountUnknown AccountState = iota // no Balance method, or no answer
	AccountFine
	AccountRefused
)

// accountCheckTimeout bounds a getbalance that confirms an account error,
// and a probe's request.
const accountCheckTimeout = 30 * time.Second

// CheckAccount asks the provider for the balance with the configured key,
// within accountCheckTimeout: an answer means the account works (and says
// its funds); an account-class error means it does not; anything else (no
// Balance method, network) cannot tell.
func (l *Lane) CheckAccount(ctx context.Context) (AccountState, float64) {
	b, ok := l.prov.(balancer)
	if !ok {
		return AccountUnknown, 0
	}
	ctx, cancel := context.WithTimeout(ctx, accountCheckTimeout)
	defer cancel()
	funds, err := b.Balance(ctx)
	switch {
	case err == nil:
		return AccountFine, funds
	case provider.ClassOf(err) == provider.ClassAccount:
		return AccountRefused, 0
	default:
		l.log.Warn("account check failed; pausing as if the error were confirmed", "err", err)
		return AccountUnknown, 0
	}
}

// Probe asks the provider whether a lane that is down (or paused for
// good) may come back: its balance, with funds for a priced lane; a
// provider with no Balance, for an id, where any answer in the protocol
// will do. Each request is bounded by accountCheckTimeout. The caller
// ends the probe with ProbeDone(up).
func (l *Lane) Probe(ctx context.Context) (up bool) {
	if _, ok := l.prov.(balancer); ok {
		state, funds := l.CheckAccount(ctx)
		return state == AccountFine && (!l.Priced() || funds > 0)
	}
	ctx, cancel := context.WithTimeout(ctx, accountCheckTimeout)
	defer cancel()
	_, err := l.prov.PollMany(ctx, []string{"0"})
	return err == nil
}

// Stats returns the lane's counters and state at now, read from each
// part in turn.
func (l *Lane) Stats(now time.Time) Stats {
	c, lastHour := l.Ledger.totals(now)
	down, paused := l.Health.state(now)
	return Stats{
		Threads: l.Limiter.Max(), InUse: l.Limiter.InUse(), Window: l.Limiter.Window(),
		Submitted: c.submitted, Solved: c.solved, Failed: c.failed, Moved: c.moved,
		Spend: c.spend, SpendLastHour: lastHour,
		Down: down, Paused: paused,
	}
}

// MaxSpendPerHour is the lane's hourly bound (0: none).
func (l *Lane) MaxSpendPerHour() float64 { return l.Ledger.maxSpendPerHour }
