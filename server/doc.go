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
//	POST /createTask, /getTaskResult, /getBalance, /reportIncorrect…, /reportCorrect…
//	                              the JSON createTask protocol, the same tasks and keys
//	POST   /v1/tasks              one task object or an array (captchaq.Task JSON)
//	GET    /v1/tasks/{id}         record, result and its token's bindings; ?wait=30s long-polls
//	DELETE /v1/tasks/{id}         cancel a queued task
//	GET    /v1/events             server-sent events: the caller's results
//	GET    /v1/stats              queue metrics and per-client counts
//	GET    /v1/history            the dashboard's charts: the last hour, sampled (admin)
//	GET    /v1/reservoirs         the reservoirs, as declared, and their live numbers (admin)
//	GET    /v1/deadletters        failed tasks
//	POST   /v1/deadletters/replay {"ids":[…]} or {"all":true}: queue them again
//	/pingback/<secret>            each provider's pingbacks, by its own sig (with PublicURL)
//	/metrics, /healthz, /readyz   Prometheus, liveness, readiness
//	/                             the dashboard (needs an admin key)
//
// Clients and tenants: every client of the clients file is a tenant of the
// queue with its weight. A task's id in the Store is "<client>/<id>", so a
// client only ever sees its own tasks; the ids it sends and receives are
// the part after the slash. in.php answers numeric ids (the API gives
// one to a task without an id): a keyed permutation of a counter
// (idperm.go), unique without a lookup, telling a client nothing of the
// others' volume; 16 digits, below 2^53 (JavaScript reads createTask's
// taskId exactly). The counter starts at the clock, and an id that names
// a stored task of the client is skipped, so a restart with the clock
// behind never reuses one. A front's replicas take the counter in blocks
// from PostgreSQL and share one key kept there.
//
// Decisions a client can observe:
//
//   - An id names one task. POST /v1/tasks with a known id and the same
//     task (method, params, proxy; see captchaq.Task.Fingerprint) answers
//     202 with "existed": true and the task as it is; with another task it
//     answers 409 {"error": "…", "field": "id", "code": "ID_CONFLICT"}
//     naming what differs, and accepts none of the request's tasks. in.php
//     gives every task a new id, so it never conflicts.
//   - A dead token is never handed out. Past its result.expires_at, GET
//     /v1/tasks/{id} answers "expired": true with no token or answer,
//     res.php ERROR_TOKEN_EXPIRED. POSTed again, the task is solved again,
//     in front of a fleet (amqp.Gateway) too, under a wire id of a new
//     generation (workers answer a message id once).
//   - A task answered from a reservoir (captchaq.Config.Reservoirs): res.php
//     json=1 and getTaskResult add "reservoir" and "expires_at" (Unix s).
//   - getbalance answers the provider account's balance (cached for
//     BalanceCacheDefault); the provider key itself never leaves the server.
//     When it cannot be read now the answer is CodeBalanceUnknown
//     (ERROR_NO_SLOT_AVAILABLE, "try again later"), never a parameter one.
//   - reportbad/reportgood must name the caller's solved task and count
//     against its rate like a submit. A task is reported once: the first
//     report is stored with the task (Backend.RecordReport; "report" in
//     GET /v1/tasks/{id}), counted in captchaq_reports_total and forwarded
//     by its captcha id (Config.Report); a later one is answered
//     OK_REPORT_RECORDED and goes nowhere. A provider's refusal is answered
//     as it came, one that could not reach it is not sent again, and each
//     outcome is counted per provider and client (ReportCounts).
//   - in.php and res.php read the query string, urlencoded, multipart and
//     JSON-object bodies alike (internal/apiform), as the real services
//     do: a JSON object under any Content-Type, an urlencoded body with
//     none, chunked or not; a key in the query is checked before the body
//     is read; header_acao=1 adds Access-Control-Allow-Origin: *.
//   - The createTask protocol (2captcha API v2, Anti-Captcha, CapMonster
//     Cloud) is translated at the door: a task object becomes the in.php
//     method and params (provider/createtask.ParseTask) and takes in.php's
//     path from there; answers go back as the type's solution fields, and
//     either protocol reads the other's tasks. Errors are HTTP 200
//     {"errorId","errorCode","errorDescription"}, in.php's codes mapped
//     (docs/protocols.md). A callbackUrl gets getTaskResult's JSON through
//     the same guarded sender as an in.php pingback.
//   - Protocol errors on the front are HTTP 200 with the provider's codes,
//     as the provider does; the JSON API uses HTTP status codes. A task
//     refused by Backend.Check (captchaq.Queue.Check; a gateway's
//     captchaq.Task.CheckFor) is 400 with {"error", "code", "field"}:
//     code INVALID_TASK or UNSUPPORTED_TYPE, as in a Result.
//   - Request bodies are limited to Config.MaxBodyBytes (8 MiB by default):
//     in.php answers ERROR_TOO_BIG_CAPTCHA_FILESIZE, the API 413. Bodies
//     being read are counted as their bytes arrive (Config.MaxBodyInflight):
//     a client's take its own share first (MaxBodyPerClient), then a
//     shared pool; bodies whose key is only inside them take at most
//     MaxBodyPerAddress from one address out of a pool of their own,
//     within KeylessBodyTimeout (10 s). A body cut short is answered
//     ERROR_NO_SLOT_AVAILABLE or 429, with the reason, and its connection
//     closes.
//   - The server's Listener caps open connections at Config.MaxConns and
//     MaxConnsPerAddress (serve --max-conns, --max-conns-per-address): one
//     past either is closed as it is accepted.
//   - A client's rate (tasks per second) and max_inflight (unfinished
//     tasks) bound submits only: in.php answers MAX_USER_TURN and
//     ERROR_NO_SLOT_AVAILABLE, the API 429 with Retry-After. A queue full
//     past Config.SubmitWait answers ERROR_NO_SLOT_AVAILABLE / 503; the
//     503 of an array says how many of its new tasks were accepted before.
//   - Client values are clamped to the operator's limits, never refused:
//     a task's priority (5 when it names none) is moved into its client's
//     [priority_min, priority_max], and max_attempts lowered to
//     Config.MaxAttempts (a task naming none gets it). Priority is global
//     across clients; weights share threads among clients of one priority
//     only. A dead-letter replay counts against its owner's max_inflight
//     and rate like a submit (what does not fit is "held"; 429 when none
//     fit), one at a time and at most one per Config.ReplayEvery;
//     {"all":true} replays at most MaxTasksPerRequest ("more": true when
//     more wait), found by tenant in the Store without reading others'.
//   - The tasks of an array are stored together, in one call.
//   - A pingback is sent once, after its result is recorded (in front of
//     a fleet, after the result message is acked); in a Store that is a
//     captchaq.PingbackLedger it is owed until marked done, so one a
//     process died with is sent by another replica or the next start
//     (twice if it died between the receiver's answer and the mark).
//     Shutdown lets pingbacks finish until its context ends; the rest is
//     counted by outcome and logged with the task id (pingbackSender).
//   - The dashboard and the admin views (every client's tasks, dead
//     letters and counts) need a client with "admin": true.
//
// With an amqp.Gateway as Backend (captchaq serve --amqp) the same holds,
// with these differences a client can observe:
//
//   - A task is published to the fleet and recorded before in.php answers
//     OK|id or the API 202; GET shows it "inflight" from then on.
//     SubmitWait does not apply; a submit the broker or the store does not
//     finish within 30 s answers ERROR_NO_SLOT_AVAILABLE / 503.
//   - Priorities go to the broker as AMQP priorities. Fair share among
//     clients is by demotion: a client past its share of unfinished tasks
//     has its next ones published one level lower (see amqp.Gateway).
//   - DELETE answers every unfinished task CANCELED at once, but the
//     message cannot be taken back: a worker may still solve it (the
//     thread is billed) and that answer is dropped.
//   - getbalance answers the freshest balance a worker read (once a
//     minute) and sent in its status beat (amqp.Gateway.Balance), normally
//     under 65 s old; the newest is kept on the broker (PREFIX.balance)
//     for a gateway that starts; with none, it waits up to
//     amqp.BalanceWait, then answers CodeBalanceUnknown with the reason.
//   - reportbad/reportgood are answered OK_REPORT_RECORDED once the first
//     report is confirmed on the broker (PREFIX.reports); a worker
//     forwards it and answers its outcome (ReportOutcomer).
//   - A replay publishes the client's dead letters again from the
//     gateway's store (amqp.Gateway.Replay); it never reads the fleet's
//     dead-letter queue, which holds every gateway's and the fleet's dead
//     letters, so no client's replay takes, holds or delays another's or
//     the operator's (captchaq dlq). A task's copy there stays for the
//     operator.
//   - /v1/stats and /metrics count what this gateway accepted and
//     received; threads are the workers' (zero here); "broker" and
//     captchaq_broker_queue_ready add the broker's queue depths.
//
// # Threat model
//
// Who is trusted with what:
//   - The operator runs serve, worker and enqueue, holds the provider key,
//     the clients file and the machine: trusted with everything. Only the
//     operator's command line reads local files (a post task's image,
//     once, at intake, at most provider.MaxImageBytes). Other users of
//     the machine are not trusted: the SQLite store's files (tasks carry
//     their proxies' passwords) are created 0600, and serve names a
//     clients file or key file they can read, with the fix.
//   - An admin client sees every client's tasks, the whole-queue numbers,
//     /metrics and the dashboard; it cannot read files or reach the
//     network through the server. Its key is read from the Authorization
//     header only, never from a URL (histories, logs, Referer): the
//     dashboard asks for it in a form, / with ?key= answers 400, and
//     /v1/events refuses an admin key in ?key=. Every answer carries
//     Referrer-Policy: no-referrer, X-Frame-Options: DENY and a
//     Content-Security-Policy of the server's own origin only.
//   - Anyone who can connect is untrusted with the server's room: slow or
//     large bodies hold only the bytes that came, within their client's or
//     address's share (a keyless one for KeylessBodyTimeout); connections
//     are capped per address and overall; a client within its share is
//     never refused for another's bytes. A JSON body of over 10,000 fields
//     (64 a task of MaxTasksPerRequest), a string longer than a 600 KiB
//     image base64-encoded, or an image over the limit is refused before
//     it is decoded.
//   - A client is untrusted: its tasks are data. Nothing it repeats
//     reaches the provider twice (a report is forwarded once). No param
//     names a path; protocol names (key, method, json, soft_id, pingback,
//     header_acao) are refused in params in every spelling a provider's
//     form parser reads as one (provider.FoldParamName), and so is a param
//     given twice in two such spellings; images are capped at 600 KiB;
//     tasks per request, bodies, event streams and long polls are capped
//     (413/429); it sees only its own tasks, numbers and errors without
//     the provider's address. Its pingback may not reach loopback,
//     private, link-local, CGNAT or metadata addresses (checked on each
//     connect; Config.PingbackAllow names exceptions), carry user info or
//     follow redirects; each client's pingbacks queue apart. Every text of
//     a task is checked at the door for what the stores refuse (a NUL
//     byte, invalid UTF-8, an id over captchaq.MaxIDBytes), before
//     anything is published, submitted or paid for.
//   - A provider is trusted with the answers to its own tasks and the
//     provider key, not with the server's files, clients' keys or another
//     provider's tasks. Its pingback URL (/pingback/<secret>?provider=NAME
//     &sig=…) carries an HMAC-SHA256 of its name keyed per start, compared
//     in constant time: one naming another provider is refused with 403.
//     An answer for an id not yet checkpointed is kept 10 s, at most 256
//     a provider, then dropped (captchaq_early_pingbacks_dropped_total).
//   - The broker is trusted like the operator's machine: its messages are
//     still validated as client input (a post task with a path fails
//     alone, it is never opened).
//   - Pingback receivers are the clients': they get their own results
//     only, and nothing they answer is followed. A pingback URL may hold
//     the client's secret (in its path or query): logs show its scheme
//     and host only.
//   - Clients see nothing of each other's volume: ids are a keyed
//     permutation, not a count; the provider's captcha id (the operator's
//     account's) reaches an admin only, never a client's GET, event or
//     pingback.
//   - Secrets on disk: a clients file, provider key file or TLS key
//     (--tls-key, the local CA's ca-key.pem and key.pem) other users can
//     read is named at start with the fix (chmod 600). The local CA lives
//     90 days and is name-constrained to the hosts it serves, so its key
//     signs for no other site. serve --metrics-listen and worker
//     --metrics-addr off loopback (no key) are warned about at start.
//   - Errors a client (or /readyz) shows name no file, host or address of
//     the operator's: a store's or broker's failure is logged whole and
//     answered in plain words; a task's last_error and result hide URLs,
//     host:port and any /pingback/ path. PublicURL is checked at New (a
//     full http or https URL, no user, query or fragment).
//
// Each of these bounds has a test that runs the attack on real connections
// and asserts exact answers; docs/operating.md ("Hostile clients: what is
// measured") lists them.
//
// Known limits: behind a proxy every connection and keyless body comes
// from the proxy's address (raise MaxConnsPerAddress and
// MaxBodyPerAddress to what it carries); in front of a fleet a canceled
// task may still be solved and billed, and a gateway that stops with
// tasks published and not yet recorded drops their results.
//
// By endpoint, what the caller is trusted with:
//   - in.php, res.php and createTask: a client's key, in the query or the
//     body (a keyless body is anyone's until read); its own tasks,
//     balance and reports, within its rate.
//   - /v1/tasks, /v1/tasks/{id}, /v1/deadletters: a client's key in
//     Authorization; its own tasks and dead letters (an admin's: every
//     client's), within its share, rate and max_inflight.
//   - /v1/events: a client's key in Authorization or ?key= (never an
//     admin's there); its own results.
//   - /v1/stats, /v1/history: a client's own counts; an admin's the
//     whole queue's and the broker's depths. /v1/reservoirs: an admin's.
//   - /pingback/<secret>: a provider, by its own sig; its own tasks only.
//   - / and /metrics: an admin's key in Authorization; /healthz and
//     /readyz: anyone, in words that name no file or host.
//   - --metrics-listen, the clients file, the store and key files: the
//     operator alone.
package server
