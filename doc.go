// Package captchaq is a queue for solving many captchas through CaptchaAI or
// any service that speaks its in.php/res.php protocol, for automation and QA
// that the user is allowed to run.
//
// A Queue keeps the plan's threads busy and never over-subscribed, submits
// urgent tasks first and shares threads fairly among tenants, polls every
// task in flight with one bulk request, retries by error class, and keeps
// every step durable in a Store so a crash loses no task and pays for no
// second solve.
//
// # Polling
//
// A plan is paid per thread, and a thread whose answer sits ready at the
// provider is idle until a poll fetches it. A bulk poll every Δ leaves an
// answer waiting Δ/2 on average and costs one request, so a fixed-interval
// poller sits on a frontier: (requests per task − 1) × (1 − utilization) ≈
// 1/(2 × threads), whatever Δ it picks. Config.PollInterval is that
// poller, kept as an explicit override; the poll loop is poller.go.
//
// Left 0, polls follow the default scheduler (pollsched.go). It treats
// each poll request as a purchase:
//
//   - For every kind it learns the solve time distribution from its last
//     64 answers. An answer is known only to lie between the last poll that
//     did not find it (or its submit) and the one that did; each such
//     interval counts as spread evenly over it. Before a kind's first
//     answer a wide log-normal prior stands in, around
//     provider.MedianSolveTime times the pace the provider showed on the
//     kinds already learned (a provider fast on images is fast on
//     reCAPTCHA too).
//   - For each task in flight it knows its submit time and its last
//     not-ready poll, so the chance its answer is ready by t, given it was
//     not then, and the answer-seconds it has probably waited by t.
//   - A round goes out at the first t when those answer-seconds, summed
//     over the tasks and weighted, reach the request's cost (PollGap × 1
//     answer-second). An answer's wait weighs 1 (its caller waits) and 2
//     while tasks wait for a thread (a paid thread waits too); a task
//     whose deadline is nearer than 10 PollGaps weighs 4 times more.
//   - A round asks for every id past its per-id gap whose kind is solved
//     by its age plus PollGap at least 1% of the time; asking for one that
//     cannot be ready before the next round would spend its gap. (Judging
//     by the chance since its last poll instead skipped ids whose answer
//     was spread over many seconds, and let them wait several rounds.)
//
// The provider's rules it keeps, by Config.PollGap (default 500 ms): no id
// is polled twice within PollGap (the simulator bans an id polled more than
// 20 times in 10 s, as providers of this protocol do; CaptchaAI publishes
// no figure and advises 5 s, which bulk polling of many ids makes moot),
// and rounds start at least PollGap apart: at most 2 bulk requests a second
// (one more per 100 ids in flight). A lone task costs a few polls: the first
// goes out when its kind's answer has probably waited PollGap, and each
// later one when it has probably waited that long again (1 to 2 polls a
// task on the fast mix, in TestDefaultPollingLoneTask).
//
// What it buys, measured (bench/REPORT.md, the fast mix of issue 19,
// medians of 3 seeds): utilization 0.950, ready-to-delivered p50 0.205 s
// and p99 0.548 s, 1.45 requests a task: a frontier product of 0.0225,
// against 0.0262 for a script polling every 500 ms and 0.0246 for
// PollInterval 500 ms. On a busy queue its rounds come every PollGap, as
// the script's do; it saves the rounds that would find nothing (the first
// ones after the start, a tail of long solves) and fetches a lone task's
// answer without a request a PollGap. It does not get much past the
// frontier: under a per-id gap of 500 ms an
// answer whose solve time spreads over seconds (Turnstile, reCAPTCHA) waits
// PollGap/2 on average however its polls are timed, and with 20 threads
// busy the answers come about as evenly as a Poisson stream, where no
// timing beats a fixed interval. Only a shorter per-id gap, or pingbacks
// (Config.PingbackURL: answers within milliseconds, about one request a
// task), move past it.
//
// Issue 19 reported `captchaq batch --poll-interval 500ms` at utilization
// 0.919 with a ready-to-delivered p99 of 3.73 s against a script's 0.946 and
// 0.48 s. Instrumented on the fast mix (200 tasks: 30% image 0.2–0.5 s, 40%
// Turnstile 2–6 s, 30% reCAPTCHA v2 5–12 s; 20 threads) the engine at 500 ms
// gave utilization 0.951–0.954, p50 0.19 s, p99 0.48–0.49 s and 1.49–1.50
// requests a task, on the memory store and on SQLite alike: on the
// frontier (0.023–0.025), beside the script (0.950, 0.19 s, 0.49 s, 1.50).
// Every answer was fetched by the first round after it was ready (each id
// waited one 500 ms gap at most); checkpoints took under 1 ms, so no
// submit slot was held waiting for one; poll and submit do not wait on
// each other (a round's answers free their threads and wake the
// dispatcher before the round's results are stored). One id waited for a
// late first-poll estimate (Turnstile's learned 2.5 s against a 2.0 s
// solve), which the default scheduler does not have: it asks for an id
// once answers of its kind are 1% likely by the next round. The 3.73 s did
// not reproduce. What every
// client missed on that mix was the makespan: 1.20–1.25× the floor (drawn
// solve times ÷ threads), because a batch in input order ends on
// reCAPTCHAs submitted last. That is the order's, not the polling's:
// LongestFirst brings it to 1.07–1.10× (the queue stays FIFO within a
// priority, so the order is the caller's choice).
//
// Its known weakness: until a kind's first answer the prior decides, and a
// batch whose first tasks are all of a slow kind the provider solves far
// faster than published waits for it (ready-to-delivered p99 of 0.12 to
// 0.42 s on the default-latency mixes at scale 0.1, 1.2 to 4.2 s in
// scale-1 terms, against 0.05 s for a fixed 500 ms interval).
//
// # Loops and shutdown
//
// A started Queue runs two loops, each an internal/startstop Loop on the
// queue's run context: the dispatcher (dispatcher.go), which starts
// submits, and the poller (poller.go), which polls the tasks in flight.
// Shutdown stops intake, waits for every accepted task (or ctx), then
// stops as Close does: it ends the run context, waits for the dispatcher
// and the poller to return, then for the submits they started (a submit
// under way finishes its store write, which outlives the run context), and
// last answers the Futures still waiting with ErrClosed. The Store is the
// caller's and stays open; store/sqlite and amqp document their own
// loops and order the same way.
package captchaq
