package captchaqtype

import "time"

// Metrics is a snapshot of the queue's counters and state.
type Metrics struct {
	// Submitted counts tasks accepted into the queue; Solved and Failed
	// their final results; Retries the attempts that went back to the
	// queue, by the provider's code (or NETWORK) in RetriesByReason.
	Submitted, Solved, Failed, Retries int64
	RetriesByReason                    map[string]int64
	// Renewed counts known tasks submitted again whose stored token had
	// expired: they are solved again instead of answered from the Store.
	Renewed int64
	// Resumed counts the unfinished tasks taken over from the Store (left
	// by a run that stopped before they finished), at Start or by a Submit
	// of their id; ResumedInFlight those of them still at a provider,
	// polled by their stored captcha ids instead of submitted again.
	Resumed, ResumedInFlight int64
	// AvgSolveSeconds is over solved tasks; SuccessRate is Solved over
	// Solved+Failed; ThroughputPerMin is solved tasks per minute since
	// Start.
	AvgSolveSeconds, SuccessRate, ThroughputPerMin float64
	// ThreadsInUse are slots taken (tasks at the provider or being
	// submitted); Window is the AIMD window (Threads unless the provider
	// said no free thread lately); Threads is the plan's.
	ThreadsInUse, Window, Threads int
	// QueueDepth counts tasks waiting for a thread, by priority in
	// DepthByPriority; OldestWaitingSeconds is the longest wait among them.
	QueueDepth           int
	DepthByPriority      map[int]int
	OldestWaitingSeconds float64
	// Requests counts HTTP requests to the provider, when the Provider
	// reports them (interface{ Requests() int64 }).
	Requests          int64
	RequestsPerSolved float64
	// DeliveryDelayP50 and P99 estimate, in seconds, how long answers sat
	// ready at the provider before delivery (over the last 1024).
	DeliveryDelayP50, DeliveryDelayP99 float64
	// Paused is true while an account error stops all sending.
	Paused       bool
	PausedReason string
	StartedAt    time.Time
	// Providers has one entry per provider, in order of preference.
	Providers []ProviderMetrics
}

// ProviderMetrics is one provider's share of a queue's work.
type ProviderMetrics struct {
	// Name is ProviderConfig.Name; empty for Config.Provider.
	Name string
	// Threads, ThreadsInUse and Window are as in Metrics, for it alone.
	Threads, ThreadsInUse, Window int
	// Submitted counts submits it accepted; Solved and Failed the final
	// results of its last attempts; Moved the tasks in flight there
	// submitted elsewhere when it could not be polled.
	Submitted, Solved, Failed, Moved int64
	// Spend is the prices of its solves delivered or abandoned;
	// SpendLastHour what it accepted in the last hour, against
	// MaxSpendPerHour.
	Spend, SpendLastHour, MaxSpendPerHour float64
	// CostPer1000 is Spend per 1,000 solved tasks.
	CostPer1000 float64
	// Healthy: in routing (not down, not paused). Down: failing longer
	// than its DownAfter. Paused: an account error stops sending there.
	Healthy, Down, Paused bool
	// FailingSince is the first of the network errors, 5xx pages or
	// unreadable answers in a row it gave since it last answered (zero
	// while it answers); Failures counts them, LastFailure is the last
	// one's text (which names its URL and the cause: connection refused,
	// a DNS or TLS failure, a timeout, an HTTP status; never the key).
	// EverAnswered: it answered a request of this queue once.
	FailingSince time.Time
	Failures     int
	LastFailure  string
	EverAnswered bool
	// EarlyPingbacksDropped counts its pingbacks for ids not yet
	// checkpointed that were dropped: not checkpointed within 10 s, or
	// past the 256 kept at once (see PingbackHandler).
	EarlyPingbacksDropped int64
	// Refused are the types it refuses (Config.RefusalHold), by method.
	Refused []TypeRefusal
}

// TypeRefusal is a provider's refusal of a type: its tasks of Method (a
// route method) go elsewhere until Until, when the next one probes it.
// Code is the provider's answer; Since its first refusal since it last
// took the type.
type TypeRefusal struct {
	Method, Code string
	Since, Until time.Time
}
