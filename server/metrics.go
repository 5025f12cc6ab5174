package server

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// queueCollector reads Queue.Metrics at scrape time, so the numbers are
// the queue's own, never a second count that could drift.
type queueCollector struct {
	s *Server

	threadsInUse, window, threads, depth, oldest, paused *prometheus.Desc
	submitted, solved, failed, retries, requests         *prometheus.Desc
	reqPerSolved, delay, success, throughput, inflight   *prometheus.Desc
	clientDone                                           *prometheus.Desc
}

func newQueueCollector(s *Server) *queueCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("captchaq_"+name, help, labels, nil)
	}
	return &queueCollector{
		s:            s,
		threadsInUse: d("threads_in_use", "Plan threads taken: tasks at the provider or being submitted."),
		window:       d("threads_window", "The concurrency window (the plan's threads unless the provider said no free thread lately)."),
		threads:      d("threads_plan", "The plan's thread count."),
		depth:        d("queue_depth", "Tasks waiting for a thread, by priority.", "priority"),
		oldest:       d("oldest_waiting_seconds", "Age of the longest-waiting queued task."),
		paused:       d("paused", "1 while an account error pauses all sending."),
		submitted:    d("tasks_submitted_total", "Tasks accepted into the queue."),
		solved:       d("tasks_solved_total", "Tasks solved."),
		failed:       d("tasks_failed_total", "Tasks failed (dead letters)."),
		retries:      d("retries_total", "Attempts sent back to the queue, by reason.", "reason"),
		requests:     d("provider_requests_total", "HTTP requests to the provider."),
		reqPerSolved: d("requests_per_solved", "Provider requests per solved task."),
		delay:        d("delivery_delay_seconds", "How long answers sat ready at the provider before delivery (last 1024).", "quantile"),
		success:      d("success_ratio", "Solved over solved+failed."),
		throughput:   d("throughput_per_minute", "Solved tasks per minute since start."),
		inflight:     d("client_inflight", "Unfinished tasks per client.", "client"),
		clientDone:   d("client_tasks_total", "Finished tasks per client and status.", "client", "status"),
	}
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.threadsInUse, c.window, c.threads, c.depth, c.oldest, c.paused,
		c.submitted, c.solved, c.failed, c.retries, c.requests, c.reqPerSolved, c.delay, c.success,
		c.throughput, c.inflight, c.clientDone} {
		ch <- d
	}
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.s.backend.Metrics()
	g := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	n := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, l...)
	}
	g(c.threadsInUse, float64(m.ThreadsInUse))
	g(c.window, float64(m.Window))
	g(c.threads, float64(m.Threads))
	for p, k := range m.DepthByPriority {
		g(c.depth, float64(k), strconv.Itoa(p))
	}
	g(c.oldest, m.OldestWaitingSeconds)
	p := 0.0
	if m.Paused {
		p = 1
	}
	g(c.paused, p)
	n(c.submitted, float64(m.Submitted))
	n(c.solved, float64(m.Solved))
	n(c.failed, float64(m.Failed))
	for r, k := range m.RetriesByReason {
		n(c.retries, float64(k), r)
	}
	n(c.requests, float64(m.Requests))
	g(c.reqPerSolved, m.RequestsPerSolved)
	g(c.delay, m.DeliveryDelayP50, "0.5")
	g(c.delay, m.DeliveryDelayP99, "0.99")
	g(c.success, m.SuccessRate)
	g(c.throughput, m.ThroughputPerMin)
	for _, cl := range c.s.cfg.Clients {
		cs := c.s.byName[cl.Name]
		cs.mu.Lock()
		inflight, solved, failed := len(cs.inflight), cs.solved, cs.failed
		cs.mu.Unlock()
		g(c.inflight, float64(inflight), cl.Name)
		n(c.clientDone, float64(solved), cl.Name, "solved")
		n(c.clientDone, float64(failed), cl.Name, "failed")
	}
}

// brokerCollector reads a QueueDepther's broker queues at scrape time.
type brokerCollector struct {
	qd    QueueDepther
	ready *prometheus.Desc
}

func newBrokerCollector(qd QueueDepther) *brokerCollector {
	return &brokerCollector{qd: qd, ready: prometheus.NewDesc("captchaq_broker_queue_ready",
		"Messages ready in a broker queue (tasks waiting for a worker, this gateway's replies, dead letters).", []string{"queue"}, nil)}
}

func (c *brokerCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.ready }

// Collect reports nothing while the broker does not answer.
func (c *brokerCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), depthWait)
	defer cancel()
	depths, err := c.qd.QueueDepths(ctx)
	if err != nil {
		return
	}
	for q, n := range depths {
		ch <- prometheus.MustNewConstMetric(c.ready, prometheus.GaugeValue, float64(n), q)
	}
}

// httpMetrics counts the server's own requests by route and status.
type httpMetrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	reports  *prometheus.CounterVec
}

func newHTTPMetrics() *httpMetrics {
	return &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "captchaq_http_requests_total", Help: "Requests served, by route and HTTP status.",
		}, []string{"route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "captchaq_http_request_duration_seconds", Help: "Time in the handler, by route.",
			Buckets: []float64{.0001, .00025, .0005, .001, .002, .005, .01, .025, .1, .5, 1, 5},
		}, []string{"route"}),
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "captchaq_reports_total", Help: "reportbad/reportgood calls recorded, by report.",
		}, []string{"report"}),
	}
}

func (h *httpMetrics) Describe(ch chan<- *prometheus.Desc) {
	h.requests.Describe(ch)
	h.latency.Describe(ch)
}

func (h *httpMetrics) Collect(ch chan<- prometheus.Metric) {
	h.requests.Collect(ch)
	h.latency.Collect(ch)
}

// statusWriter remembers the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach Flush and deadlines.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// instrument counts and times a route. Long polls and event streams are
// counted but not timed (their time is the client's wait).
func (s *Server) instrument(route string, timed bool, h http.Handler) http.Handler {
	lat := s.metrics.latency.WithLabelValues(route)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		d := time.Since(start)
		if sw.code == 0 {
			sw.code = http.StatusOK
		}
		s.metrics.requests.WithLabelValues(route, strconv.Itoa(sw.code)).Inc()
		if timed && r.URL.Query().Get("wait") == "" {
			lat.Observe(d.Seconds())
			if s.cfg.ObserveRequest != nil {
				s.cfg.ObserveRequest(route, d)
			}
		}
	})
}
