package sim

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/captchaq/captchaq/provider"
)

// Defaults for Config. A zero field takes its default.
const (
	ThreadsDefault          = 5
	NoSlotAnswerDefault     = "ERROR_NO_SLOT_AVAILABLE"
	LatencyScaleDefault     = 1.0
	BalanceDefault          = 15.0
	ResultTTLDefault        = 10 * time.Minute
	FetchedRetentionDefault = 30 * time.Second
	ReportWindowDefault     = 15 * time.Minute
	SlowDelayDefault        = 3 * time.Second
	PollBanMaxDefault       = 20
	PollBanWindowDefault    = 10 * time.Second
	PollBanDurationDefault  = 5 * time.Minute
	PingbackTimeoutDefault  = 10 * time.Second
	PingbackParallelDefault = 8
	BulkMaxIDsDefault       = 100
)

// NoSlotAnswerZeroBalance is what CaptchaAI answers on thread plans when
// every thread is busy; a valid Config.NoSlotAnswer.
const NoSlotAnswerZeroBalance = "ERROR_ZERO_BALANCE"

// Refusal is a service's answer to a submit of a type it does not take:
// its error code, on both protocols (a createTask server answers an in.php
// code as the createTask code of the same meaning), and its text, where %s
// is the type's name.
type Refusal struct{ Code, Text string }

// The services' refusals of a type they do not take (or took and
// withdrew, as they withdrew hCaptcha in 2025).
var (
	RefusalCaptchaAI   = Refusal{"ERROR_BAD_PARAMETERS", "%s" + notSupported}
	Refusal2Captcha    = Refusal{"ERROR_METHOD_CALL", "Unknown method."}
	RefusalAntiCaptcha = Refusal{"ERROR_TASK_TYPE_DEPRECATED", "%s tasks are no longer supported."}
	RefusalCapMonster  = Refusal{"ERROR_TASK_NOT_SUPPORTED", "Task type is not supported or typed incorrectly."}
	RefusalCapSolver   = Refusal{"ERROR_INVALID_TASK_DATA", "We do not support %s. Please contact customer service for details."}
)

