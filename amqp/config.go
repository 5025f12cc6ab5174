package amqp

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
)

// Defaults of Config. A zero field takes its default.
const (
	URLDefault               = "amqp://guest:guest@127.0.0.1:5672/"
	PrefixDefault            = "captcha"
	PrefetchDefault          = 4
	TaskTTLDefault           = 5 * time.Minute
	MaxPriorityDefault       = 10
	HeartbeatDefault         = 5 * time.Second
	DialTimeoutDefault       = 10 * time.Second
	SetupTimeoutDefault      = 10 * time.Second
	ReconnectMinDefault      = 250 * time.Millisecond
	ReconnectMaxDefault      = 5 * time.Second
	InflightLeaseDefault     = time.Minute
	InflightRefreshDefault   = 10 * time.Minute
	InflightQueueIdleDefault = time.Hour
	// ReplyQueueIdle is how long a gateway's reply queue outlives its last
	// use (x-expires): a gateway down for less keeps every result waiting;
	// a retired gateway name leaves nothing behind after it.
	ReplyQueueIdle = 7 * 24 * time.Hour
)

// RetryDelaysDefault are the delay tiers a transient failure waits in
// before its task goes back to the task exchange: attempt n waits
// RetryDelays[min(n-1, len-1)].
var RetryDelaysDefault = []time.Duration{5 * time.Second, 30 * time.Second, 2 * time.Minute}

// Config says where the broker is and how the topology is named and shaped.
type Config struct {
	// URL of the broker. Default URLDefault. Credentials in it are never
	// logged: errors and logs name the host only.
	URL string
	// Prefix names every queue and exchange: Prefix+".tasks", ".results",
	// ".dlx", ".failed", ... Several fleets (and tests) can share one broker
	// with different prefixes. Default "captcha".
	Prefix string
	// Prefetch bounds the task deliveries a consumer holds at once. Small,
	// so priorities act at the broker and a slow consumer hoards nothing.
	// Default 4.
	Prefetch int
	// TaskTTL is how long a task may wait in a task queue before it is
	// dead-lettered with reason "expired". Default 5 minutes; negative
	// means no TTL.
	TaskTTL time.Duration
	// MaxPriority is the x-max-priority of the task queues. Default 10.
	MaxPriority int
	// Lanes are the task kinds (see KindOf) that get their own queue,
	// Prefix+".tasks."+kind, so consumers can take only some kinds. Tasks
	// of other kinds go to Prefix+".tasks". Default none.
	Lanes []string
	// RetryDelays are the delay tiers for transient failures. Default
	// RetryDelaysDefault.
	RetryDelays []time.Duration
	// Heartbeat is the AMQP heartbeat timeout the client asks for.
	// RabbitMQ closes a connection it has heard nothing on for two to
	// three of them (measured on 3.10: 14 s at 5 s, 29 s at 10 s), and
	// only then are a silent worker's checkpoints adopted: this bounds
	// what a power loss or a partition costs (see "Recovery" in the
	// package doc). Default 5 s, the low end of RabbitMQ's advice (5 to
	// 20 s; lower risks closing live connections of a loaded machine).
	Heartbeat time.Duration
	// DialTimeout bounds one connection attempt; SetupTimeout bounds
	// declaring the topology. Default 10 s each.
	DialTimeout  time.Duration
	SetupTimeout time.Duration
	// StartWait is how long Dial waits for a broker that is not taking
	// connections yet (nothing listens on its port, or it is still
	// starting and drops the handshake), trying again every second, before
	// it fails. A long-running process started beside its broker, or in
	// the middle of a broker restart, waits for it; a refused login or a
	// topology conflict still fails at once. Default 0: no wait.
	StartWait time.Duration
	// ReconnectMin and ReconnectMax bound the exponential backoff between
	// connection attempts. Default 250 ms and 5 s: a worker's answers
	// wait for its reconnect once the broker is back (after a restart,
	// at 30 s they waited up to that long), and an attempt every 5 s
	// costs a down broker nothing. After a close for the broker's
	// shutdown the wait is at most a second (shutdownRetryMax): the
	// claims of the tasks its close cut off must go out soon after it is
	// back.
	ReconnectMin time.Duration
	ReconnectMax time.Duration
	// InflightLease is the expiration of a checkpoint message while it is
	// not held: a checkpoint its owner holds never expires, and one whose
	// holder's channel closed goes to the fleet at once (see "Recovery"
	// in the package doc). The lease only returns the checkpoints an
	// owner died with before it received them (published while its
	// checkpoint consumer was away). Default 1 minute.
	InflightLease time.Duration
	// InflightRefresh is how long a checkpoint delivery may be held before
	// it is republished and the old delivery acked, so the broker's
	// consumer_timeout (30 min by default) never fires. Default 10 minutes.
	InflightRefresh time.Duration
	// Logger receives connection events. Default: discard (captchaq logs
	// nothing unless it is given a Logger).
	Logger *slog.Logger
}

var prefixRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,100}$`)

// withDefaults returns c with its zero fields filled in. It checks
// nothing: validate does, on its result.
func (c Config) withDefaults() Config {
	c.URL = cmp.Or(c.URL, URLDefault)
	c.Prefix = cmp.Or(c.Prefix, PrefixDefault)
	c.Prefetch = cmp.Or(c.Prefetch, PrefetchDefault)
	c.TaskTTL = cmp.Or(c.TaskTTL, TaskTTLDefault)
	c.MaxPriority = cmp.Or(c.MaxPriority, MaxPriorityDefault)
	if len(c.RetryDelays) == 0 {
		c.RetryDelays = RetryDelaysDefault
	}
	c.Heartbeat = cmp.Or(c.Heartbeat, HeartbeatDefault)
	c.DialTimeout = cmp.Or(c.DialTimeout, DialTimeoutDefault)
	c.SetupTimeout = cmp.Or(c.SetupTimeout, SetupTimeoutDefault)
	c.ReconnectMin = cmp.Or(c.ReconnectMin, ReconnectMinDefault)
	c.ReconnectMax = cmp.Or(c.ReconnectMax, ReconnectMaxDefault)
	c.InflightLease = cmp.Or(c.InflightLease, InflightLeaseDefault)
	c.InflightRefresh = cmp.Or(c.InflightRefresh, InflightRefreshDefault)
	c.Logger = cmp.Or(c.Logger, discardLogger)
	return c
}

// discardLogger is the default Logger of Config: the package logs nothing
// unless it is given a Logger. A WorkerConfig's and a GatewayConfig's
// default to their Conn's.
var discardLogger = slog.New(slog.DiscardHandler)

// validate reports every problem of a Config that went through
// withDefaults at once, each naming the field and the fix.
func (c Config) validate() error {
	var errs []error
	if !strings.HasPrefix(c.URL, "amqp://") && !strings.HasPrefix(c.URL, "amqps://") {
		errs = append(errs, fmt.Errorf("amqp: URL %q: must start with amqp:// or amqps://", redactURL(c.URL)))
	}
	if !prefixRE.MatchString(c.Prefix) {
		errs = append(errs, fmt.Errorf("amqp: Prefix %q: use letters, digits, '.', '_', ':' or '-' (at most 101 characters)", c.Prefix))
	}
	if c.Prefetch < 0 {
		errs = append(errs, fmt.Errorf("amqp: Prefetch %d: must be positive", c.Prefetch))
	}
	if c.MaxPriority < 1 || c.MaxPriority > 255 {
		errs = append(errs, fmt.Errorf("amqp: MaxPriority %d: must be 1..255 (10 or less is advised)", c.MaxPriority))
	}
	for _, l := range c.Lanes {
		if !prefixRE.MatchString(l) {
			errs = append(errs, fmt.Errorf("amqp: Lanes: kind %q: use letters, digits, '.', '_' or '-'", l))
		}
	}
	for _, d := range c.RetryDelays {
		if d < time.Millisecond {
			errs = append(errs, fmt.Errorf("amqp: RetryDelays: %v: must be at least 1ms", d))
		}
	}
	if c.InflightRefresh >= 30*time.Minute {
		errs = append(errs, fmt.Errorf("amqp: InflightRefresh %v: must stay below the broker's consumer_timeout (30m)", c.InflightRefresh))
	}
	if c.ReconnectMin > c.ReconnectMax {
		errs = append(errs, fmt.Errorf("amqp: ReconnectMin %v exceeds ReconnectMax %v", c.ReconnectMin, c.ReconnectMax))
	}
	return errors.Join(errs...)
}

// withDefaults returns c with its zero fields filled in, the Logger
// from the Conn's (connLog). It checks nothing: validate does.
func (c WorkerConfig) withDefaults(connLog *slog.Logger) WorkerConfig {
	if c.Owner == "" {
		c.Owner = processName()
	}
	c.Prefetch = cmp.Or(c.Prefetch, c.threads()+WorkerPrefetchExtra)
	c.Grace = cmp.Or(c.Grace, GraceDefault)
	c.BeatInterval = cmp.Or(c.BeatInterval, BeatIntervalDefault)
	c.BalanceEvery = cmp.Or(c.BalanceEvery, BalanceEveryDefault)
	c.Logger = cmp.Or(c.Logger, connLog)
	return c
}

// threads is the plan's thread count the worker's queue will have (its
// own Config checks Threads and Plan); with Providers, their sum.
func (c WorkerConfig) threads() int {
	if len(c.Queue.Providers) > 0 {
		n := 0
		for _, p := range c.Queue.Providers {
			n += cmp.Or(p.Threads, captchaq.ThreadsDefault)
		}
		return n
	}
	if c.Queue.Threads == 0 && c.Queue.Plan != "" {
		if n, err := provider.PlanThreads(c.Queue.Plan); err == nil {
			return n
		}
	}
	return cmp.Or(c.Queue.Threads, captchaq.ThreadsDefault)
}

// validate reports every problem of a WorkerConfig that went through
// withDefaults at once, each naming the field and the fix. The Queue's
// own problems are captchaq.New's to report.
func (c WorkerConfig) validate() error {
	var errs []error
	if c.Queue.Store != nil {
		errs = append(errs, errors.New("amqp: WorkerConfig.Queue.Store: leave it nil; the worker's store is the broker"))
	}
	if !prefixRE.MatchString(c.Owner) {
		errs = append(errs, fmt.Errorf("amqp: WorkerConfig.Owner %q: use letters, digits, '.', '_', ':' or '-'", c.Owner))
	}
	if c.Prefetch < 0 {
		errs = append(errs, fmt.Errorf("amqp: WorkerConfig.Prefetch %d: must be positive", c.Prefetch))
	}
	return errors.Join(errs...)
}

// withDefaults returns c with its zero fields filled in, the Logger
// from the Conn's (connLog). It checks nothing: validate does.
func (c GatewayConfig) withDefaults(connLog *slog.Logger) GatewayConfig {
	if c.Name == "" {
		c.Name = processName()
	}
	c.FairBurst = cmp.Or(c.FairBurst, FairBurstDefault)
	c.Prefetch = cmp.Or(c.Prefetch, GatewayPrefetchDefault)
	c.ResyncEvery = cmp.Or(c.ResyncEvery, ResyncEveryDefault)
	c.Logger = cmp.Or(c.Logger, connLog)
	return c
}

// validate reports every problem of a GatewayConfig that went through
// withDefaults at once, each naming the field and the fix.
func (c GatewayConfig) validate() error {
	var errs []error
	if c.Store == nil {
		errs = append(errs, errors.New("amqp: GatewayConfig.Store: required: the gateway records there the tasks it accepts and their results"))
	}
	if !prefixRE.MatchString(c.Name) {
		errs = append(errs, fmt.Errorf("amqp: GatewayConfig.Name %q: use letters, digits, '.', '_', ':' or '-' (at most 101)", c.Name))
	}
	if c.Prefetch < 0 {
		errs = append(errs, fmt.Errorf("amqp: GatewayConfig.Prefetch %d: must be positive", c.Prefetch))
	}
	if c.ResyncEvery < 0 {
		errs = append(errs, fmt.Errorf("amqp: GatewayConfig.ResyncEvery %v: must be positive (default %v)", c.ResyncEvery, ResyncEveryDefault))
	}
	return errors.Join(errs...)
}

// Names are the queue and exchange names of one topology.
type Names struct {
	Types    string // direct exchange: routing key = task kind
	TasksAll string // fanout exchange: the alternate exchange of Types
	Tasks    string // the task queue for kinds without a lane
	Results  string // results, message id = task id
	DLX      string // dead-letter exchange
	Failed   string // dead letters
	// Replayed holds a notice for each task a gateway replayed from its
	// store (Gateway.Replay) or answered after a failure, so Conn.Replay
	// skips the task's older copies in Failed instead of solving it twice.
	Replayed string
	Delay    string // headers exchange in front of the delay queues
	Inflight string // Inflight+"."+owner: a worker's checkpoint queue (quorum)
	Adopt    string // checkpoints whose holder is gone, for any worker to adopt
	Status   string // fanout exchange for consumer status beats
	Replies  string // Replies+"."+gateway: a gateway's reply queue
	Reports  string // clients' reportbad/reportgood, for a worker to forward
	Claims   string // fanout exchange: ids of tasks a worker checkpointed after losing their delivery
	Balance  string // the newest balance reading a worker made, kept for gateways (one message)
	State    string // the workers' queues' refusals of types (one message; see fleetState)
	// ReplyExchange routes a result to its gateway's reply queue (bound
	// under its own name); its alternate exchange RepliesUnrouted sends a
	// result whose reply queue is gone to Results instead.
	ReplyExchange, RepliesUnrouted string
	// The fleet's thread pool (WorkerConfig.SharedThreads): Threads holds
	// one token per plan thread; ThreadsReturning holds the tokens of a
	// holder that died until its tasks at the provider are done;
	// ThreadsFilled exists once it was filled; ThreadsLock is the exclusive
	// queue the filling worker holds.
	Threads, ThreadsReturning, ThreadsFilled, ThreadsLock string
	// Routing holds the fleet's routing, one message that every worker
	// with SharedThreads checks its own against (see "Routing: one for
	// the fleet" in the package doc); RoutingLock is the exclusive queue
	// the checking worker holds.
	Routing, RoutingLock string

	prefix string
}

// ThreadsNames are the queues of one thread pool: Tokens holds one token
// per thread, Returning a dead holder's tokens until its tasks at the
// provider are done, Filled exists once the pool was filled, and Lock is
// the exclusive queue the filling worker holds.
type ThreadsNames struct {
	Tokens, Returning, Filled, Lock string
}

// PlanThreads are the queues of the pool of a fleet on one provider:
// Threads, ThreadsReturning, ThreadsFilled and ThreadsLock.
func (n Names) PlanThreads() ThreadsNames {
	return ThreadsNames{Tokens: n.Threads, Returning: n.ThreadsReturning, Filled: n.ThreadsFilled, Lock: n.ThreadsLock}
}

// ProviderThreads are the queues of the pool of one named provider of a
// fleet on several (captchaq.ProviderConfig.Name): PREFIX.provider.NAME.threads,
// with .returning, .filled and .lock after it.
func (n Names) ProviderThreads(name string) ThreadsNames {
	base := n.prefix + ".provider." + name + ".threads"
	return ThreadsNames{Tokens: base, Returning: base + ".returning", Filled: base + ".filled", Lock: base + ".lock"}
}

// FailedRoutingKey is the routing key of every dead letter.
const FailedRoutingKey = "failed"

// NamesFor returns the names under prefix.
func NamesFor(prefix string) Names {
	p := cmp.Or(prefix, PrefixDefault)
	return Names{
		Types:    p + ".types",
		TasksAll: p + ".tasks.all",
		Tasks:    p + ".tasks",
		Results:  p + ".results",
		DLX:      p + ".dlx",
		Failed:   p + ".failed",
		Replayed: p + ".replayed",
		Delay:    p + ".delay",
		Inflight: p + ".checkpoints",
		Adopt:    p + ".adopt",
		Status:   p + ".status",
		Replies:  p + ".replies",
		Reports:  p + ".reports",
		Claims:   p + ".claims",
		Balance:  p + ".balance",
		State:    p + ".state",

		ReplyExchange:   p + ".replies",
		RepliesUnrouted: p + ".replies.unrouted",

		Threads:          p + ".threads",
		ThreadsReturning: p + ".threads.returning",
		ThreadsFilled:    p + ".threads.filled",
		ThreadsLock:      p + ".threads.lock",

		Routing:     p + ".routing",
		RoutingLock: p + ".routing.lock",

		prefix: p,
	}
}

// Lane is the queue of one task kind.
func (n Names) Lane(kind string) string { return n.Tasks + "." + kind }

// DelayQueue is the delay queue of one tier.
func (n Names) DelayQueue(d time.Duration) string {
	return fmt.Sprintf("%s.%d", n.Delay, d.Milliseconds())
}

// ClaimQueue is the queue where one worker hears the fleet's claims.
func (n Names) ClaimQueue(owner string) string { return n.Claims + "." + owner }

// InflightQueue is the checkpoint queue of one worker: a quorum queue
// that dead-letters to Adopt whatever its holder lets go unacked.
func (n Names) InflightQueue(owner string) string { return n.Inflight + "." + owner }

// ReplyQueue is the reply queue of one gateway: the results of the tasks
// it publishes, and a copy of every dead letter (see Gateway).
func (n Names) ReplyQueue(gateway string) string { return n.Replies + "." + gateway }

// isReplyQueue reports whether q names a gateway's reply queue under this
// prefix: the only reply-to a worker honours, so a task message cannot
// make a worker publish results into any other queue.
func (n Names) isReplyQueue(q string) bool {
	name, ok := strings.CutPrefix(q, n.Replies+".")
	return ok && prefixRE.MatchString(name)
}

// redactURL drops the password from an AMQP URL for messages.
func redactURL(u string) string {
	at := strings.LastIndex(u, "@")
	scheme := strings.Index(u, "://")
	if at < 0 || scheme < 0 || at < scheme {
		return u
	}
	return u[:scheme+3] + "***" + u[at:]
}
