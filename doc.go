// Package captchaq is a queue for solving many captchas through CaptchaAI or
// any service that speaks its in.php/res.php protocol, for automation and QA
// that the user is allowed to run.
//
// A Queue keeps the plan's threads busy and never over-subscribed, submits
// urgent tasks first and shares threads fairly among tenants, polls every
// task in flight with one bulk request, retries by error class, and keeps
// every step durable in a Store so a crash loses no task and pays for no
// second solve (except a crash between the provider's answer to a submit
// and the Store's Checkpoint: the protocol cannot find that id again, so
// the task is submitted once more).
//
// # Several providers
//
// Config.Providers puts several services of the protocol behind one queue,
// the first preferred: typically a CaptchaAI thread plan (flat price, no
// hCaptcha) and a per-solve service that solves what it does not and
// takes the overflow of a busy hour. A queue built with Config.Provider
// is the same engine with one provider: everything below is per provider,
// and with one it is exactly the queue described in the other sections.
//
// Each provider is a lane with its own threads (a limiter with its own
// AIMD window on "no free thread"), its own poll loop (bulk rounds to its
// res.php, with the default scheduler's solve time distributions learned
// from its own answers), its own pause on account errors and rate-limit
// hold, its own health and its own spend. One dispatcher and one
// scheduler serve them all, so priority, FIFO, aging, fair share and
// deadlines work across providers as they do for one.
//
// Routing. A task's class is the set of providers whose Methods include
// its type (provider.Task.RouteMethod); the scheduler keeps each class in
// FIFOs of its own, so a provider passes over what it cannot solve by
// looking at heads only. Each dispatch pass fills the providers in order:
// the first takes every task it solves while it has a free thread, so the
// cheap plan stays fully busy first. A later provider takes a task that
// an earlier routable provider also solves only once the task has waited
// its SpillAfter since it last joined the queue, or sooner when waiting
// that long would leave less than its kind's median solve time before its
// deadline; tasks no earlier provider solves go to it at once. Its
// MaxSpendPerHour is checked before each submit against the prices of the
// submits it accepted in the last hour plus those in progress, so
// spill-over stops at the cap and starts again as the hour rolls on.
// Validation is per provider: Queue.Validate (and so Submit) refuses a
// task only when no provider solves its type, and the error lists each
// provider's methods and says which kind of provider would.
//
// Health. A network error, a 5xx page or an unreadable body starts a
// provider's failing time; any answer in the protocol ends it. A provider
// failing longer than its DownAfter, or paused by an account error, is
// out of routing: its queued tasks go to the others at once, with no
// SpillAfter. A bad key or a refused IP pauses it until a probe (every
// DownAfter, getbalance; a poll for a provider with no Balance) gets an
// answer, with funds for a priced provider; a temporary ban or a zero
// balance that getbalance confirms pauses it for the time the pause
// states (a minute for the balance), after which submits try it again. Tasks in flight there keep being
// polled while its res.php answers; once its polls have failed for
// DownAfter (or answer an account error) they cannot be fetched, and they
// are submitted to another provider. That attempt is not counted; the
// result names the provider in Result.Abandoned and adds its price to
// Result.Price, since it may bill the abandoned solve too. Only a queue of
// several providers takes one out of routing; with one, failures are
// retried with backoff and account errors pause sending, as before.
// OnPause and Paused speak of all sending: they fire when every provider
// is paused.
//
// Cost and records. Each Result names its Provider and its Price (the
// per-solve price of its method at that provider, 0 on a flat-rate plan).
// The captcha id of a task in flight is checkpointed as "name:id", so a
// restarted queue polls the right provider; an id without a known prefix
// belongs to the first. Metrics.Providers gives each provider's threads,
// tasks, spend, cost per 1,000 solved tasks and health.
//
// The first provider loses nothing to spill-over: its lane is filled
// first on every pass, and a later one takes only tasks that waited. On
// one batch of 300 Turnstile tasks on a 10-thread plan (alone, then with
// a 30-thread per-solve provider behind it; BenchmarkSpillOverMainUtilization)
// its threads were busy 0.973 and 0.972 of the time while tasks waited;
// with solve times four times shorter, 0.861 and 0.860 over the same
// 4.9 s (alone over its whole 13.3 s, 0.908: the batch's start, before
// any solve time is learned, weighs more in the shorter window).
//
// Known costs: a task is routed by its method alone (a provider that
// solves hCaptcha is assumed to solve every hCaptcha); spend counted
// against MaxSpendPerHour lives in memory, so a restart starts a fresh
// hour; a fleet (amqp.Worker) shares one provider's threads and does not
// take Providers.
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
//   - On an idle queue (no task waits for a thread) the prior also counts
//     as one more sample of every learned kind. A kind's first answers are
//     its fastest, so on the learned samples alone a task older than all
//     of them looks certainly ready; while tasks wait that bet is worth a
//     request every PollGap (its thread is likely free), but at the end
//     of a small batch it polled the last reCAPTCHAs every PollGap until
//     they came: README's first command (23 tasks on 20 threads, on the
//     simulator) made 3.0–3.9 requests a task; with the prior's tail,
//     1.8 (TestDefaultPollingSmallBatch: 1.7–1.9 on the model, against
//     2.7–3.9), its last answers fetched up to a few seconds later.
//   - A round asks for every id past its per-id gap whose kind is solved
//     by its age plus PollGap at least 1% of the time; asking for one that
//     cannot be ready before the next round would spend its gap. (Judging
//     by the chance since its last poll instead skipped ids whose answer
//     was spread over many seconds, and let them wait several rounds.)
//     That chance is the learned distribution blended with the prior,
//     busy or idle: a kind learned from its first few answers, its
//     fastest, would otherwise rule out every id younger than all of
//     them (on the model of the realistic mix a reCAPTCHA v3 solved in
//     5.1 s, after one learned at 5.0–5.6 s, waited 2.2 s for a round
//     that asked for it).
//
// The provider's rules it keeps, by Config.PollGap (default 500 ms): no id
// is polled twice within PollGap, and rounds start at least PollGap apart:
// at most 2 bulk requests a second (one more per 100 ids in flight). What
// the rules say: the protocol's published limits (2captcha's; CaptchaAI
// publishes none of its own) are timing advice per id, a first poll 5 s
// after submit (10 to 20 s for reCAPTCHA) and then every 5 s, with a
// temporary block of the account or IP for clients that poll faster; the
// only ban with a figure is the simulator's, more than 20 polls of one id
// within 10 s, as providers of this protocol do. PollGap is that rate as
// a gap: no stricter than any stated rule, and already ten times the
// published pace, which bulk polling of many ids in one request makes
// moot for the request rate. A rolling count (20 in any 10 s) would allow
// shorter gaps in bursts; nothing published allows that, so the engine
// keeps the gap. A provider with a rule of its own keeps it
// (ProviderConfig.PollGap, "poll_gap" in a providers file; a
// createtask.Client gives its service's, e.g. CapMonster Cloud's 2 s a
// task): its ids are polled at most once per that gap, counted from the
// answer to the last poll, while a request still costs Config.PollGap of
// answers' waiting (docs/protocols.md, Poll rules). A lone task costs a few polls: the first
// goes out when its kind's answer has probably waited PollGap, and each
// later one when it has probably waited that long again (1 to 2 polls a
// task on the fast mix, in TestDefaultPollingLoneTask).
//
// What it buys, measured (docs/performance.md, medians of 3 seeds at scale
// 1, each batch handed over at once so the queue starts it longest
// first). On the fast mix of issue 19: utilization 0.948–0.952,
// ready-to-delivered p50 0.21–0.23 s and p99 0.50 s, 1.39–1.41 requests a
// task, makespan 1.10× the floor (four runs; the p50 moves by 20 ms from
// run to run); in the run beside the other clients a frontier product of
// 0.0200, against 0.0248 for a script polling every 500 ms (1.23× the
// floor) and 0.0213 for PollInterval 500 ms (0.951, 0.21 s, 0.50 s, 1.45
// requests, 1.10×). Its p99 was 0.50–0.67 s before rounds judged ids
// with the prior blended in (seed 2: 0.62–0.67 s before, 0.48–0.50 s
// after, in three runs each). On the default-latency mixes at scale 1 (300 tasks):
// utilization 0.975 (realistic) and 0.951 (short), p50 0.28 s, p99 0.77 s
// and 0.50 s, 1.86 and 1.48 requests a task against the script's 2.20 and
// 1.67, and 1.036× and 1.061× the floor against 1.21× and 1.35×. On a
// busy queue its rounds come every PollGap, as the script's do; it saves
// the rounds that would find nothing (the first ones after the start, a
// tail of long solves) and fetches a lone task's answer without a request
// a PollGap.
//
// What bounds the targets it misses (all at once: utilization ≥ 0.95,
// p50 ≤ 0.2 s, p99 ≤ 0.6 s, ≤ 1.46 requests a task, makespan ≤ 1.06×
// the floor). bench.Bounds computes what any client can reach when each
// id is polled at most once per PollGap and answers come only by polling,
// whatever its design: from the simulator's solve time distributions,
// each id on the poll schedule best for its kind, with as many requests
// as it likes (the bench report prints them under each mix's table).
// Answers fetched within 0.2 s, at most: 55.3% (fast), 43.9% (realistic),
// 46.1% (short). Requests a task for a p99 ≤ 0.6 s, at least: 1.28, 1.73,
// 1.30. Mean wait from ready to fetched, at least: 0.209 s, 0.236 s,
// 0.231 s (5.2%, 2.4%, 4.7% of the solve time).
//
//   - The p50 on the realistic and short mixes: out of reach. Fewer than
//     half of their answers can be fetched within 0.2 s of being ready:
//     a kind whose solve times spread over many gaps waits evenly between
//     0 and PollGap however its id is polled (40% within 0.2 s), and only
//     a kind solved within one gap, the fast mix's images, does better.
//   - The p99 within 1.46 requests a task on the realistic mix: out of
//     reach. With 20 threads busy, answers may come at any moment; a
//     stretch of time no round covers (no round within 0.6 s after it)
//     costs the answers expected to become ready in it, by the hazard of
//     every task in flight. Leaving uncovered only the stretches where
//     answers are least likely, 1% of them late, still needs 1.73
//     requests a task on a batch run back to back (the default
//     scheduler: 1.86).
//   - The makespan on the fast mix: out of reach. The drain of the last
//     solves alone, after the last submit, costs 1.9–6.9% (the pingback
//     row, which fetches every answer within milliseconds at 1.00 requests
//     a task and utilization 1.000: 1.019×, 1.069× and 1.061× the floor
//     on seeds 1–3), and answers holding their threads until a poll
//     fetches them add at least 4.7% more (0.209 s of every solve's 4 s,
//     for all tasks but the last 20). The default scheduler ends at
//     1.063×, 1.107× and 1.105×.
//   - On the fast mix the p50 is within reach in principle (55.3%, from
//     images polled at their best moment, about 0.4 s after the submit,
//     each on a request of its own), not at 1.46 requests a task with
//     shared rounds: the default scheduler measures 0.197–0.231 s from
//     run to run, PollInterval 500 ms 0.18–0.21 s at 1.43–1.45 requests.
//
// Only a shorter per-id gap, or pingbacks (Config.PingbackURL: answers
// within milliseconds, about one request a task), move past the first
// three; the fast mix's makespan is out of reach even with pingbacks on
// two seeds of three.
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
// reCAPTCHAs submitted last. That is the order's, not the polling's; see
// Order.
//
// # Order
//
// Waiting tasks go by effective priority (lower number first, one level
// gained per Config.AgingInterval waited), then by weighted fair share
// among tenants (Config.TenantWeights), then, within a priority and
// tenant, by burst: tasks accepted within a second of the first task of
// a burst belong to it, later ones start the next. Bursts go in arrival
// order; within a burst the kinds that take longest
// (provider.MedianSolveTime: reCAPTCHA v2 before Turnstile before images)
// go first, acceptance order among equals. A batch handed over at once is
// one burst, so it ends on short tasks instead of on a long one that
// started last; a stream of tasks keeps its order but for reordering
// within a second, and no task is ever passed by one accepted more than a
// second after it, so none starves. Aging counts from each task's
// acceptance as before, and the order inside a burst never lets a task
// pass one of a more urgent effective priority or take another tenant's
// share. LongestFirst does the same over a whole input that reaches the
// queue over more than a second (larger than Config.MaxQueued).
//
// Where a batch's time goes, on the fast mix (the synctest model of
// pollsched_test.go, 200 tasks on 20 threads, three seeds): the threads'
// time is the drawn solve times plus two losses. Answers wait for the
// poll that fetches them (ready to fetched), holding their thread: 5.2–5.3%
// of the solve time, about PollGap/2 for each Turnstile and reCAPTCHA and
// 0.15 s for each image, which no timing of polls under a 500 ms per-id
// gap avoids. The tail, after the last task was accepted, while the
// threads drain: 3.0–6.7% (1.4–3.4 s), the Turnstiles still running when
// the last images start. Submits wait for nothing (no thread is idle
// before the last accept with tasks waiting). In input order the tail was
// most of the 1.20×: the run ended on reCAPTCHAs submitted last. Bursts
// bring the makespan to 1.08–1.12× the floor on the model and 1.10× on
// the simulator (medians of 3 seeds at scale 1; 1.035× and 1.061× on the
// realistic and short mixes, whose solves are longer against the gap);
// the fast mix's 1.06× of issue 19 would need the catch loss cut below
// the per-id gap's, which only pingbacks do.
//
// Its known weakness: until a kind's first answer the prior decides, and a
// batch whose first tasks are all of a slow kind the provider solves far
// faster than published waits for it. The order makes that the usual
// start of a mixed batch (its reCAPTCHAs go first): on the fast mix, whose
// reCAPTCHAs take 5–12 s against a published 25 s, the first answers wait
// up to about 1 s for a round: with the last answers of a batch, on an
// idle queue, its largest waits (the model's five largest on 7 seeds).
//
// # Loops and shutdown
//
// A started Queue runs its loops, each an internal/startstop Loop on the
// queue's run context: the dispatcher (dispatcher.go), which starts
// submits, and one poller per provider (poller.go), which polls the tasks
// in flight there.
// Shutdown stops intake, waits for every accepted task (or ctx), then
// stops as Close does: it ends the run context, waits for the dispatcher
// and then each poller to return, then for the goroutines they started
// (submits, result writes, probes of a down provider; a submit under way
// finishes its store write, which outlives the run context), and last
// answers the Futures still waiting with ErrClosed. The Store is the
// caller's and stays open; store/sqlite and amqp document their own
// loops and order the same way.
//
// # How it is built
//
// docs/engine.md in the repository is the engine's design: its parts,
// the state and lock each owns, the order locks are taken in, and the
// seams other packages build on (Store, Provider, the fleet's hooks, the
// one intake path).
package captchaq