// Config configures a Server. Every field's zero value means its default.
type Config struct {
	// Threads is the plan's thread count: tasks accepted and not yet solved.
	// Default ThreadsDefault (5, the BASIC plan).
	Threads int
	// NoSlotAnswer is the answer to a submit while every thread is busy:
	// "ERROR_NO_SLOT_AVAILABLE" (default) or "ERROR_ZERO_BALANCE".
	NoSlotAnswer string
	// Key is the one valid account key. Empty: any non-empty key is valid.
	Key string
	// AdminKey, when set, is required on the /sim/ endpoints (stats,
	// reset, account, unban) as Authorization: Bearer AdminKey: 401
	// without it. Empty: they are open, which suits a simulator on
	// loopback only.
	AdminKey string
	// Balance is what getbalance answers. Default BalanceDefault. With
	// PricePer1000 set, each solve takes its price from it, and submits
	// are answered ERROR_ZERO_BALANCE once it cannot pay for one.
	Balance float64
	// Methods are the in.php methods served (as provider.Task.RouteMethod
	// names them, each one of provider.KnownMethods); others are refused
	// as Refusal says. Default provider.CaptchaAIMethods.
	Methods []string
	// Refusal is how a submit of a type the service does not take is
	// answered (a method not in Methods): one of
	// the Refusal profiles. Default RefusalCaptchaAI.
	// Server.Withdraw refuses methods of Methods at run time.
	Refusal Refusal
	// PricePer1000 makes a per-solve provider: 1,000 solves cost this
	// much of the Balance. Zero: a thread plan, solves cost nothing.
	PricePer1000 float64

	// Latency overrides the solve time distribution per kind; kinds not
	// named keep DefaultLatency's entry.
	Latency map[provider.Kind]Latency
	// LatencyScale multiplies every solve time (0.001 turns seconds into
	// milliseconds). Default 1.
	LatencyScale float64
	// Instant solves every task at the moment it is accepted.
	Instant bool

	// UnsolvableRate is the share of tasks answered ERROR_CAPTCHA_UNSOLVABLE,
	// 0..1. Default 0.
	UnsolvableRate float64
	// Faults injects transport failures into in.php and res.php calls.
	Faults Faults

	// NoBulk makes the server behave like a provider that does not know
	// res.php's ids= parameter: a poll with only ids= is answered
	// ERROR_WRONG_ID_FORMAT, and ids= next to id= is ignored. Bulk polling
	// is on by default, up to BulkMaxIDs ids a call.
	NoBulk bool
	// BulkMaxIDs is the most ids one bulk poll may carry; more is answered
	// ERROR_BAD_PARAMETERS. Default BulkMaxIDsDefault (100).
	BulkMaxIDs int
	// NumericIDs sends the id in a JSON submit answer as a number
	// ({"status":1,"request":12345678901}) instead of a string.
	NumericIDs bool

	// PollBan bans a client that polls one id too often.
	PollBan PollBan
	// TaskResultGap, when set, is the shortest time between two
	// getTaskResult calls for one task, as CapMonster Cloud has it (2 s):
	// a call sooner after the task's last answered one is answered
	// ERROR_TOO_MUCH_REQUESTS (counted in Stats.TooManyRequests) and does
	// not count as a poll. Zero: no such rule (res.php polls keep
	// PollBan's either way).
	TaskResultGap time.Duration
	// ProxyIPOnly takes a task proxy's address only as a public IP
	// address, as Anti-Captcha and CapMonster Cloud do: a host name, or
	// an address in a local network, is answered ERROR_BAD_PROXY
	// (ProxyIPOnlyText) on both protocols.
	ProxyIPOnly bool
	// UserAgent is the browser user agent the simulated workers solve
	// Turnstile and hCaptcha tasks with when the task names none, answered
	// beside the token as 2captcha answers it (res.php json=1's
	// "useragent", getTaskResult's "userAgent"); a task's own userAgent is
	// answered back. Empty: such a token comes alone, as CaptchaAI's do. A
	// Cloudflare Challenge answer always has one: the task's, this, else a
	// common desktop Chrome's.
	UserAgent string
	// Pingback tunes the calls to a task's pingback URL.
	Pingback Pingback

	// ResultTTL is how long a solved task's answer waits to be fetched
	// before the id is forgotten. Default ResultTTLDefault (10 min).
	ResultTTL time.Duration
	// FetchedRetention is how long a task stays known after its final
	// answer was first delivered, so repeated polls and reports still work.
	// Default FetchedRetentionDefault (30 s).
	FetchedRetention time.Duration
	// ReportWindow is how long after a task's answer a report on it is
	// taken, as 2captcha's; later ones are refused
	// ERROR_REPORT_NOT_RECORDED, a second one of a task
	// ERROR_DUPLICATE_REPORT, one of a task not solved or forgotten
	// ERROR_WRONG_CAPTCHA_ID. Default ReportWindowDefault (15 min);
	// negative: no window.
	ReportWindow time.Duration

	// Siteverify sets the token lifetimes of the siteverify endpoints.
	Siteverify Siteverify

	// Seed seeds the random source. The same seed and the same sequence of
	// requests give the same latencies, outcomes, faults, ids and tokens;
	// another seed, other ids and tokens. A token is also bound to its
	// task's solving fields: another sitekey, page or image, another
	// token. captchaq sim draws a new seed each run unless given one.
	Seed uint64
	// Now is the clock. Default time.Now. Tests may pass a manual clock:
	// due work is also done at the start of every request and of Stats, so
	// moving the clock and then calling the server is deterministic.
	Now func() time.Time
	// RefuseSubmit, when set, is called with each submit's parameters
	// (lower-case names) that passed the key and ban checks; a non-empty
	// answer (an error code such as ERROR_WRONG_USER_KEY) is given instead
	// of accepting the task. Tests use it to make one task draw an error the
	// real provider answers to some inputs (a truncated image read as a bad
	// key). It must not call the Server.
	RefuseSubmit func(params map[string]string) string
	// StateFile, when set, is a file the simulator keeps its accepted
	// tasks in (one JSON line each, written before the submit is
	// answered). A simulator started again on the file, after its process
	// ended in any way, answers the ids an earlier one gave out, solving
	// each when it was due, and counts a task submitted again as a
	// duplicate (Stats.Duplicates). Tasks forgotten by now (ResultTTL after
	// their solve) are dropped from it at start. One Server at a time may
	// use a file. Empty: tasks live in memory only.
	StateFile string
	// TLS, when set, makes Start serve https with it (the base URL it
	// returns says so), so clients that speak only https can be tried
	// offline. Default: plain http.
	TLS *tls.Config
}

