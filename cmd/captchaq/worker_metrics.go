package main

import (
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/captchaq/captchaq/amqp"
)

// queueCollector exposes a worker's queue Metrics, read at scrape time.
type queueCollector struct {
	w *amqp.Worker

	submitted, solved, failed, retries, retriesBy, requests *prometheus.Desc
	inUse, window, threads, depth, oldest, held, reqPer     *prometheus.Desc
	delayP50, delayP99, paused                              *prometheus.Desc
}

func newQueueCollector(w *amqp.Worker) *queueCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("captchaq_"+name, help, labels, nil)
	}
	return &queueCollector{
		w:         w,
		submitted: d("tasks_submitted_total", "Tasks taken into the queue."),
		solved:    d("tasks_solved_total", "Tasks solved."),
		failed:    d("tasks_failed_total", "Tasks failed (and dead-lettered)."),
		retries:   d("retries_total", "Attempts sent back to the queue."),
		retriesBy: d("retries_by_reason_total", "Retries by the provider's code.", "reason"),
		requests:  d("provider_requests_total", "HTTP requests to the provider."),
		inUse:     d("threads_in_use", "Threads taken: tasks at the provider or being submitted."),
		window:    d("threads_window", "The AIMD window: threads this worker may use now."),
		threads:   d("threads", "The plan's thread count."),
		depth:     d("queue_depth", "Tasks waiting for a thread.", "priority"),
		oldest:    d("oldest_waiting_seconds", "The longest wait among tasks waiting for a thread."),
		held:      d("tasks_held", "Tasks this worker holds unfinished on the broker."),
		reqPer:    d("requests_per_solved", "Provider requests per solved task."),
		delayP50:  d("delivery_delay_p50_seconds", "How long answers sat ready before delivery, median."),
		delayP99:  d("delivery_delay_p99_seconds", "How long answers sat ready before delivery, 99th percentile."),
		paused:    d("paused", "1 while an account error pauses all sending."),
	}
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.submitted, c.solved, c.failed, c.retries, c.retriesBy, c.requests,
		c.inUse, c.window, c.threads, c.depth, c.oldest, c.held, c.reqPer, c.delayP50, c.delayP99, c.paused} {
		ch <- d
	}
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.w.Queue().Metrics()
	counter := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, l...)
	}
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	counter(c.submitted, float64(m.Submitted))
	counter(c.solved, float64(m.Solved))
	counter(c.failed, float64(m.Failed))
	counter(c.retries, float64(m.Retries))
	for reason, n := range m.RetriesByReason {
		counter(c.retriesBy, float64(n), reason)
	}
	counter(c.requests, float64(m.Requests))
	gauge(c.inUse, float64(m.ThreadsInUse))
	gauge(c.window, float64(m.Window))
	gauge(c.threads, float64(m.Threads))
	for p, n := range m.DepthByPriority {
		gauge(c.depth, float64(n), strconv.Itoa(p))
	}
	gauge(c.oldest, m.OldestWaitingSeconds)
	gauge(c.held, float64(c.w.Held()))
	gauge(c.reqPer, m.RequestsPerSolved)
	gauge(c.delayP50, m.DeliveryDelayP50)
	gauge(c.delayP99, m.DeliveryDelayP99)
	p := 0.0
	if m.Paused {
		p = 1
	}
	gauge(c.paused, p)
}

// metricsHandler serves /metrics for one worker.
func metricsHandler(w *amqp.Worker) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(newQueueCollector(w))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux
}
