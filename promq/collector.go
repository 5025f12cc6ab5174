package promq

import (
	"maps"
	"slices"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/captchaq/captchaq"
)

// Source is what a Collector reads: a *captchaq.Queue, or anything that
// reports the same snapshot.
type Source interface {
	Metrics() captchaq.Metrics
}

// Collector is a prometheus.Collector of a Source's Metrics. Register it
// once per registry; it is safe for concurrent scrapes.
type Collector struct {
	src Source

	submitted, solved, failed, retries, requests                   *prometheus.Desc
	plan, window, inUse, depth, oldest, delayP50, delayP99, paused *prometheus.Desc

	// Per provider, for a queue of several (Config.Providers).
	pvSolved, pvFailed, pvMoved, pvSpend, pvSpendHour, pvCost, pvHealthy, pvThreads, pvInUse *prometheus.Desc
	// Per provider, for a queue of one too (its provider label empty).
	earlyDropped *prometheus.Desc
	typeRefused  *prometheus.Desc

	mu         sync.Mutex
	priorities map[int]struct{} // every priority seen waiting
}

// NewCollector returns a Collector of src's Metrics.
func NewCollector(src Source) *Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("captchaq_"+name, help, labels, nil)
	}
	return &Collector{
		src:        src,
		submitted:  d("tasks_submitted_total", "Tasks taken into the queue."),
		solved:     d("tasks_solved_total", "Tasks solved."),
		failed:     d("tasks_failed_total", "Tasks failed for good."),
		retries:    d("retries_total", "Attempts sent back to the queue, by the provider's code (or NETWORK).", "reason"),
		requests:   d("provider_requests_total", "HTTP requests to the provider."),
		plan:       d("threads_plan", "The plan's threads."),
		window:     d("threads_window", "Threads the queue may use now: the plan's unless the provider said no free thread lately."),
		inUse:      d("threads_in_use", "Threads taken: tasks at the provider or being submitted."),
		depth:      d("queue_depth", "Tasks waiting for a thread, by priority.", "priority"),
		oldest:     d("oldest_waiting_seconds", "The longest wait among tasks waiting for a thread."),
		delayP50:   d("delivery_delay_p50_seconds", "How long answers sat ready at the provider before delivery, median of the last 1024."),
		delayP99:   d("delivery_delay_p99_seconds", "How long answers sat ready at the provider before delivery, 99th percentile of the last 1024."),
		paused:     d("paused", "1 while an account error stops all sending."),
		priorities: map[int]struct{}{captchaq.PriorityDefault: {}},

		pvSolved:    d("provider_tasks_solved_total", "Tasks solved, by provider.", "provider"),
		pvFailed:    d("provider_tasks_failed_total", "Tasks failed for good, by the provider of their last attempt.", "provider"),
		pvMoved:     d("provider_tasks_moved_total", "Tasks in flight at a provider that could not be polled, submitted to another.", "provider"),
		pvSpend:     d("provider_spend_total", "What the provider's solves cost (delivered or abandoned), in its price's currency.", "provider"),
		pvSpendHour: d("provider_spend_last_hour", "What the provider accepted in the last hour, against its max_spend_per_hour.", "provider"),
		pvCost:      d("provider_cost_per_1000", "Spend per 1,000 tokens solved by the provider.", "provider"),
		pvHealthy:   d("provider_healthy", "1 while the provider is in routing (not down, not paused).", "provider"),
		pvThreads:   d("provider_threads", "The provider's threads.", "provider"),
		pvInUse:     d("provider_threads_in_use", "The provider's threads taken.", "provider"),

		earlyDropped: d("early_pingbacks_dropped_total", "Pingbacks for ids not yet checkpointed, dropped after 10 s or past 256 kept, by provider.", "provider"),
		typeRefused:  d("provider_type_refused", "1 while the provider refuses a type: its tasks go to other providers until a probe is accepted.", "provider", "method"),
	}
}

// Describe sends every series' description.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.submitted, c.solved, c.failed, c.retries, c.requests,
		c.plan, c.window, c.inUse, c.depth, c.oldest, c.delayP50, c.delayP99, c.paused,
		c.pvSolved, c.pvFailed, c.pvMoved, c.pvSpend, c.pvSpendHour, c.pvCost, c.pvHealthy, c.pvThreads, c.pvInUse, c.earlyDropped, c.typeRefused} {
		ch <- d
	}
}

// Collect reads one snapshot and sends every series from it.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	m := c.src.Metrics()
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter(c.submitted, m.Submitted)
	counter(c.solved, m.Solved)
	counter(c.failed, m.Failed)
	for reason, n := range m.RetriesByReason {
		counter(c.retries, n, reason)
	}
	counter(c.requests, m.Requests)
	gauge(c.plan, float64(m.Threads))
	gauge(c.window, float64(m.Window))
	gauge(c.inUse, float64(m.ThreadsInUse))
	for _, p := range c.seen(m.DepthByPriority) {
		gauge(c.depth, float64(m.DepthByPriority[p]), strconv.Itoa(p))
	}
	gauge(c.oldest, m.OldestWaitingSeconds)
	gauge(c.delayP50, m.DeliveryDelayP50)
	gauge(c.delayP99, m.DeliveryDelayP99)
	paused := 0.0
	if m.Paused {
		paused = 1
	}
	gauge(c.paused, paused)
	for _, p := range m.Providers {
		counter(c.earlyDropped, p.EarlyPingbacksDropped, p.Name)
		for _, r := range p.Refused {
			gauge(c.typeRefused, 1, p.Name, r.Method)
		}
		if p.Name == "" {
			continue // one provider: the series above are its own
		}
		counter(c.pvSolved, p.Solved, p.Name)
		counter(c.pvFailed, p.Failed, p.Name)
		counter(c.pvMoved, p.Moved, p.Name)
		ch <- prometheus.MustNewConstMetric(c.pvSpend, prometheus.CounterValue, p.Spend, p.Name)
		gauge(c.pvSpendHour, p.SpendLastHour, p.Name)
		gauge(c.pvCost, p.CostPer1000, p.Name)
		healthy := 0.0
		if p.Healthy {
			healthy = 1
		}
		gauge(c.pvHealthy, healthy, p.Name)
		gauge(c.pvThreads, float64(p.Threads), p.Name)
		gauge(c.pvInUse, float64(p.ThreadsInUse), p.Name)
	}
}

// seen adds depth's priorities to the ones seen before and returns them all.
func (c *Collector) seen(depth map[int]int) []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for p := range depth {
		c.priorities[p] = struct{}{}
	}
	return slices.Sorted(maps.Keys(c.priorities))
}