// Latency is a solve time distribution: log-normal around Median with
// Spread as the standard deviation of the logarithm, clamped to [Min, Max].
// Spread 0 gives exactly Median.
type Latency struct {
	Median time.Duration
	Spread float64
	Min    time.Duration
	Max    time.Duration
}

// Faults are the shares (0..1) of in.php/res.php calls that fail in
// transport. One draw per call picks at most one fault: drop, then 5xx,
// then slow. A dropped or 5xx call is not processed; a slow one is, after
// SlowDelay.
type Faults struct {
	// HTTP5xxRate: share answered with an HTML 502/503 page.
	HTTP5xxRate float64
	// DropRate: share whose connection is closed without an answer.
	DropRate float64
	// SlowRate: share answered only after SlowDelay.
	SlowRate float64
	// SlowDelay is the delay of a slow answer. Default SlowDelayDefault.
	SlowDelay time.Duration
}

// PollBan bans a client that polls one id more than Max times within Window:
// every call from that client's IP is answered IP_BANNED for Duration.
// Polls of an id are counted in fixed windows that start at the first poll.
type PollBan struct {
	// Disabled turns poll bans off.
	Disabled bool
	// Max polls of one id per Window. Default PollBanMaxDefault (20).
	Max int
	// Window default PollBanWindowDefault (10 s).
	Window time.Duration
	// Duration of a ban. Default PollBanDurationDefault (5 min).
	Duration time.Duration
}

// Pingback tunes the POSTs to a task's pingback URL. A task gets a pingback
// only if its submit carried pingback=URL.
type Pingback struct {
	// Disabled ignores pingback= on submits.
	Disabled bool
	// Timeout of one call. Default PingbackTimeoutDefault (10 s).
	Timeout time.Duration
	// Parallel is the most calls in flight. Default PingbackParallelDefault.
	Parallel int
}

