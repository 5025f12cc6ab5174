package server

import (
	"time"

	"github.com/captchaq/captchaq"
)

// StatsMetrics is the queue's captchaq.Metrics as GET /v1/stats writes
// them, in the API's one naming convention (snake_case).
type StatsMetrics struct {
	Submitted            int64            `json:"submitted"`
	Solved               int64            `json:"solved"`
	Failed               int64            `json:"failed"`
	Retries              int64            `json:"retries"`
	RetriesByReason      map[string]int64 `json:"retries_by_reason"`
	Renewed              int64            `json:"renewed"`
	Resumed              int64            `json:"resumed"`
	ResumedInFlight      int64            `json:"resumed_in_flight"`
	AvgSolveSeconds      float64          `json:"avg_solve_seconds"`
	SuccessRate          float64          `json:"success_rate"`
	ThroughputPerMin     float64          `json:"throughput_per_min"`
	ThreadsInUse         int              `json:"threads_in_use"`
	Window               int              `json:"window"`
	Threads              int              `json:"threads"`
	QueueDepth           int              `json:"queue_depth"`
	DepthByPriority      map[int]int      `json:"depth_by_priority"`
	OldestWaitingSeconds float64          `json:"oldest_waiting_seconds"`
	Requests             int64            `json:"requests"`
	RequestsPerSolved    float64          `json:"requests_per_solved"`
	DeliveryDelayP50     float64          `json:"delivery_delay_p50"`
	DeliveryDelayP99     float64          `json:"delivery_delay_p99"`
	Paused               bool             `json:"paused"`
	PausedReason         string           `json:"paused_reason,omitempty"`
	StartedAt            string           `json:"started_at,omitempty"`
	Providers            []StatsProvider  `json:"providers"`
}

// StatsProvider is one provider's captchaq.ProviderMetrics in /v1/stats.
type StatsProvider struct {
	Name            string  `json:"name,omitempty"`
	Threads         int     `json:"threads"`
	ThreadsInUse    int     `json:"threads_in_use"`
	Window          int     `json:"window"`
	Submitted       int64   `json:"submitted"`
	Solved          int64   `json:"solved"`
	Failed          int64   `json:"failed"`
	Moved           int64   `json:"moved"`
	Spend           float64 `json:"spend"`
	SpendLastHour   float64 `json:"spend_last_hour"`
	MaxSpendPerHour float64 `json:"max_spend_per_hour"`
	CostPer1000     float64 `json:"cost_per_1000"`
	Healthy         bool    `json:"healthy"`
	Down            bool    `json:"down"`
	Paused          bool    `json:"paused"`
	// FailingSince (RFC 3339, absent while it answers), Failures,
	// LastFailure and EverAnswered: whether the provider can be reached
	// (captchaq.ProviderMetrics). LastFailure names its URL: /v1/stats
	// shows the metrics to admin clients only.
	FailingSince          string `json:"failing_since,omitempty"`
	Failures              int    `json:"failures"`
	LastFailure           string `json:"last_failure,omitempty"`
	EverAnswered          bool   `json:"ever_answered"`
	EarlyPingbacksDropped int64  `json:"early_pingbacks_dropped"`
	// Refused are the types the provider refuses (captchaq.TypeRefusal):
	// their tasks go elsewhere until a probe after Until (RFC 3339).
	Refused []StatsRefusal `json:"refused,omitempty"`
	// Reports are what came of the clients' reports forwarded to it.
	Reports ReportCounts `json:"reports"`
}

// StatsRefusal is a provider's refusal of a type in /v1/stats.
type StatsRefusal struct {
	Method string `json:"method"`
	Code   string `json:"code"`
	Since  string `json:"since"`
	Until  string `json:"until"`
}

// statsMetrics converts m.
func statsMetrics(m captchaq.Metrics) *StatsMetrics {
	s := &StatsMetrics{
		Submitted: m.Submitted, Solved: m.Solved, Failed: m.Failed, Retries: m.Retries,
		RetriesByReason: m.RetriesByReason, Renewed: m.Renewed,
		Resumed: m.Resumed, ResumedInFlight: m.ResumedInFlight,
		AvgSolveSeconds: m.AvgSolveSeconds, SuccessRate: m.SuccessRate, ThroughputPerMin: m.ThroughputPerMin,
		ThreadsInUse: m.ThreadsInUse, Window: m.Window, Threads: m.Threads,
		QueueDepth: m.QueueDepth, DepthByPriority: m.DepthByPriority, OldestWaitingSeconds: m.OldestWaitingSeconds,
		Requests: m.Requests, RequestsPerSolved: m.RequestsPerSolved,
		DeliveryDelayP50: m.DeliveryDelayP50, DeliveryDelayP99: m.DeliveryDelayP99,
		Paused: m.Paused, PausedReason: m.PausedReason,
		Providers: []StatsProvider{},
	}
	if !m.StartedAt.IsZero() {
		s.StartedAt = m.StartedAt.UTC().Format(time.RFC3339Nano)
	}
	for _, p := range m.Providers {
		sp := StatsProvider{Name: p.Name, Threads: p.Threads, ThreadsInUse: p.ThreadsInUse,
			Window: p.Window, Submitted: p.Submitted, Solved: p.Solved, Failed: p.Failed, Moved: p.Moved,
			Spend: p.Spend, SpendLastHour: p.SpendLastHour, MaxSpendPerHour: p.MaxSpendPerHour,
			CostPer1000: p.CostPer1000, Healthy: p.Healthy, Down: p.Down, Paused: p.Paused,
			Failures: p.Failures, LastFailure: p.LastFailure, EverAnswered: p.EverAnswered,
			EarlyPingbacksDropped: p.EarlyPingbacksDropped}
		if !p.FailingSince.IsZero() {
			sp.FailingSince = p.FailingSince.UTC().Format(time.RFC3339Nano)
		}
		for _, r := range p.Refused {
			sp.Refused = append(sp.Refused, StatsRefusal{Method: r.Method, Code: r.Code,
				Since: r.Since.UTC().Format(time.RFC3339), Until: r.Until.UTC().Format(time.RFC3339)})
		}
		s.Providers = append(s.Providers, sp)
	}
	return s
}
