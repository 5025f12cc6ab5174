package server

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/captchaq/captchaq"
)

// clientCollector reads the clients' counts at scrape time; the queue's
// own series come from promq, registered beside it.
type clientCollector struct {
	s *Server

	inflight, solved, failed *prometheus.Desc
	reports                  *prometheus.Desc // by client and outcome (reportTally)
}

func newClientCollector(s *Server) *clientCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("captchaq_client_"+name, help, []string{"client"}, nil)
	}
	return &clientCollector{
		s:        s,
		inflight: d("tasks_inflight", "Unfinished tasks per client."),
		solved:   d("tasks_solved_total", "Tasks solved per client."),
		failed:   d("tasks_failed_total", "Tasks failed for good per client."),
		reports: prometheus.NewDesc("captchaq_client_reports_total",
			"What came of each client's reports, by outcome.", []string{"client", "outcome"}, nil),
	}
}

func (c *clientCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.inflight
	ch <- c.solved
	ch <- c.failed
	ch <- c.reports
}

func (c *clientCollector) Collect(ch chan<- prometheus.Metric) {
	for _, cl := range c.s.cfg.Clients {
		cs := c.s.clients.byName[cl.Name]
		cs.mu.Lock()
		inflight, solved, failed := len(cs.inflight), cs.solved, cs.failed
		cs.mu.Unlock()
		ch <- prometheus.MustNewConstMetric(c.inflight, prometheus.GaugeValue, float64(inflight), cl.Name)
		ch <- prometheus.MustNewConstMetric(c.solved, prometheus.CounterValue, float64(solved), cl.Name)
		ch <- prometheus.MustNewConstMetric(c.failed, prometheus.CounterValue, float64(failed), cl.Name)
		r := c.s.reports.client(cl.Name)
		for outcome, n := range map[string]int64{captchaq.ReportAccepted: r.Accepted, captchaq.ReportRefused: r.Refused,
			captchaq.ReportFailed: r.Failed, captchaq.ReportTooLate: r.TooLate, captchaq.ReportNotSent: r.NotSent} {
			ch <- prometheus.MustNewConstMetric(c.reports, prometheus.CounterValue, float64(n), cl.Name, outcome)
		}
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