// DefaultLatency is the solve time per kind at LatencyScale 1, centred on
// provider.MedianSolveTime.
var DefaultLatency = map[provider.Kind]Latency{
	provider.KindImage:               {Median: provider.MedianSolveTime(provider.KindImage), Spread: 0.25, Min: 400 * time.Millisecond, Max: 1500 * time.Millisecond},
	provider.KindGrid:                {Median: provider.MedianSolveTime(provider.KindGrid), Spread: 0.3, Min: 1500 * time.Millisecond, Max: 8 * time.Second},
	provider.KindBLS:                 {Median: provider.MedianSolveTime(provider.KindBLS), Spread: 0.3, Min: 1500 * time.Millisecond, Max: 8 * time.Second},
	provider.KindRecaptchaV2:         {Median: provider.MedianSolveTime(provider.KindRecaptchaV2), Spread: 0.35, Min: 12 * time.Second, Max: 60 * time.Second},
	provider.KindRecaptchaV3:         {Median: provider.MedianSolveTime(provider.KindRecaptchaV3), Spread: 0.3, Min: 4 * time.Second, Max: 20 * time.Second},
	provider.KindTurnstile:           {Median: provider.MedianSolveTime(provider.KindTurnstile), Spread: 0.25, Min: 4 * time.Second, Max: 15 * time.Second},
	provider.KindCloudflareChallenge: {Median: provider.MedianSolveTime(provider.KindCloudflareChallenge), Spread: 0.25, Min: 8 * time.Second, Max: 25 * time.Second},
	provider.KindGeeTest:             {Median: provider.MedianSolveTime(provider.KindGeeTest), Spread: 0.3, Min: 5 * time.Second, Max: 25 * time.Second},
	provider.KindCaptchaFox:          {Median: provider.MedianSolveTime(provider.KindCaptchaFox), Spread: 0.3, Min: 2 * time.Second, Max: 15 * time.Second},
	provider.KindFriendlyCaptcha:     {Median: provider.MedianSolveTime(provider.KindFriendlyCaptcha), Spread: 0.3, Min: 2 * time.Second, Max: 15 * time.Second},
	provider.KindLemin:               {Median: provider.MedianSolveTime(provider.KindLemin), Spread: 0.3, Min: 2 * time.Second, Max: 15 * time.Second},
	provider.KindHCaptcha:            {Median: provider.MedianSolveTime(provider.KindHCaptcha), Spread: 0.35, Min: 8 * time.Second, Max: 60 * time.Second},
	provider.KindFunCaptcha:          {Median: provider.MedianSolveTime(provider.KindFunCaptcha), Spread: 0.35, Min: 8 * time.Second, Max: 60 * time.Second},
	provider.KindGeeTestV4:           {Median: provider.MedianSolveTime(provider.KindGeeTestV4), Spread: 0.3, Min: 5 * time.Second, Max: 25 * time.Second},
	provider.KindAmazonWAF:           {Median: provider.MedianSolveTime(provider.KindAmazonWAF), Spread: 0.3, Min: 4 * time.Second, Max: 30 * time.Second},
	provider.KindMTCaptcha:           {Median: provider.MedianSolveTime(provider.KindMTCaptcha), Spread: 0.3, Min: 4 * time.Second, Max: 30 * time.Second},
	provider.KindDataDome:            {Median: provider.MedianSolveTime(provider.KindDataDome), Spread: 0.3, Min: 6 * time.Second, Max: 40 * time.Second},
}

