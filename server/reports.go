package server

import (
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/captchaq/captchaq"
)

// ReportOutcomer is a Backend whose reports are forwarded elsewhere and
// answered later (amqp.Gateway: a worker forwards each one and answers
// what came of it). New calls AttachReports; the server counts a
// report's outcome when it comes, as Config.Report returning nil only
// says the report is on its way.
type ReportOutcomer interface {
	AttachReports(onOutcome func(captchaq.ReportOutcome)) error
}

// ReportCounts are what came of clients' reports (captchaq.ReportOutcomes)
// in /v1/stats: Sent is Accepted + Refused + Failed (the provider was
// called), RefusedByCode the refusals by the provider's error code.
type ReportCounts struct {
	Sent          int64            `json:"sent"`
	Accepted      int64            `json:"accepted"`
	Refused       int64            `json:"refused"`
	RefusedByCode map[string]int64 `json:"refused_by_code,omitempty"`
	Failed        int64            `json:"failed"`
	TooLate       int64            `json:"too_late"`
	NotSent       int64            `json:"not_sent"`
}

func (c *ReportCounts) add(outcome, code string) {
	switch outcome {
	case captchaq.ReportAccepted:
		c.Accepted++
	case captchaq.ReportRefused:
		c.Refused++
		if c.RefusedByCode == nil {
			c.RefusedByCode = map[string]int64{}
		}
		c.RefusedByCode[code]++
	case captchaq.ReportFailed:
		c.Failed++
	case captchaq.ReportTooLate:
		c.TooLate++
	default:
		c.NotSent++
	}
	c.Sent = c.Accepted + c.Refused + c.Failed
}

// clone is c with its own map.
func (c ReportCounts) clone() ReportCounts {
	if c.RefusedByCode != nil {
		c.RefusedByCode = maps.Clone(c.RefusedByCode)
	}
	return c
}

// reportTally counts what came of reports, per provider and per client,
// and in captchaq_report_outcomes_total{provider,report,outcome}: the
// providers are the configured ones and outcomes the five of
// captchaq.ReportOutcomes, so the series stay few; the refusals' codes
// are in /v1/stats only. The clients' counts reach /metrics through
// clientCollector (captchaq_client_reports_total{client,outcome}).
type reportTally struct {
	outcomes *prometheus.CounterVec

	mu         sync.Mutex
	byProvider map[string]*ReportCounts
	byClient   map[string]*ReportCounts
}

func newReportTally() *reportTally {
	return &reportTally{
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "captchaq_report_outcomes_total",
			Help: "What came of the reports forwarded to providers, by provider, report (good, bad) and outcome.",
		}, []string{"provider", "report", "outcome"}),
		byProvider: map[string]*ReportCounts{}, byClient: map[string]*ReportCounts{},
	}
}

// add counts o, a report of client's.
func (t *reportTally) add(client string, o captchaq.ReportOutcome) {
	verdict := captchaq.ReportBad
	if o.Good {
		verdict = captchaq.ReportGood
	}
	t.outcomes.WithLabelValues(o.Provider, verdict, o.Outcome).Inc()
	t.mu.Lock()
	defer t.mu.Unlock()
	countIn(t.byProvider, o.Provider).add(o.Outcome, o.Code)
	countIn(t.byClient, client).add(o.Outcome, o.Code)
}

// countIn is m's counts of name, made when there are none.
func countIn(m map[string]*ReportCounts, name string) *ReportCounts {
	c := m[name]
	if c == nil {
		c = &ReportCounts{}
		m[name] = c
	}
	return c
}

// client is client's counts.
func (t *reportTally) client(name string) ReportCounts {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c := t.byClient[name]; c != nil {
		return c.clone()
	}
	return ReportCounts{}
}

// providers are the counts of each provider reported to, by name.
func (t *reportTally) providers() map[string]ReportCounts {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]ReportCounts, len(t.byProvider))
	for name, c := range t.byProvider {
		out[name] = c.clone()
	}
	return out
}

// reportOutcome counts a report's outcome that its Backend answered
// (ReportOutcomer): its client is the task's tenant, the Store id's first
// part.
func (s *Server) reportOutcome(o captchaq.ReportOutcome) {
	client, _, _ := strings.Cut(o.Task, "/")
	if s.clients.byName[client] == nil {
		client = ""
	}
	s.reports.add(client, o)
}

// withReports sets each provider's reports in st, adding a provider that
// st does not list (a gateway lists none) by its name alone.
func withReports(st *StatsMetrics, counts map[string]ReportCounts) {
	for i := range st.Providers {
		if c, ok := counts[st.Providers[i].Name]; ok {
			st.Providers[i].Reports = c
			delete(counts, st.Providers[i].Name)
		}
	}
	names := slices.Sorted(maps.Keys(counts))
	for _, name := range names {
		st.Providers = append(st.Providers, StatsProvider{Name: name, Reports: counts[name]})
	}
}
