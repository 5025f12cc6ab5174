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
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(workerRegistry(w.Queue(), w.Held), promhttp.HandlerOpts{}))
	return mux
}

// workerRegistry holds a worker's series: its queue's (from src) and the
// tasks it holds (from held).
func workerRegistry(src promq.Source, held func() int) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(promq.NewCollector(src), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "captchaq_worker_tasks_held", Help: "Tasks this worker holds unfinished on the broker.",
	}, func() float64 { return float64(held()) }))
	return reg
}