// withDefaults returns a copy of c with every zero field set to its default.
func (c Config) withDefaults() Config {
	c.Threads = cmp.Or(c.Threads, ThreadsDefault)
	c.NoSlotAnswer = cmp.Or(c.NoSlotAnswer, NoSlotAnswerDefault)
	c.Balance = cmp.Or(c.Balance, BalanceDefault)
	if c.Methods == nil {
		c.Methods = provider.CaptchaAIMethods
	}
	c.Refusal = cmp.Or(c.Refusal, RefusalCaptchaAI)
	c.LatencyScale = cmp.Or(c.LatencyScale, LatencyScaleDefault)
	lat := maps.Clone(DefaultLatency)
	maps.Copy(lat, c.Latency)
	c.Latency = lat
	c.BulkMaxIDs = cmp.Or(c.BulkMaxIDs, BulkMaxIDsDefault)
	c.Faults.SlowDelay = cmp.Or(c.Faults.SlowDelay, SlowDelayDefault)
	c.PollBan.Max = cmp.Or(c.PollBan.Max, PollBanMaxDefault)
	c.PollBan.Window = cmp.Or(c.PollBan.Window, PollBanWindowDefault)
	c.PollBan.Duration = cmp.Or(c.PollBan.Duration, PollBanDurationDefault)
	c.Pingback.Timeout = cmp.Or(c.Pingback.Timeout, PingbackTimeoutDefault)
	c.Pingback.Parallel = cmp.Or(c.Pingback.Parallel, PingbackParallelDefault)
	c.ResultTTL = cmp.Or(c.ResultTTL, ResultTTLDefault)
	c.FetchedRetention = cmp.Or(c.FetchedRetention, FetchedRetentionDefault)
	c.ReportWindow = cmp.Or(c.ReportWindow, ReportWindowDefault)
	c.Siteverify = c.Siteverify.withDefaults()
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// validate reports the first bad field of a defaulted Config.
func (c Config) validate() error {
	var errs []error
	if c.Threads < 0 {
		errs = append(errs, fmt.Errorf("sim: Threads is %d: give a positive thread count", c.Threads))
	}
	if c.NoSlotAnswer != NoSlotAnswerDefault && c.NoSlotAnswer != NoSlotAnswerZeroBalance {
		errs = append(errs, fmt.Errorf("sim: NoSlotAnswer is %q: use %q or %q", c.NoSlotAnswer, NoSlotAnswerDefault, NoSlotAnswerZeroBalance))
	}
	for _, m := range c.Methods {
		if !slices.Contains(provider.KnownMethods, m) {
			errs = append(errs, fmt.Errorf("sim: Methods has %q: use methods of %s", m, strings.Join(provider.KnownMethods, ", ")))
		}
	}
	if c.PricePer1000 < 0 || math.IsNaN(c.PricePer1000) {
		errs = append(errs, fmt.Errorf("sim: PricePer1000 is %v: give 0 (a thread plan) or a positive price", c.PricePer1000))
	}
	if c.LatencyScale < 0 || math.IsNaN(c.LatencyScale) || math.IsInf(c.LatencyScale, 0) {
		errs = append(errs, fmt.Errorf("sim: LatencyScale is %v: give a positive factor", c.LatencyScale))
	}
	rates := []struct {
		name string
		v    float64
	}{
		{"UnsolvableRate", c.UnsolvableRate},
		{"Faults.HTTP5xxRate", c.Faults.HTTP5xxRate},
		{"Faults.DropRate", c.Faults.DropRate},
		{"Faults.SlowRate", c.Faults.SlowRate},
	}
	for _, r := range rates {
		if !(r.v >= 0 && r.v <= 1) {
			errs = append(errs, fmt.Errorf("sim: %s is %v: give a share between 0 and 1", r.name, r.v))
		}
	}
	if sum := c.Faults.HTTP5xxRate + c.Faults.DropRate + c.Faults.SlowRate; sum > 1 {
		errs = append(errs, fmt.Errorf("sim: fault rates add up to %v: their sum must be at most 1", sum))
	}
	for k, l := range c.Latency {
		if l.Median < 0 || l.Min < 0 || l.Max < 0 || l.Spread < 0 || (l.Max > 0 && l.Min > l.Max) {
			errs = append(errs, fmt.Errorf("sim: Latency[%s] is %+v: durations and spread must not be negative, and Min at most Max", k, l))
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"PollBan.Window", c.PollBan.Window}, {"PollBan.Duration", c.PollBan.Duration},
		{"Faults.SlowDelay", c.Faults.SlowDelay}, {"Pingback.Timeout", c.Pingback.Timeout},
		{"ResultTTL", c.ResultTTL}, {"FetchedRetention", c.FetchedRetention},
		{"TaskResultGap", c.TaskResultGap},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("sim: %s is %v: give a positive duration", d.name, d.v))
		}
	}
	if err := c.Siteverify.validate(); err != nil {
		errs = append(errs, err)
	}
	if c.PollBan.Max < 0 || c.Pingback.Parallel < 0 || c.BulkMaxIDs < 0 {
		errs = append(errs, errors.New("sim: PollBan.Max, Pingback.Parallel and BulkMaxIDs must not be negative"))
	}
	return errors.Join(errs...)
}
