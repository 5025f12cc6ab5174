// Package lane is one provider behind a queue: its client, the methods it
// solves and their prices, its threads (an internal/limiter with its own
// AIMD window, and the pool that shares them with other processes), its
// pause on account errors, its rate-limit hold on submits, its health
// (failing since, down, the next probe), its spend over the last hour and
// the route methods its provider refuses (refusals.go).
//
// A Lane owns that state behind its own lock; the queue reads and changes
// it only through its methods, which never call out (no provider request,
// no callback) while the lock is held.
//
// A Set is a queue's lanes in order of preference and the routing among
// them: which lanes solve a task, which may take it now (spill-over,
// spend cap, fail-over), the lane of a stored captcha id, the probes due.
// A queue of one provider is a Set of one lane with Config.Name empty: its
// captcha ids are stored bare, its pingback URL carries no provider name,
// and it never leaves routing (there is nowhere else to send). Pauses is
// the queue's side of the lanes' pauses.
package lane

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
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

// SpendWindow is the window MaxSpendPerHour bounds.
const SpendWindow = time.Hour

// Pause is why sending to a lane is paused: an account error.
type Pause struct {
	Code string // the provider's code, e.g. ERROR_WRONG_USER_KEY
	// Until is when sending resumes by itself; zero: not until Resume
	// (or a probe that answers).
	Until time.Time
	Err   error
}

// Stats are a lane's counters and state, for Metrics.
type Stats struct {
	Threads, InUse, Window           int
	Submitted, Solved, Failed, Moved int64
	Spend, SpendLastHour             float64
	Down, Paused                     bool
}

// Lane is one provider. Its methods are safe for concurrent use.
type Lane struct {
	idx             int
	name            string
	prov            Provider
	threads         int
	methods         []string
	price           map[string]float64
	spillAfter      time.Duration
	maxSpendPerHour float64
	downAfter       time.Duration
	mayGoDown       bool
	refusalHold     time.Duration
	log             *slog.Logger

	// Limiter is the lane's threads: slots taken and the AIMD window. It
	// has its own lock.
	Limiter *limiter.Limiter
	pool    Pool

	mu                sync.Mutex
	pause             *Pause
	submitsHeldUntil  time.Time          // no submits before (rate limited)
	zeroBalanceStreak int                // ERROR_ZERO_BALANCE refusals in a row with nothing in flight here
	submits           int                // submit requests in progress
	known             map[string]*method // route methods' answers (refusals.go)
	// failingSince is the first network error or 5xx since the lane last
	// answered; zero while it answers. failures counts them, lastFailure
	// is the last one's text (the provider's redacted error: no key);
	// answered is whether the lane ever answered.
	failingSince time.Time
	failures     int
	lastFailure  string
	answered     bool
	// down: failing longer than downAfter; out of routing until a probe
	// answers.
	down      bool
	probing   bool
	nextProbe time.Time
	// reserved are the prices of submits accepted in the last hour, and
	// launching those of submits in progress, for MaxSpendPerHour.
	reserved  []spendEntry
	launching float64
	stats     struct {
		submitted, solved, failed, moved int64
		spend                            float64
	}
}

type spendEntry struct {
	at    time.Time
	price float64
}

