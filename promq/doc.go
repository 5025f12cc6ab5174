// Package promq exposes a Queue's Metrics to Prometheus.
//
// A Collector reads the snapshot at scrape time, so the series are the
// queue's own counts, never a second tally that could drift:
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(promq.NewCollector(q))
//	http.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// The series (`captchaq serve` and `captchaq worker` expose the same ones,
// next to their own):
//
//	captchaq_tasks_submitted_total             counter  tasks taken into the queue
//	captchaq_tasks_solved_total                counter  tasks solved
//	captchaq_tasks_failed_total                counter  tasks failed for good
//	captchaq_retries_total{reason}             counter  attempts sent back to the queue, by the provider's code (or NETWORK)
//	captchaq_provider_requests_total           counter  HTTP requests to the provider (0 unless the Provider counts them)
//	captchaq_threads_plan                      gauge    the plan's threads
//	captchaq_threads_window                    gauge    threads the queue may use now (fewer after "no free thread")
//	captchaq_threads_in_use                    gauge    threads taken: tasks at the provider or being submitted
//	captchaq_queue_depth{priority}             gauge    tasks waiting for a thread
//	captchaq_oldest_waiting_seconds            gauge    the longest wait among them
//	captchaq_delivery_delay_p50_seconds        gauge    how long answers sat ready before delivery: median of the last 1024
//	captchaq_delivery_delay_p99_seconds        gauge    the same, 99th percentile
//	captchaq_paused                            gauge    1 while an account error stops all sending
//	captchaq_provider_type_refused{provider,method}  gauge  1 while the provider refuses the type (Config.RefusalHold)
//
// A queue of several providers (Config.Providers) adds, per provider:
//
//	captchaq_provider_tasks_solved_total{provider}  counter  tasks solved there
//	captchaq_provider_tasks_failed_total{provider}  counter  tasks failed for good, by their last attempt's provider
//	captchaq_provider_tasks_moved_total{provider}   counter  tasks in flight there when it could not be polled, sent elsewhere
//	captchaq_provider_spend_total{provider}         counter  what its solves cost (delivered or abandoned)
//	captchaq_provider_spend_last_hour{provider}     gauge    what it accepted in the last hour (against max_spend_per_hour)
//	captchaq_provider_cost_per_1000{provider}       gauge    spend per 1,000 tokens solved there
//	captchaq_provider_healthy{provider}             gauge    1 while it is in routing (not down, not paused)
//	captchaq_provider_threads{provider}             gauge    its threads
//	captchaq_provider_threads_in_use{provider}      gauge    its threads taken
//
// Ratios are left to PromQL, where they can take a window: success is
// solved / (solved + failed), throughput rate(captchaq_tasks_solved_total[5m]),
// requests per solved task the ratio of the two counters' rates.
//
// A priority once seen keeps its captchaq_queue_depth series (at 0 when
// nothing waits), and the default priority's series is always there, so
// graphs and alerts see an empty queue as 0, not as no data.
package promq
