package captchaq

import (
	"github.com/captchaq/captchaq/internal/sched"
	"github.com/captchaq/captchaq/internal/tally"
)

// Metrics returns a snapshot.
func (q *Queue) Metrics() Metrics {
	now := q.now()
	var reqs int64
	for _, l := range q.lanes.Lanes() {
		if rc, ok := l.Provider().(interface{ Requests() int64 }); ok {
			reqs += rc.Requests()
		}
	}
	c := q.metrics.Counts(now)
	m := Metrics{
		Submitted: c.Submitted, Solved: c.Solved, Failed: c.Failed, Retries: c.Retries, Renewed: c.Renewed,
		Resumed: c.Resumed, ResumedInFlight: c.ResumedInFlight, RetriesByReason: c.RetriesByReason,
		Requests: reqs, StartedAt: c.Started,
		AvgSolveSeconds: c.AvgSolveSeconds, SuccessRate: c.SuccessRate, ThroughputPerMin: c.ThroughputPerMin,
		DeliveryDelayP50: c.DelayP50, DeliveryDelayP99: c.DelayP99,
	}
	if c.Solved > 0 {
		m.RequestsPerSolved = float64(reqs) / float64(c.Solved)
	}
	q.table.Do(func(tx table) {
		m.QueueDepth = tx.Waiting().Len()
		waiting := tally.NewWaiting()
		tx.Waiting().Each(func(it sched.Item[*taskState]) { waiting.Add(it.Priority, it.Enqueued) })
		m.DepthByPriority, m.OldestWaitingSeconds = waiting.ByPriority, waiting.OldestSeconds(now)
	})
	if p := q.pausedNow(now); p != nil {
		m.Paused, m.PausedReason = true, p.Error()
	}
	for i, l := range q.lanes.Lanes() {
		s := l.Stats(now)
		pm := ProviderMetrics{
			Name: l.Name(), Threads: s.Threads, ThreadsInUse: s.InUse, Window: s.Window,
			Submitted: s.Submitted, Solved: s.Solved, Failed: s.Failed, Moved: s.Moved,
			Spend: s.Spend, SpendLastHour: s.SpendLastHour, MaxSpendPerHour: l.MaxSpendPerHour(),
			Down: s.Down, Paused: s.Paused,
		}
		_, pm.EarlyPingbacksDropped = q.inboxes[i].Counts()
		pm.Healthy = !pm.Down && !pm.Paused
		for _, r := range l.Refusals.List() {
			pm.Refused = append(pm.Refused, TypeRefusal{Method: r.Method, Code: r.Code, Since: r.Since, Until: r.Until})
		}
		r := l.Health.Reach()
		pm.FailingSince, pm.Failures, pm.LastFailure, pm.EverAnswered = r.FailingSince, r.Failures, r.LastFailure, r.EverAnswered
		if s.Solved > 0 {
			pm.CostPer1000 = s.Spend / float64(s.Solved) * 1000
		}
		m.ThreadsInUse += pm.ThreadsInUse
		m.Window += pm.Window
		m.Threads += pm.Threads
		m.Providers = append(m.Providers, pm)
	}
	return m
}
