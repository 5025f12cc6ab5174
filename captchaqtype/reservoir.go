package captchaqtype

import (
	"math"
	"time"
)

// ReservoirConfig declares a reservoir (Config.Reservoirs).
type ReservoirConfig struct {
	// Name names it in refill task ids ("reservoir-NAME-…"), counts and
	// the Store: 1 to 64 letters, digits, '-' or '_'. Required, unique.
	Name string
	// Task is the captcha it holds tokens of: its Method and Params (and
	// Proxy, ProxyType), the task's solving params, which a submitted
	// task must match exactly (Task.Fingerprint) to draw. Its other
	// fields are not used: refills get ids of their own and the lowest
	// priority, PriorityLowest.
	Task Task
	// Size fixes how many tokens it holds in stock and in flight; 0
	// sizes it from the demand it sees. Max bounds them: default
	// ReservoirMaxDefault, at least Size.
	Size, Max int
	// MinLife is the least life a token handed out has left; tokens
	// with less are dropped, counted as expired unused. Default the
	// type's token lifetime / reservoir.MinLifeShare (Turnstile: 75 s).
	MinLife time.Duration
	// Clients are the tenants (Task.Tenant) whose tasks draw from it;
	// empty: every tenant's.
	Clients []string
}

// ReservoirMaxDefault is ReservoirConfig.Max's default.
const ReservoirMaxDefault = 100

// ReservoirShareDefault is Config.ReservoirShare's default: refills take
// at most a quarter of the plan's threads.
const ReservoirShareDefault = 0.25

// PriorityLowest is the largest Priority every Store keeps: the priority
// of reservoir refills, which a client's task always goes before.
const PriorityLowest = math.MaxInt32

// ReservoirCounts are one reservoir's numbers at one moment
// (Queue.Reservoirs).
type ReservoirCounts struct {
	Name string
	// Target is what it holds in stock and in flight; Stock the tokens
	// that may be handed out, as the Store counted them within the
	// second; InFlight the refills queued or solving.
	Target, Stock, InFlight int
	// Hits and Misses count the tasks that matched it: a hit took a
	// token, a miss is an ordinary task.
	Hits, Misses int64
	// TimeToToken is from a matching task's submit to its answer, hits
	// (about 0) and misses alike, over the latest.
	TimeToTokenP50, TimeToTokenP99 time.Duration
	// Solved counts refills solved, HandedOut tokens handed out, Expired
	// tokens aged out unused, Failed refills that failed.
	Solved, HandedOut, Expired, Failed int64
}
