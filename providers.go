package captchaq

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/captchaq/captchaq/internal/lane"
	"github.com/captchaq/captchaq/provider"
)

// ProviderConfig is one provider of a queue with several (Config.Providers).
type ProviderConfig struct {
	// Name names the provider in results, metrics and logs, and in the
	// captcha ids the Store keeps for tasks in flight. Required, unique:
	// letters, digits, '-' and '_'.
	Name string
	// Provider solves its tasks. Required.
	Provider Provider
	// Threads bounds its tasks in progress at once: the plan's threads on
	// a thread plan, the concurrency you allow on a per-solve service.
	// Default ThreadsDefault.
	Threads int
	// Methods are the in.php methods it solves, as
	// provider.Task.RouteMethod names them ("hcaptcha", "geetest_v4", ...),
	// each one of provider.KnownMethods. Default provider.CommonMethods
	// (ParseProviders picks provider.CaptchaAIMethods for CaptchaAI's URL).
	Methods []string
	// PricePer1000 is the price of 1,000 solves by method, with "default"
	// for the methods not named. Empty: a flat-rate plan, no cost a solve.
	PricePer1000 map[string]float64
	// SpillAfter: a task that an earlier provider solves comes here only
	// after waiting this long for a thread there (or sooner when waiting
	// would leave less than its kind's median solve time before its
	// deadline). Zero: as soon as it waits. Tasks no earlier provider
	// solves, or whose earlier providers are down, come at once.
	SpillAfter time.Duration
	// MaxSpendPerHour bounds what it is sent in any hour: the prices of
	// the submits it accepted in the last hour. Zero: no bound.
	MaxSpendPerHour float64
	// DownAfter: failing this long (network errors, 5xx pages) takes it
	// out of routing until a probe (getbalance every DownAfter) answers.
	// Default DownAfterDefault.
	DownAfter time.Duration
	// PollGap is the shortest time between two polls of one task here:
	// the service's own rule (CapMonster Cloud answers a task polled
	// again within 2 s with ERROR_TOO_MUCH_REQUESTS), kept on the default
	// scheduler and on a fixed Config.PollInterval alike. Default: the
	// Provider's PollGap() when it has one (a *createtask.Client gives its
	// service's published rule, createtask.PublishedPollGap); with neither,
	// the provider has no rule of its own and the default scheduler keeps
	// Config.PollGap there. At least PollGapMin when set.
	PollGap time.Duration
	// ThreadPool, when set, shares this provider's Threads with other
	// processes on the same key, as Config.ThreadPool does for a queue
	// of one provider (amqp.Worker gives each provider a pool of its
	// own). Default nil: this process has all Threads to itself.
	ThreadPool ThreadPool
}

var laneNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func validLaneName(s string) bool { return laneNameRE.MatchString(s) }

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
	}
	c.Providers = ps
	return c
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
	if c.ThreadPool != nil {
		errs = append(errs, errors.New("ThreadPool: leave it unset with Providers; give each provider its own (Providers[i].ThreadPool)"))
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
		switch {
		case !validLaneName(p.Name):
			at("Name", "%q must be 1 to 64 letters, digits, '-' or '_'", p.Name)
		case seen[p.Name]:
			at("Name", "%q is used twice; give each provider its own name", p.Name)
		}
		seen[p.Name] = true
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
		if p.PollGap != 0 && p.PollGap < PollGapMin {
			at("PollGap", "must be at least %v, got %v; leave it out for the provider's own rule", PollGapMin, p.PollGap)
		}
	}
	return errs
}

// publishedPollGap is p's own rule for polling one task (its PollGap()
// method: a *createtask.Client has one), or 0.
func publishedPollGap(p Provider) time.Duration {
	if g, ok := p.(interface{ PollGap() time.Duration }); ok {
		return max(g.PollGap(), 0)
	}
	return 0
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

// newLanes builds the queue's lanes: one per Config.Providers entry, or one
// unnamed lane for Config.Provider, solving CaptchaAI's methods. Only a
// queue of several takes a failing lane out of routing.
func newLanes(cfg Config) []*lane.Lane {
	ps := cfg.Providers
	if len(ps) == 0 {
		ps = []ProviderConfig{{Provider: cfg.Provider, Threads: cfg.Threads, Methods: provider.CaptchaAIMethods, DownAfter: DownAfterDefault, ThreadPool: cfg.ThreadPool}}
	}
	lanes := make([]*lane.Lane, len(ps))
	for i, p := range ps {
		lanes[i] = lane.New(lane.Config{
			Index: i, Name: p.Name, Provider: p.Provider, Threads: p.Threads, Methods: p.Methods,
			PricePer1000: p.PricePer1000, SpillAfter: p.SpillAfter, MaxSpendPerHour: p.MaxSpendPerHour,
			DownAfter: p.DownAfter, Pool: p.ThreadPool, MayGoDown: len(ps) > 1, Logger: cfg.Logger,
		})
	}
	return lanes
}

// Validate checks t as Submit does: Task.ValidateFor the queue's
// providers (Task.Validate for a queue of one Provider). A type no
// provider solves is refused with CodeUnsupportedType, and the error says
// which provider would solve it.
func (q *Queue) Validate(t Task) error {
	_, err := q.check(t)
	return err
}

// check is Validate returning the provider task as checked, which the
// queue carries to the provider: a task is validated once, at the door.
func (q *Queue) check(t Task) (provider.Checked, error) {
	if q.lanes[0].Name() == "" {
		return t.checkFor(nil)
	}
	return t.checkFor(q.cfg.Providers)
}
