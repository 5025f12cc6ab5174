package captchaqtype

import (
	"context"
	"time"

	"github.com/captchaq/captchaq/provider"
)

// Provider is what the queue needs from a solving service. *provider.Client
// implements it.
type Provider interface {
	// Submit sends a validated task to in.php and returns the provider's id.
	// pingback, when not empty, asks the provider to call that URL when the
	// task is solved.
	Submit(ctx context.Context, t provider.Task, pingback string) (captchaID string, err error)
	// PollMany asks res.php for many ids at once (bulk ids= when the provider
	// supports it, one request per id otherwise) and returns one result per
	// id, in order. The error is for the request as a whole (network, bad
	// key); per-id failures are in PollResult.Err.
	PollMany(ctx context.Context, ids []string) ([]provider.PollResult, error)
}

// BalanceChecker is a Provider that can read the account's balance
// (getbalance). *provider.Client implements it. The queue uses it to tell an
// account error drawn by one task's content from a refused account: only a
// refused account pauses all sending.
type BalanceChecker interface {
	Balance(ctx context.Context) (float64, error)
}

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
	// PollBudget bounds the polls of one task here, and ResultWindow the
	// time after its submit in which its result can be fetched: the
	// service's limits (CapMonster Cloud and CapSolver: 120 polls, 5
	// minutes). A task whose polls left would not last to the end of its
	// window at PollGap is polled at (rest of window) / (polls left + 1);
	// one that reaches its budget or its window unanswered is never polled
	// again and is submitted again as a new attempt (CodePollBudget,
	// CodeResultWindow). Default: the Provider's PollBudget() when it has
	// one (a *createtask.Client gives its service's published limits,
	// createtask.PublishedPollBudget); negative: no limit.
	PollBudget   int
	ResultWindow time.Duration
	// ReportWindow is how long after a task's answer (Result.FinishedAt)
	// the provider takes a report on it: a report later is counted
	// ReportTooLate and not sent. Default: the Provider's ReportWindow()
	// when it has one (provider.PublishedReportWindow: 15 minutes at
	// 2captcha, 60 s at Anti-Captcha); negative or none: every report is
	// sent.
	ReportWindow time.Duration
	// ProxyAddresses is what its service takes as a task proxy's address:
	// provider.ProxyAnyHost, or provider.ProxyPublicIP (a host name is
	// resolved at submit and sent as its address; a task whose proxy is
	// in a local network, or does not resolve, goes to another provider
	// or fails with provider.ProxyRefused). Default: the Provider's
	// ProxyAddresses() when it has one (createtask.PublishedProxyAddresses),
	// else ProxyAnyHost.
	ProxyAddresses provider.ProxyAddresses
}

// PublishedReportWindow is p's published window for reports (its
// ReportWindow() method: provider.Client and createtask.Client have one),
// or 0.
func PublishedReportWindow(p Provider) time.Duration {
	if w, ok := p.(interface{ ReportWindow() time.Duration }); ok {
		return w.ReportWindow()
	}
	return 0
}
