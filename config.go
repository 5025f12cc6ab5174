package captchaq

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/captchaq/captchaq/internal/engine"
	"github.com/captchaq/captchaq/internal/lane"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/provider/createtask"
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

// RefusalHoldDefault is Config.RefusalHold's default.
const RefusalHoldDefault = time.Hour

// DownAfterDefault is how long a provider may fail (network errors, 5xx)
// before it leaves routing.
const DownAfterDefault = 30 * time.Second

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
	// the wait of a task its Fleet did not admit. At least PollIntervalMin.
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
	// PingbackSecret keys the secret each provider's pingback URL carries
	// (sig=, an HMAC-SHA256 of the provider's name; see PingbackHandler).
	// At least 16 bytes. Default 32 random bytes at New: the URLs of one
	// run are refused by the next, whose tasks in flight are then polled.
	// Keep it out of logs: it is what makes a pingback believed.
	PingbackSecret []byte
	// MaxQueued bounds accepted, unfinished tasks; Submit blocks past it.
	// Default max(MaxQueuedMin, 20×Threads).
	MaxQueued int
	// MaxAttempts bounds submissions of a task the provider accepted or
	// refused (a Task.MaxAttempts overrides it). Default MaxAttemptsDefault.
	// Network failures, 5xx pages, "no free thread" and rate limits are
	// not attempts: they are retried with backoff for as long as it takes
	// (bound it with a task Deadline or TTL), so a blip never fails a task.
	MaxAttempts int
	// RefusalHold is how long a provider's refusal of a task's type (a
	// type it withdrew: provider.TypeRefused) keeps that type's tasks
	// away from it. They go to the other providers that solve the type,
	// or fail with CodeUnsupportedType when none takes it; the first task
	// of the type after the hold probes the provider again, alone. The
	// refusals are kept in a Store that keeps state (store/sqlite).
	// Default RefusalHoldDefault; negative: a refusal fails its task like
	// any task error, and nothing is held.
	RefusalHold time.Duration
	// ProxyResolver resolves a task's proxy host name for a provider
	// taking only public IP addresses (ProviderConfig.ProxyAddresses).
	// Default net.DefaultResolver.
	ProxyResolver provider.Resolver
	// RetryBackoff and RetryBackoffMax shape the exponential backoff (with
	// jitter) between retries. Defaults RetryBackoffDefault and
	// RetryBackoffMaxDefault.
	RetryBackoff, RetryBackoffMax time.Duration
	// AgingInterval: a waiting task gains one priority level per interval,
	// so none starves. Default AgingIntervalDefault; negative disables.
	AgingInterval time.Duration
	// TenantWeights are fair share weights among tenants; default 1.
	TenantWeights map[string]int
	// OnResult, when set, is called with every result after it is durable.
	// It runs on the queue's goroutines: keep it short.
	OnResult func(Result)
	// OnPause, when set, is called once each time all sending pauses on an
	// account error; err is the *AccountError, permanent is true when it
	// will not lift by itself (bad key, no plan: fix it and call Resume).
	// It runs on the queue's goroutines: keep it short.
	OnPause func(err error, permanent bool)
	// Reservoirs keep tokens of the captchas named solved ahead of
	// demand: a task that matches one takes a token and is answered at
	// once (see ReservoirConfig). The Store must be a ReservoirStore.
	Reservoirs []ReservoirConfig
	// ReservoirShare is the share of the plan's threads the reservoirs'
	// refills may take at once, above 0 and at most 1. Default
	// ReservoirShareDefault.
	ReservoirShare float64
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
	c.ReservoirShare = cmp.Or(c.ReservoirShare, ReservoirShareDefault)
	c = c.withReservoirDefaults()
	c.Logger = cmp.Or(c.Logger, discardLogger)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.ProxyResolver == nil {
		c.ProxyResolver = net.DefaultResolver
	}
	return c
}

