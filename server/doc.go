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
//	GET    /v1/tasks/{id}         record and result; ?wait=30s long-polls
//	DELETE /v1/tasks/{id}         cancel a queued task
//	GET    /v1/events             server-sent events: the caller's results
//	GET    /v1/stats              queue metrics and per-client counts
//	GET    /v1/history            the dashboard's charts: the last hour, sampled (admin)
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
// one to a task without an id). They are a keyed permutation of a counter
// (idperm.go): unique as the counter is, without a lookup, yet telling a
// client nothing of how many tasks the others submitted; 16 digits,
// below 2^53 (createTask's taskId is a JSON integer JavaScript reads
// exactly). The counter starts at the clock and the key is the process's,
// and an id that already names a stored task of the client is skipped, so
// a server restarted with its clock behind never hands a new task an old
// task's id (and with it the old answer). A front's replicas take the
// counter in blocks from PostgreSQL and share one key kept there.
//
// Decisions a client can observe:
//
//   - An id names one task. POST /v1/tasks with a known id and the same
//     task (method, params, proxy; see captchaq.Task.Fingerprint) answers
//     202 with "existed": true and the task as it is; with another task it
//     answers 409 {"error": "…", "field": "id", "code": "ID_CONFLICT"}
//     naming what differs, and accepts none of the request's tasks. in.php
//     gives every task a new id, so it never conflicts.
//   - A dead token is never handed out. Once a solved result has passed
//     its result.expires_at, GET /v1/tasks/{id} answers it with
//     "expired": true and no token or answer, and res.php answers
//     ERROR_TOKEN_EXPIRED. POST the same task again and it is solved again,
//     in front of a fleet (amqp.Gateway) too: the gateway publishes it
//     under a wire id of a new generation, as workers answer a message id
//     once.
//   - getbalance answers the provider account's balance (cached for
//     BalanceCacheDefault); the provider key itself never leaves the server.
//     When it cannot be read now the answer is CodeBalanceUnknown
//     (ERROR_NO_SLOT_AVAILABLE, "try again later"), never a parameter
//     error.
//   - reportbad/reportgood are checked (the id must be the caller's solved
//     task) and count against the client's rate like a submit
//     (MAX_USER_TURN past it). A task is reported once: the first report
//     is stored with the task (Backend.RecordReport, captchaq.Store.Report;
//     "report" in GET /v1/tasks/{id}), counted in captchaq_reports_total
//     and forwarded to the provider by its captcha id (Result.CaptchaID,
//     through Config.Report); a later one is answered OK_REPORT_RECORDED
//     and goes nowhere. A provider's refusal of the first
//     (ERROR_DUPLICATE_REPORT, …) is answered as it came; a report that
//     could not reach the provider stays recorded and is not sent again.
//   - in.php and res.php read the query string, urlencoded, multipart and
//     JSON-object bodies alike (internal/apiform, shared with the
//     simulator), as the real services read them: a JSON object under any
//     Content-Type (the npm client 2captcha sends text/plain), an
//     urlencoded body with none (puppeteer-extra-plugin-recaptcha), chunked
//     or not; a key in the query string is checked before the body is
//     read; header_acao=1 adds Access-Control-Allow-Origin: *, and OPTIONS
//     is answered as a CORS preflight.
//   - The createTask protocol (2captcha API v2, Anti-Captcha, CapMonster
//     Cloud) is translated at the door: clientKey is a client's key, a
//     task object becomes the in.php method and params
//     (provider/createtask.ParseTask) and takes in.php's path from there
//     (one validation, the same rate, max_inflight, ids and Backend), and
//     answers go back as the type's solution fields. A task of either
//     protocol can be read by the other (its taskId is the in.php id, an
//     integer). Errors are HTTP 200 {"errorId","errorCode",
//     "errorDescription"}, in.php's codes mapped to the protocol's
//     (ERROR_WRONG_USER_KEY → ERROR_KEY_DOES_NOT_EXIST,
//     ERROR_WRONG_CAPTCHA_ID → ERROR_NO_SUCH_CAPCHA_ID, an unsupported
//     type → ERROR_TASK_NOT_SUPPORTED, …; docs/protocols.md). A
//     callbackUrl is POSTed getTaskResult's JSON with the taskId, through
//     the same guarded sender as an in.php pingback.
//   - Protocol errors on the front are HTTP 200 with the provider's codes,
//     as the provider does; the JSON API uses HTTP status codes. A task
//     refused by Backend.Check (captchaq.Queue.Check; a gateway's
//     captchaq.Task.CheckFor) is 400 with {"error", "code", "field"}:
//     code INVALID_TASK or UNSUPPORTED_TYPE, as in a Result.
//   - Request bodies are limited to Config.MaxBodyBytes (8 MiB by default):
//     in.php answers ERROR_TOO_BIG_CAPTCHA_FILESIZE, the API 413. Bodies
//     being read are counted as their bytes arrive, never as a
//     Content-Length declares them, and give their bytes back once read
//     (see Config.MaxBodyInflight): a client's bodies (the API's, in.php
//     and res.php with key= in the query) take the client's own share
//     first (MaxBodyPerClient), which no other client can take, then a
//     pool shared by the clients; the front's bodies whose key is only
//     inside them take at most MaxBodyPerAddress from one source address
//     out of a pool of their own, and are cut off unless they arrive
//     within KeylessBodyTimeout (10 s). A body cut short is answered
//     ERROR_NO_SLOT_AVAILABLE on in.php and res.php, 429 on the API, with
//     the reason and the fix, and its connection closes.
//   - The server's Listener (serve --listen) caps open connections at
//     Config.MaxConns and Config.MaxConnsPerAddress (--max-conns,
//     --max-conns-per-address): one past either is closed as it is
//     accepted.
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
//     only, so priority_min is how one client is kept from going before
//     the others. A dead-letter replay counts against its owner's
//     max_inflight and rate like a submit: what does not fit stays a dead
//     letter ("held" in the answer; 429 when none fit). A client has one
//     replay running at a time and starts at most one per
//     Config.ReplayEvery (429 with Retry-After); {"all":true} replays at
//     most MaxTasksPerRequest at once ("more": true when more wait), and
//     finds the client's own dead letters by tenant in the Store
//     (captchaq.DeadLetterFilter.Tenant, an index), without reading the
//     other clients'.
//   - The tasks of an array go to the queue in one call, stored together
//     (one commit on the SQLite store).
//   - A pingback is sent at most once, after its result is recorded (in
//     front of a fleet, after the result message is acked). Shutdown
//     lets queued and in-progress pingbacks finish until its context
//     ends; any it then abandons, and any past a client's backlog, are
//     counted in captchaq_client_pingbacks_total{outcome} and logged with
//     the task id. A process that dies loses its queued pingbacks; the
//     result stays answerable by res.php and GET /v1/tasks/{id}. Why not
//     deliver before the ack: see pingbackSender.
//   - The dashboard and the admin views (every client's tasks, dead
//     letters and counts) need a client with "admin": true.
//
// With an amqp.Gateway as Backend (captchaq serve --amqp) the same holds,
// with these differences a client can observe:
//
//   - A task is published to the fleet and recorded before in.php answers
//     OK|id or the API 202 (status "queued": accepted); GET shows it
//     "inflight" from then on (at the fleet, waiting for a worker or being
//     solved). SubmitWait does not apply (there is no queue to wait for
//     room in); a submit the broker or the store does not finish within
//     30 s answers ERROR_NO_SLOT_AVAILABLE / 503.
//   - Priorities go to the broker as AMQP priorities. Fair share among
//     clients is by demotion: a client past its share of unfinished tasks
//     has its next ones published one level lower (see amqp.Gateway).
//   - DELETE answers every unfinished task CANCELED at once, but the
//     message cannot be taken back: a worker may still solve it (the
//     thread is billed) and that answer is dropped.
//   - getbalance answers the freshest balance a worker read and sent in
//     its status beat (amqp.Gateway.Balance): read at the worker's start
//     and once a minute, beaten every 5 s, so normally under 65 s old.
//     From the gateway's first request: the newest reading is kept on the
//     broker (PREFIX.balance), which a gateway reads at start and when it
//     holds none; with none there either it waits up to
//     amqp.BalanceWait for a beat. None then (no worker running, or none
//     has read the balance yet) answers CodeBalanceUnknown with the
//     reason.
//   - reportbad/reportgood are answered OK_REPORT_RECORDED once the
//     first report of the task is on the broker (amqp.Gateway.Report
//     publishes it on PREFIX.reports, confirmed; repeats publish
//     nothing); a worker forwards it to the provider with the key. The provider's own answer (a refusal such as
//     ERROR_DUPLICATE_REPORT) is in the worker's log, not the client's.
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
//     network through the server. Its key is read from the
//     Authorization header only, never from a URL, where it would stay
//     in histories and logs and go out as Referer: the dashboard asks for
//     it in a form (kept in the browser's localStorage, sent as
//     Authorization: Bearer), / with ?key= answers 400, and /v1/events
//     refuses an admin key in ?key= (a client's own key is read there,
//     as EventSource sends no header). Every answer carries
//     Referrer-Policy: no-referrer, X-Frame-Options: DENY and a
//     Content-Security-Policy of the server's own scripts, styles and
//     calls only (script-src 'self', frame-ancestors 'none').
//   - Anyone who can connect, with a key or without, is untrusted with
//     the server's room: slow or large bodies hold only the bytes that
//     came, within their client's or address's share, and a keyless one
//     only for KeylessBodyTimeout, held until the task is decoded from
//     them; connections are capped per address and overall. A client
//     within its share is never refused for another's bytes. Parsing costs
//     a bounded multiple of what was charged: a JSON body of over 10,000
//     fields (POST /v1/tasks: 64 a task of MaxTasksPerRequest), or a
//     string longer than a 600 KiB image base64-encoded, is refused before
//     any of it is decoded, and an image over the limit before it is
//     decoded. Behind a proxy every connection and keyless body comes
//     from the proxy's address: raise MaxConnsPerAddress and
//     MaxBodyPerAddress to what it carries.
//   - A client is untrusted: its tasks are data. Nothing it repeats
//     reaches the provider twice: a report of a task is forwarded once,
//     with the operator's key, so one client cannot get the shared
//     account or address rate-limited for all. No param names a path
//     (post tasks carry the image's bytes); protocol names (key, method,
//     json, soft_id, pingback, header_acao) are refused in params, and in
//     createTask task objects, in every spelling a provider's form parser
//     reads as one (letter case; '.', ' ' or '[' for '_'; name[i]; spaces
//     around; text after a NUL: provider.FoldParamName), and so is a param
//     given twice in two such spellings (the provider reads one of them,
//     maybe not the one checked); images are capped at the provider's
//     600 KiB; tasks per
//     request, bodies being read, event streams and long polls are capped
//     (413/429); it sees only its own tasks and numbers, and errors
//     without the provider's address. Its pingback may not reach
//     loopback, private, link-local, CGNAT or metadata addresses (checked
//     on each connect, so DNS rebinding is covered; Config.PingbackAllow
//     and serve --pingback-allow name exceptions), carry user info or
//     follow redirects, and each client's pingbacks queue apart. Every
//     text of a task (id, params' names and values, proxy, pingback) is
//     checked at the door for what the stores refuse (a NUL byte, invalid
//     UTF-8, an id over captchaq.MaxIDBytes): refused with the field
//     named before anything is published, submitted or paid for.
//   - A provider is trusted with the answers to its own tasks and the
//     provider key, not with the server's files, clients' keys or another
//     provider's tasks. Its pingback URL (/pingback/<secret>?provider=NAME
//     &sig=…) carries a secret of its own, an HMAC-SHA256 of its name
//     keyed per start (the captcha id is assigned after the URL is sent,
//     so no MAC over it can be in it), compared in constant time: one
//     naming another provider without that one's sig is refused with 403
//     and finishes nothing. An answer for an id not yet checkpointed is
//     kept 10 s, at most 256 a provider, then dropped and counted in
//     captchaq_early_pingbacks_dropped_total{provider}.
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
//   - Errors a client (or anyone asking /readyz) sees name no file, host
//     or address of the operator's: a store's or broker's failure under
//     a replay, a cancel or the readiness check is logged whole and
//     answered in plain words; a task's last_error and result hide URLs,
//     host:port with or without a scheme, and any /pingback/ path (the
//     server's pingback secret). PublicURL is checked at New (a full
//     http or https URL, no user, query or fragment), so a scheme-less
//     one cannot fail every task quoting the secret.
//
// What is measured: each of these bounds has a test that runs the attack
// on real connections and asserts exact answers, listed with what it
// does in docs/operating.md ("Hostile clients: what is measured"): 64
// slow keyless and 64 slow keyed uploads beside a client answered OK|id
// and 202 throughout (TestSlowUploadsStarveNoOne), 50 reports of one task
// making one provider request and one broker message
// (TestReportsForwardedOnce, TestGatewayForwardsReportsToTheProvider), a
// replay beside 20,000 foreign dead letters that takes, holds and
// redelivers none (TestGatewayReplayTouchesNoForeignDeadLetter), one
// provider's pingback URL renamed to another's answered 403 with the
// other's clients given its real tokens (TestPingbackForgedByAnotherProvider).
//
// By endpoint, what the caller is trusted with:
//   - in.php, res.php (and the createTask methods): a client's key, in
//     the query or in the body. Without a key in the query the body is
//     anyone's until read (an address's share, KeylessBodyTimeout); with
//     one, the client's share. A client submits, reads its own tasks and
//     balance, and reports its own solved tasks once each, within its
//     rate.
//   - POST /v1/tasks, GET and DELETE /v1/tasks/{id}: a client's key in
//     Authorization; its own tasks only (an admin's: every client's), its
//     body within its share, submits within its rate and max_inflight.
//   - GET /v1/events: a client's key in Authorization or, for
//     EventSource, in ?key= (never an admin's there); its own results.
//   - GET /v1/deadletters, POST /v1/deadletters/replay: a client's key;
//     its own dead letters (found by tenant in the Store), one replay at
//     a time, at most one per ReplayEvery, each task within its rate and
//     max_inflight; an admin's, every client's. A gateway's replay reads
//     its own store only, never the fleet's shared dead-letter queue.
//   - GET /v1/stats, /v1/history: a client sees its own counts; an admin
//     the whole queue's and the broker's depths.
//   - /pingback/<secret>: a provider, by its own sig; its own tasks only.
//   - / (the dashboard) and /metrics: an admin's key in Authorization
//     (the dashboard's form); a key in the address is refused.
//   - /healthz, /readyz: anyone; /readyz says why it is not ready in
//     words that name no file or host.
//   - The operator's own: --metrics-listen (no key), the clients file,
//     the store files and the key file, each for the operator alone.
package server
