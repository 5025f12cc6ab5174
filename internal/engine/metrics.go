package engine

import (
	"time"

	"github.com/captchaq/captchaq/captchaqtype"
	"github.com/captchaq/captchaq/internal/lane"
	"github.com/captchaq/captchaq/internal/pingback"
	"github.com/captchaq/captchaq/internal/tally"
)

// MetricsSources are what a queue's Metrics snapshot reads: its counters,
// its lanes and each one's pingback inbox (inboxes[i] is lane i's), the
// tasks waiting for a thread (Waiting reads them under the task table's
// lock) and the pause that stops all sending at now (Paused: nil when
// none does). They are read in that order.
type MetricsSources struct {
	Counts  *tally.Counters
	Lanes   []*lane.Lane
	Inboxes []*pingback.Inbox
	Waiting func() (depth int, w tally.Waiting)
	Paused  func(now time.Time) error
}

// Metrics is the queue's snapshot at now.
func Metrics(now time.Time, src MetricsSources) captchaqtype.Metrics {
	var reqs int64
	for _, l := range src.Lanes {
		if rc, ok := l.Provider().(interface{ Requests() int64 }); ok {
			reqs += rc.Requests()
		}
	}
	c := src.Counts.Counts(now)
	m := captchaqtype.Metrics{
		Submitted: c.Submitted, Solved: c.Solved, Failed: c.Failed, Retries: c.Retries, Renewed: c.Renewed,
		Resumed: c.Resumed, ResumedInFlight: c.ResumedInFlight, RetriesByReason: c.RetriesByReason,
		Requests: reqs, StartedAt: c.Started,
		AvgSolveSeconds: c.AvgSolveSeconds, SuccessRate: c.SuccessRate, ThroughputPerMin: c.ThroughputPerMin,
		DeliveryDelayP50: c.DelayP50, DeliveryDelayP99: c.DelayP99,
	}
	if c.Solved > 0 {
		m.RequestsPerSolved = float64(reqs) / float64(c.Solved)
	}
	depth, waiting := src.Waiting()
	m.QueueDepth = depth
	m.DepthByPriority, m.OldestWaitingSeconds = waiting.ByPriority, waiting.OldestSeconds(now)
	if p := src.Paused(now); p != nil {
		m.Paused, m.PausedReason = true, p.Error()
	}
	for i, l := range src.Lanes {
		pm := providerMetrics(now, l)
		_, pm.EarlyPingbacksDropped = src.Inboxes[i].Counts()
		m.ThreadsInUse += pm.ThreadsInUse
		m.Window += pm.Window
		m.Threads += pm.Threads
		m.Providers = append(m.Providers, pm)
	}
	return m
}

// providerMetrics is l's share of the snapshot at now.
func providerMetrics(now time.Time, l *lane.Lane) captchaqtype.ProviderMetrics {
	s := l.Stats(now)
	pm := captchaqtype.ProviderMetrics{
		Name: l.Name(), Threads: s.Threads, ThreadsInUse: s.InUse, Window: s.Window,
		Submitted: s.Submitted, Solved: s.Solved, Failed: s.Failed, Moved: s.Moved,
		Spend: s.Spend, SpendLastHour: s.SpendLastHour, MaxSpendPerHour: l.MaxSpendPerHour(),
		Down: s.Down, Paused: s.Paused,
	}
	pm.Healthy = !pm.Down && !pm.Paused
	for _, r := range l.Refusals.List() {
		pm.Refused = append(pm.Refused, captchaqtype.TypeRefusal{Method: r.Method, Code: r.Code, Since: r.Since, Until: r.Until})
	}
	r := l.Health.Reach()
	pm.FailingSince, pm.Failures, pm.LastFailure, pm.EverAnswered = r.FailingSince, r.Failures, r.LastFailure, r.EverAnswered
	if s.Solved > 0 {
		pm.CostPer1000 = s.Spend / float64(s.Solved) * 1000
	}
	return pm
}
