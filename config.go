package captchaq

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/captchaq/captchaq/provider"
)

// Config defaults.
const (
	ThreadsDefault         = 5
	PollIntervalDefault    = time.Second
	PollIntervalMin        = 10 * time.Millisecond
	PollGapDefault         = 500 * time.Millisecond
	PollGapMin             = time.Millisecond // for simulators scaled down
	MaxAttemptsDefault     = 3
	RetryBackoffDefault    = time.Second
	RetryBackoffMaxDefault = time.Minute
	AgingIntervalDefault   = time.Minute
	MaxQueuedMin           = 1000 // MaxQueued's default is max(MaxQueuedMin, 20×threads)
)

// Config configures a Queue. Only Provider (or Providers) is required.
type Config struct {
	// Provider solves the tasks. Required unless Providers is set.
	Provider Provider
	// Providers, instead of Provider, Threads and Plan, puts several
	// providers behind the queue, the first preferred: each task goes to
	// the first that solves its type and has a free thread, spills over
	// to a later one after its SpillAfter, and moves on when one is down
	// (see ProviderConfig and the package doc). ParseProviders reads them
	// from the JSON file format of `captchaq --providers`.
	Providers []ProviderConfig
	// Store keeps tasks durable. Default: NewMemoryStore(MemoryStoreConfig{}).
	// The queue does not close it.
	Store Store
	// Threads is the plan's thread count: tasks in progress at once.
	// Default: from Plan; with neither, ThreadsDefault.
	Threads int
	// Plan is the plan's name (BASIC … VIP-3), used when Threads is 0.
	Plan string
	// PollInterval, when set, polls on a fixed cadence: the shortest time
	// between two polls of a task, and four times the shortest time
	// between two poll requests. Smaller fetches answers sooner and makes
	// more requests. Left 0, the default scheduler decides each poll from
	// the learned solve times (see the package doc), and PollInterval
	// takes PollIntervalDefault for the slow polls behind pingbacks and
	// the wait of a task Admit refused. At least PollIntervalMin.
	PollInterval time.Duration
	// PollGap is the shortest time between two polls of one id: the
	// provider's rule (the simulator bans an id polled more than 20 times
	// in 10 s, CaptchaAI documents none). The default scheduler derives
	// its request rate bound and what a request costs from it (see the
	// package doc). Default PollGapDefault; at least PollGapMin.
	//
	// A provider may have a rule of its own (a PollGap() method: a
	// *createtask.Client gives its service's, e.g. CapMonster Cloud's
	// 2 s): with PollGap left 0, no id is polled more often than that
	// there, on the default scheduler and on a fixed PollInterval alike,
	// while a request still costs PollGapDefault. With Providers, each
	// provider's rule is its ProviderConfig.PollGap.
	PollGap time.Duration
	// PingbackURL, when set, asks the provider to call it (served by
	// PingbackHandler) when an answer is ready; polling becomes a slow
	// fallback for answers overdue well past their expected time.
	PingbackURL string
	// MaxQueued bounds accepted, unfinished tasks; Submit blocks past it.
	// Default max(MaxQueuedMin, 20×Threads).
	MaxQueued int
	// MaxAttempts bounds submissions of a task the provider accepted or
	// refused (a Task.MaxAttempts overrides it). Default MaxAttemptsDefault.
	// Network failures, 5xx pages, "no free thread" and rate limits are
	// not attempts: they are retried with backoff for as long as it takes
	// (bound it with a task Deadline or TTL), so a blip never fails a task.
	MaxAttempts int
	// RetryBackoff and RetryBackoffMax shape the exponential backoff (with
	// jitter) between retries. Defaults RetryBackoffDefault and
	// RetryBackoffMaxDefault.
	RetryBackoff, RetryBackoffMax time.Duration
	// AgingInterval: a waiting task gains one priority level per interval,
	// so none starves. Default AgingIntervalDefault; negative disables.
	AgingInterval time.Duration
	// TenantWeights are fair share weights among tenants; default 1.
	TenantWeights map[string]int
	// Admit, when set, is asked right before each submit. False means the
	// task must not reach the provider now (this queue's copy of it has
	// gone stale, and another process may be taking it): it is not sent,
	// counts no attempt, and waits PollInterval before it is asked about
	// again.
	Admit func(id string) bool
	// OnResult, when set, is called with every result after it is durable.
	// It runs on the queue's goroutines: keep it short.
	OnResult func(Result)
	// OnPause, when set, is called once each time all sending pauses on an
	// account error; err is the *AccountError, permanent is true when it
	// will not lift by itself (bad key, no plan: fix it and call Resume).
	// It runs on the queue's goroutines: keep it short.
	OnPause func(err error, permanent bool)
	// ThreadPool, when set, shares the plan's Threads with other processes
	// on the same key: the queue submits only on threads the pool holds for
	// it (see ThreadPool). Default nil: this process has all Threads to
	// itself, bounded only by the AIMD window.
	ThreadPool ThreadPool
	// Logger receives the queue's logs. Default: discard.
	Logger *slog.Logger
	// Now is the clock the queue reads for every time it records and every
	// decision its loops take (their timers wait out the difference on the
	// runtime's clock, which synctest fakes). Default time.Now.
	Now func() time.Time

	// adaptive: PollInterval was left 0, so polls follow the default
	// scheduler instead of a fixed interval.
	adaptive bool
	// providerGap is Provider's own rule for polling one task, when
	// PollGap was left 0 (0: it has none).
	providerGap time.Duration
}

