package main

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/captchaq/captchaq/amqp"
	"github.com/captchaq/captchaq/promq"
)

// metricsHandler serves /metrics for one worker: its queue's series and
// the tasks it holds on the broker.
func metricsHandler(w *amqp.Worker) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(promq.NewCollector(w.Queue()), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "captchaq_worker_tasks_held", Help: "Tasks this worker holds unfinished on the broker.",
	}, func() float64 { return float64(w.Held()) }))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux
}