// New builds a lane from c.
func New(c Config) *Lane {
	return &Lane{
		idx: c.Index, name: c.Name, prov: c.Provider, threads: c.Threads, methods: c.Methods,
		price: c.PricePer1000, spillAfter: c.SpillAfter, maxSpendPerHour: c.MaxSpendPerHour,
		downAfter: c.DownAfter, mayGoDown: c.MayGoDown, log: c.Logger,
		refusalHold: cmp.Or(c.RefusalHold, RefusalHoldDefault),
		Limiter:     limiter.New(c.Threads), pool: c.Pool,
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

// Paused returns the pause in force at now, lifting an expired one.
func (l *Lane) Paused(now time.Time) *Pause {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pausedLocked(now)
}

func (l *Lane) pausedLocked(now time.Time) *Pause {
	if l.pause != nil && !l.pause.Until.IsZero() && !now.Before(l.pause.Until) {
		l.log.Info("sending resumed", "provider", l.name, "after", l.pause.Code)
		l.pause = nil
	}
	return l.pause
}

// SetPause pauses sending to the lane; first is true when it was not
// paused.
func (l *Lane) SetPause(p *Pause) (first bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	first = l.pause == nil
	l.pause = p
	return first
}

// Resume lifts the pause; was is true when there was one.
func (l *Lane) Resume() (was bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	was = l.pause != nil
	l.pause = nil
	return was
}

// Routable reports whether new submits may go to the lane at now: not
// down, not paused.
func (l *Lane) Routable(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.down && l.pausedLocked(now) == nil
}

// Down reports whether the lane is out of routing for failing.
func (l *Lane) Down() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.down
}

// SendHold is why submits may not go to the lane at now: blocked (down,
// or paused), or held until a time (a pause that lifts then, or a
// rate-limit hold). Zero and false: submits may go.
func (l *Lane) SendHold(now time.Time) (until time.Time, blocked bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch p := l.pausedLocked(now); {
	case p != nil:
		return p.Until, true
	case l.down:
		return time.Time{}, true
	case now.Before(l.submitsHeldUntil):
		return l.submitsHeldUntil, true
	}
	return time.Time{}, false
}

// HoldSubmits holds submits until `until` (a rate limit).
func (l *Lane) HoldSubmits(until time.Time) {
	l.mu.Lock()
	l.submitsHeldUntil = until
	l.mu.Unlock()
}

// spentLocked is what the lane reserved in the hour before now.
func (l *Lane) spentLocked(now time.Time) float64 {
	cut := now.Add(-SpendWindow)
	i := 0
	for i < len(l.reserved) && !l.reserved[i].at.After(cut) {
		i++
	}
	l.reserved = l.reserved[i:]
	var s float64
	for _, e := range l.reserved {
		s += e.price
	}
	return s
}

// Affords reports whether a solve at price fits under MaxSpendPerHour at
// now, with the submits in progress; when it does not, retry is when the
// oldest reserved solve leaves the hour (zero: not by waiting).
func (l *Lane) Affords(now time.Time, price float64) (ok bool, retry time.Time) {
	if l.maxSpendPerHour <= 0 {
		return true, time.Time{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.spentLocked(now)+l.launching+price <= l.maxSpendPerHour+1e-9 {
		return true, time.Time{}
	}
	if len(l.reserved) > 0 {
		return false, l.reserved[0].at.Add(SpendWindow)
	}
	return false, time.Time{}
}

// Submits is how many submits are in progress.
func (l *Lane) Submits() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.submits
}

// StartSubmit counts a submit in progress at price.
func (l *Lane) StartSubmit(price float64) {
	l.mu.Lock()
	l.submits++
	l.launching += price
	l.mu.Unlock()
}

// EndSubmit ends a submit StartSubmit counted.
func (l *Lane) EndSubmit(price float64) {
	l.mu.Lock()
	l.submits--
	l.launching -= price
	l.mu.Unlock()
}

// Accepted counts a submit the provider accepted at now, with its price
// against the hourly bound, and ends any run of zero-balance refusals.
func (l *Lane) Accepted(now time.Time, price float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stats.submitted++
	l.zeroBalanceStreak = 0
	if price > 0 {
		l.reserved = append(l.reserved, spendEntry{at: now, price: price})
	}
}

// Finished counts a task's final result whose last attempt was here.
func (l *Lane) Finished(solved bool, price float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if solved {
		l.stats.solved++
		l.stats.spend += price
	} else {
		l.stats.failed++
	}
}

// Moved counts tasks in flight here submitted elsewhere, and the spend of
// their abandoned solves.
func (l *Lane) Moved(n int, spend float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stats.moved += int64(n)
	l.stats.spend += spend
}

// ZeroBalanceStreak is how many ERROR_ZERO_BALANCE refusals in a row,
// with nothing in flight here, pause the lane.
const ZeroBalanceStreak = 10

// ZeroBalance counts a refusal with code while inflight tasks are in
// flight here, and reports whether the run of zero-balance refusals is
// long enough to pause.
func (l *Lane) ZeroBalance(code string, inflight int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if code != provider.ErrZeroBalance.Code || inflight > 0 {
		l.zeroBalanceStreak = 0
		return false
	}
	l.zeroBalanceStreak++
	if l.zeroBalanceStreak < ZeroBalanceStreak {
		return false
	}
	l.zeroBalanceStreak = 0
	return true
}

// Answered records that the lane answered a request (any protocol answer,
// even an error code): it is up. recovered says it was failing until now.
func (l *Lane) Answered() (recovered bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	recovered = l.failures > 0
	l.failingSince, l.failures, l.lastFailure, l.answered = time.Time{}, 0, "", true
	return recovered
}

// Reach is what the lane knows of reaching its provider: since when and
// how often it failed in a row (zero while it answers), the last
// failure's text, and whether it ever answered.
type Reach struct {
	FailingSince time.Time
	Failures     int
	LastFailure  string
	EverAnswered bool
}

// Reach reports the lane's Reach now.
func (l *Lane) Reach() Reach {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Reach{FailingSince: l.failingSince, Failures: l.failures, LastFailure: l.lastFailure, EverAnswered: l.answered}
}

// TransportFailed records a network error or 5xx (err) at now and
// reports whether the lane has now failed for longer than its DownAfter
// (down), and whether it went down with this failure (wentDown). Only a
// lane that MayGoDown goes down.
func (l *Lane) TransportFailed(now time.Time, err error) (down, wentDown bool) {
	l.mu.Lock()
	if l.failingSince.IsZero() {
		l.failingSince = now
	}
	l.failures++
	l.lastFailure = err.Error()
	since := l.failingSince
	down = l.mayGoDown && now.Sub(since) > l.downAfter
	wentDown = down && !l.down
	if wentDown {
		l.down = true
		l.nextProbe = now.Add(l.downAfter)
	}
	l.mu.Unlock()
	if wentDown {
		l.log.Error("provider down: out of routing until a probe answers; its queued tasks go to the others", "provider", l.name, "failing_for", now.Sub(since))
	}
	return down, wentDown
}

// TransportFailure reports whether err says the provider did not answer
// in its protocol: a network error, a 5xx page, a body that is no answer.
func TransportFailure(err error) bool {
	return errors.Is(err, provider.ErrNetwork) || errors.Is(err, provider.ErrHTTP5xx) || errors.Is(err, provider.ErrBadAnswer)
}

// ProbeDue says whether a probe of the lane should start at now (the lane
// is down, or paused for good, in a queue where it may go down, and its
// next probe is due); when not, next is when it will be (zero: none). A
// true answer marks the probe started: call ProbeDone with its outcome.
func (l *Lane) ProbeDue(now time.Time) (start bool, next time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.mayGoDown || !l.down && (l.pause == nil || !l.pause.Until.IsZero()) {
		return false, time.Time{}
	}
	if l.nextProbe.IsZero() {
		l.nextProbe = now.Add(l.downAfter)
	}
	if l.probing {
		return false, time.Time{}
	}
	if !now.Before(l.nextProbe) {
		l.probing = true
		return true, time.Time{}
	}
	return false, l.nextProbe
}

// ProbeDone ends a probe: up brings the lane back in routing (not down,
// not paused); otherwise the next probe is due DownAfter after now.
func (l *Lane) ProbeDone(up bool, now time.Time) {
	l.mu.Lock()
	l.probing = false
	if up {
		l.down, l.pause, l.failingSince, l.nextProbe = false, nil, time.Time{}, time.Time{}
		l.failures, l.lastFailure, l.answered = 0, "", true
	} else {
		l.nextProbe = now.Add(l.downAfter)
	}
	l.mu.Unlock()
	if up {
		l.log.Info("provider back in routing: a probe answered", "provider", l.name)
	}
}

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

// Stats returns the lane's counters and state at now.
func (l *Lane) Stats(now time.Time) Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{
		Threads: l.Limiter.Max(), InUse: l.Limiter.InUse(), Window: l.Limiter.Window(),
		Submitted: l.stats.submitted, Solved: l.stats.solved, Failed: l.stats.failed, Moved: l.stats.moved,
		Spend: l.stats.spend, SpendLastHour: l.spentLocked(now),
		Down: l.down, Paused: l.pausedLocked(now) != nil,
	}
}

// MaxSpendPerHour is the lane's hourly bound (0: none).
func (l *Lane) MaxSpendPerHour() float64 { return l.maxSpendPerHour }