// withDefaults returns c with its zero fields filled in. It checks
// nothing: validate does, on its result.
func (c Config) withDefaults() Config {
	threads := 0 // the queue's, for MaxQueued's default
	switch {
	case len(c.Providers) > 0:
		// Provider, Threads and Plan stay as given, for validate to
		// refuse beside Providers.
		c = c.providersWithDefaults()
		threads = c.providersThreads()
	case c.Threads == 0 && c.Plan != "":
		// An unknown Plan leaves Threads 0, for validate to report.
		c.Threads, _ = provider.PlanThreads(c.Plan)
		threads = c.Threads
	default:
		c.Threads = cmp.Or(c.Threads, ThreadsDefault)
		threads = c.Threads
	}
	if len(c.Providers) == 0 && c.Provider != nil && c.PollGap == 0 {
		// One provider: its own rule, unless PollGap says otherwise.
		c.providerGap = publishedPollGap(c.Provider)
	}
	c.PollGap = cmp.Or(c.PollGap, PollGapDefault)
	if c.PollInterval == 0 {
		c.PollInterval = PollIntervalDefault
		c.adaptive = true
	}
	c.MaxQueued = cmp.Or(c.MaxQueued, max(MaxQueuedMin, 20*threads))
	c.MaxAttempts = cmp.Or(c.MaxAttempts, MaxAttemptsDefault)
	c.RetryBackoff = cmp.Or(c.RetryBackoff, RetryBackoffDefault)
	c.RetryBackoffMax = cmp.Or(c.RetryBackoffMax, RetryBackoffMaxDefault)
	c.AgingInterval = max(cmp.Or(c.AgingInterval, AgingIntervalDefault), 0)
	if c.Store == nil {
		c.Store = NewMemoryStore(MemoryStoreConfig{})
	}
	c.Logger = cmp.Or(c.Logger, discardLogger)
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// discardLogger is every package's default Logger: captchaq logs nothing
// unless it is given a Logger.
var discardLogger = slog.New(slog.DiscardHandler)

// validate reports every problem of a Config that went through
// withDefaults at once, each naming the field and the fix.
func (c Config) validate() error {
	var errs []error
	switch {
	case len(c.Providers) > 0:
		// Each provider's Threads is checked; Threads must be left 0.
		errs = append(errs, c.checkProviders(func(i int, field string) string { return fmt.Sprintf("Providers[%d].%s", i, field) }, true)...)
	case c.Provider == nil:
		errs = append(errs, errors.New("Provider: required (e.g. a *provider.Client), or Providers"))
	}
	if len(c.Providers) == 0 && c.Threads < 0 {
		errs = append(errs, fmt.Errorf("Threads: must be 0 (from Plan) or more, got %d", c.Threads))
	}
	if len(c.Providers) == 0 && c.Threads == 0 {
		// withDefaults leaves Threads 0 only for a Plan it does not know.
		_, err := provider.PlanThreads(c.Plan)
		errs = append(errs, fmt.Errorf("Plan: %w", err))
	}
	if c.PollGap < PollGapMin {
		errs = append(errs, fmt.Errorf("PollGap: must be at least %v, got %v", PollGapMin, c.PollGap))
	}
	if c.PollInterval < PollIntervalMin {
		errs = append(errs, fmt.Errorf("PollInterval: must be at least %v, got %v", PollIntervalMin, c.PollInterval))
	}
	if c.MaxQueued < 0 {
		errs = append(errs, fmt.Errorf("MaxQueued: must be positive, got %d", c.MaxQueued))
	}
	if c.MaxAttempts < 0 {
		errs = append(errs, fmt.Errorf("MaxAttempts: must be positive, got %d", c.MaxAttempts))
	}
	if c.RetryBackoff < 0 || c.RetryBackoffMax < c.RetryBackoff {
		errs = append(errs, fmt.Errorf("RetryBackoff, RetryBackoffMax: need 0 < RetryBackoff <= RetryBackoffMax, got %v and %v", c.RetryBackoff, c.RetryBackoffMax))
	}
	for k, w := range c.TenantWeights {
		if w <= 0 {
			errs = append(errs, fmt.Errorf("TenantWeights[%q]: must be positive, got %d", k, w))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("captchaq: invalid Config: %w", errors.Join(errs...))
	}
	return nil
}