// withReservoirDefaults is c with each reservoir's defaults filled in.
func (c Config) withReservoirDefaults() Config {
	if len(c.Reservoirs) > 0 {
		rcs := slices.Clone(c.Reservoirs)
		for i := range rcs {
			rcs[i].Max = cmp.Or(rcs[i].Max, max(ReservoirMaxDefault, rcs[i].Size))
		}
		c.Reservoirs = rcs
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
	if n := len(c.PingbackSecret); n > 0 && n < pingbackSecretMin {
		errs = append(errs, fmt.Errorf("PingbackSecret: must be at least %d bytes (e.g. 32 from crypto/rand), got %d", pingbackSecretMin, n))
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
	errs = append(errs, c.checkReservoirs(c.threads())...)
	if len(errs) > 0 {
		return fmt.Errorf("captchaq: invalid Config: %w", errors.Join(errs...))
	}
	return nil
}

// laneConfig is the lane p runs as, with threads shared through pool
// (nil: this process's alone). It is the one place ProviderConfig's
// fields reach lane.Config, which carries them under the same names.
func laneConfig(p ProviderConfig, pool lane.Pool, log *slog.Logger) lane.Config {
	return lane.Config{
		Name: p.Name, Provider: p.Provider, Threads: p.Threads, Methods: p.Methods,
		PricePer1000: p.PricePer1000, SpillAfter: p.SpillAfter, MaxSpendPerHour: p.MaxSpendPerHour,
		DownAfter: p.DownAfter, Pool: pool, Logger: log,
	}
}

// laneConfigs are the queue's lanes (lane.NewSet): one per
// Config.Providers entry, or one unnamed lane for Config.Provider,
// solving CaptchaAI's methods. A fleet shares each provider's threads.
func (c Config) laneConfigs(fleet Fleet) []lane.Config {
	ps := c.Providers
	if len(ps) == 0 {
		ps = []ProviderConfig{{Provider: c.Provider, Threads: c.Threads, Methods: provider.CaptchaAIMethods, DownAfter: DownAfterDefault}}
	}
	cs := make([]lane.Config, len(ps))
	for i, p := range ps {
		var pool lane.Pool
		if fleet != nil {
			if tp := fleet.Threads(p.Name); tp != nil {
				pool = tp
			}
		}
		cs[i] = laneConfig(p, pool, c.Logger)
		cs[i].RefusalHold = cmp.Or(c.RefusalHold, RefusalHoldDefault)
	}
	return cs
}

// pollGapOf is the shortest time between two polls of one task at l on
// the default scheduler: its own rule, else PollGap.
func (c Config) pollGapOf(l *lane.Lane) time.Duration {
	if len(c.Providers) > 0 {
		return cmp.Or(c.Providers[l.Index()].PollGap, c.PollGap)
	}
	return cmp.Or(c.providerGap, c.PollGap)
}

// pollRuleOf is l's own rule for polling one task (0: none), which a
// fixed PollInterval keeps too.
func (c Config) pollRuleOf(l *lane.Lane) time.Duration {
	if len(c.Providers) > 0 {
		return c.Providers[l.Index()].PollGap
	}
	return publishedPollGap(c.Provider)
}

// pollBudgetOf is l's limits on polling one task (zero fields: none).
func (c Config) pollBudgetOf(l *lane.Lane) createtask.PollBudget {
	if len(c.Providers) == 0 {
		return publishedPollBudget(c.Provider)
	}
	p := c.Providers[l.Index()]
	return createtask.PollBudget{Polls: max(p.PollBudget, 0), Window: max(p.ResultWindow, 0)}
}

// providersWithDefaults fills each provider's defaults.
func (c Config) providersWithDefaults() Config {
	ps := slices.Clone(c.Providers)
	for i := range ps {
		p := &ps[i]
		p.Threads = cmp.Or(p.Threads, ThreadsDefault)
		if p.Methods == nil {
			p.Methods = provider.CommonMethods
		}
		p.DownAfter = cmp.Or(p.DownAfter, DownAfterDefault)
		p.PollGap = cmp.Or(p.PollGap, publishedPollGap(p.Provider)) // 0: none of its own
		b := publishedPollBudget(p.Provider)
		p.PollBudget = cmp.Or(p.PollBudget, b.Polls)
		p.ResultWindow = cmp.Or(p.ResultWindow, b.Window)
		p.ReportWindow = cmp.Or(p.ReportWindow, PublishedReportWindow(p.Provider))
		p.ProxyAddresses = cmp.Or(p.ProxyAddresses, publishedProxyAddresses(p.Provider))
	}
	c.Providers = ps
	return c
}

// threads is the queue's threads: Threads, or the providers' together.
func (c Config) threads() int {
	if len(c.Providers) > 0 {
		return c.providersThreads()
	}
	return c.Threads
}

// providersThreads is the sum of the providers' Threads (those below 0,
// which validate refuses, count 0).
func (c Config) providersThreads() int {
	total := 0
	for _, p := range c.Providers {
		total += max(p.Threads, 0)
	}
	return total
}

// checkProviders reports every problem of Providers after
// providersWithDefaults. Errors name fields as fieldName says: Config's
// names for New, the file's for ParseProviders. needClients: each
// Provider is required (not for a file read WithoutKeys).
func (c Config) checkProviders(fieldName func(i int, field string) string, needClients bool) []error {
	var errs []error
	if c.Provider != nil || c.Threads != 0 || c.Plan != "" {
		errs = append(errs, errors.New("Provider, Threads, Plan: leave them unset with Providers (each provider has its own Threads)"))
	}
	if len(c.Providers) > 63 {
		errs = append(errs, fmt.Errorf("Providers: at most 63, got %d", len(c.Providers)))
	}
	seen := map[string]bool{}
	for i := range c.Providers {
		p := &c.Providers[i]
		at := func(field, format string, args ...any) {
			errs = append(errs, fmt.Errorf("%s: %s", fieldName(i, field), fmt.Sprintf(format, args...)))
		}
		if bad := lane.NameProblem(p.Name, seen, "provider"); bad != "" {
			at("Name", "%s", bad)
		}
		if needClients && p.Provider == nil {
			at("Provider", "required (e.g. a *provider.Client)")
		}
		if p.Threads < 0 {
			at("Threads", "must be 0 (default %d) or more, got %d", ThreadsDefault, p.Threads)
		}
		if len(p.Methods) == 0 {
			at("Methods", "empty; name the methods it solves, or leave it out for %s", strings.Join(provider.CommonMethods, ", "))
		}
		for j, m := range p.Methods {
			if !slices.Contains(provider.KnownMethods, m) {
				at("Methods", "[%d] %q is not a method captchaq can validate; use one of %s", j, m, strings.Join(provider.KnownMethods, ", "))
			}
		}
		for m, price := range p.PricePer1000 {
			if m != "default" && !slices.Contains(p.Methods, m) {
				at("PricePer1000", "%q is not one of its methods; use \"default\" or one of %s", m, strings.Join(p.Methods, ", "))
			}
			if price < 0 {
				at("PricePer1000", "%q: must be 0 or more, got %v", m, price)
			}
		}
		if p.SpillAfter < 0 {
			at("SpillAfter", "must be 0 or more, got %v", p.SpillAfter)
		}
		if p.MaxSpendPerHour < 0 {
			at("MaxSpendPerHour", "must be 0 (no bound) or more, got %v", p.MaxSpendPerHour)
		}
		if p.DownAfter < 0 {
			at("DownAfter", "must be positive, got %v", p.DownAfter)
		}
		if a := p.ProxyAddresses; a != provider.ProxyAnyHost && a != provider.ProxyPublicIP {
			at("ProxyAddresses", "%q is not a rule; use %q or %q", a, provider.ProxyAnyHost, provider.ProxyPublicIP)
		}
		if p.PollGap != 0 && p.PollGap < PollGapMin {
			at("PollGap", "must be at least %v, got %v; leave it out for the provider's own rule", PollGapMin, p.PollGap)
		}
	}
	return errs
}

// publishedPollBudget is p's published limits on polling one task (its
// PollBudget() method: a *createtask.Client has one), or none.
func publishedPollBudget(p Provider) createtask.PollBudget {
	if b, ok := p.(interface{ PollBudget() createtask.PollBudget }); ok {
		return b.PollBudget()
	}
	return createtask.PollBudget{}
}

// publishedPollGap is p's own rule for polling one task (its PollGap()
// method: a *createtask.Client has one), or 0.
func publishedPollGap(p Provider) time.Duration {
	if g, ok := p.(interface{ PollGap() time.Duration }); ok {
		return max(g.PollGap(), 0)
	}
	return 0
}

// checkReservoirs reports every problem of c.Reservoirs, after
// withDefaults, each naming the field and the fix; threads are the plan's.
func (c Config) checkReservoirs(threads int) []error {
	return engine.CheckReservoirs(c.Reservoirs, c.Providers, c.Store, c.ReservoirShare, threads)
}

// proxyAddressesOf is what l's service takes as a proxy's address.
func (c Config) proxyAddressesOf(l *lane.Lane) provider.ProxyAddresses {
	if len(c.Providers) > 0 {
		return c.Providers[l.Index()].ProxyAddresses
	}
	return publishedProxyAddresses(c.Provider)
}

// publishedProxyAddresses is what p's service takes as a proxy's address
// (its ProxyAddresses() method: a *createtask.Client has one), else any
// host.
func publishedProxyAddresses(p Provider) provider.ProxyAddresses {
	if a, ok := p.(proxyRuled); ok {
		return a.ProxyAddresses()
	}
	return provider.ProxyAnyHost
}

// proxyRuled is a Provider that says what its service takes as a
// proxy's address.
type proxyRuled interface {
	ProxyAddresses() provider.ProxyAddresses
}

// pingbackSecretMin is the shortest Config.PingbackSecret.
const pingbackSecretMin = 16
