// Package server is captchaq's HTTP service: a drop-in front that speaks
// the provider's in.php/res.php protocol, a JSON API, Prometheus metrics,
// health checks and a live dashboard, all in front of one Backend: a
// Queue the server builds from Config.Queue, which solves the tasks here,
// or Config.Backend, such as an amqp.Gateway, which publishes them to a
// RabbitMQ fleet and answers from the results the workers send back. The
// handlers are the same for both.
//
// Routes:
//
//	/in.php, /res.php             the provider's protocol, with the clients' own keys
//	POST   /v1/tasks              one task object or an array (captchaq.Task JSON)
//	GET    /v1/tasks/{id}         record and result; ?wait=30s long-polls
//	DELETE /v1/tasks/{id}         cancel a queued task
//	GET    /v1/events             server-sent events: the caller's results
//	GET    /v1/stats              queue metrics and per-client counts
//	GET    /v1/history            the dashboard's charts: the last hour, sampled (admin)
//	GET    /v1/deadletters        failed tasks
//	POST   /v1/deadletters/replay {"ids":[…]} or {"all":true}: queue them again
//	/pingback                     the provider's pingback (with Config.PublicURL)
//	/metrics, /healthz, /readyz   Prometheus, liveness, readiness
//	/                             the dashboard (needs an admin key)
//
// Clients and tenants: every client of the clients file is a tenant of the
// queue with its weight. A task's id in the Store is "<client>/<id>", so a
// client only ever sees its own tasks; the ids it sends and receives are
// the part after the slash. in.php answers numeric ids.
//
// Decisions a client can observe:
//
//   - getbalance answers the provider account's balance (cached for
//     BalanceCacheDefault); the provider key itself never leaves the server.
//   - reportbad/reportgood are checked (the id must be the caller's finished
//     task) and recorded in the captchaq_reports_total metric; they are not
//     forwarded, since the provider's id is gone once a task is final.
//   - Protocol errors on the front are HTTP 200 with the provider's codes,
//     as the provider does; the JSON API uses HTTP status codes.
//   - Request bodies are limited to Config.MaxBodyBytes (8 MiB by default):
//     in.php answers ERROR_TOO_BIG_CAPTCHA_FILESIZE, the API 413.
//   - A client's rate (tasks per second) and max_inflight (unfinished
//     tasks) bound submits only: in.php answers MAX_USER_TURN and
//     ERROR_NO_SLOT_AVAILABLE, the API 429 with Retry-After. A queue full
//     past Config.SubmitWait answers ERROR_NO_SLOT_AVAILABLE / 503; the
//     503 of an array says how many of its new tasks were accepted before.
//   - The tasks of an array go to the queue in one call, stored together
//     (one commit on the SQLite store).
//   - The dashboard and the admin views (every client's tasks, dead
//     letters and counts) need a client with "admin": true.
//
// With an amqp.Gateway as Backend (captchaq serve --amqp) the same holds,
// with these differences a client can observe:
//
//   - A task is published to the fleet and recorded before in.php answers
//     OK|id or the API 202 (status "queued": accepted); GET shows it
//     "inflight" from then on (at the fleet, waiting for a worker or being
//     solved).
//   - Priorities go to the broker as AMQP priorities. Fair share among
//     clients is by demotion: a client past its share of unfinished tasks
//     has its next ones published one level lower (see amqp.Gateway).
//   - DELETE answers every unfinished task CANCELED at once, but the
//     message cannot be taken back: a worker may still solve it (the
//     thread is billed) and that answer is dropped.
//   - getbalance answers ERROR_BAD_PARAMETERS: the provider key is the
//     workers', the gateway has none.
//   - /v1/stats and /metrics count what this gateway accepted and
//     received; threads are the workers' (zero here); "broker" and
//     captchaq_broker_queue_ready add the broker's queue depths.
package server
