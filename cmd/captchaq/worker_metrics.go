package main

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/captchaq/captchaq/amqp"
	"github.com/captchaq/captchaq/promq"
)

// metricsHandler serves /metrics for one worker: its queue's series, the
// tasks it holds on the broker and, with shared threads, the fleet's pool.
func metricsHandler(w *amqp.Worker) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(workerRegistry(w.Queue(), w.Held, w.Threads), promhttp.HandlerOpts{}))
	return mux
}

// workerRegistry holds a worker's series: its queue's (from src), the
// tasks it holds (from held) and, when threads says the worker shares the
// fleet's pool, the pool's.
func workerRegistry(src promq.Source, held func() int, threads func() (held, plan, fleetInUse int, ok bool)) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(promq.NewCollector(src), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "captchaq_worker_tasks_held", Help: "Tasks this worker holds unfinished on the broker.",
	}, func() float64 { return float64(held()) }))
	if _, _, _, ok := threads(); ok {
		reg.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "captchaq_worker_threads_held", Help: "Threads of the fleet's plan this worker holds.",
			}, func() float64 { h, _, _, _ := threads(); return float64(h) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "captchaq_fleet_threads_plan", Help: "The plan's threads, shared by every worker on the prefix.",
			}, func() float64 { _, p, _, _ := threads(); return float64(p) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "captchaq_fleet_threads_in_use", Help: "Threads of the plan the fleet's workers hold, read from the broker about once a second (-1 before the first read).",
			}, func() float64 { _, _, u, _ := threads(); return float64(u) }),
		)
	}
	return reg
}
