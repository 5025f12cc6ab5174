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
// states (a minute for the balance), after which submits try it again.
// Tasks in flight there keep being polled while its res.php answers; once
// its polls have failed for DownAfter (or answer an account error) they
// cannot be fetched, and they are submitted to another provider. That
// attempt is not counted; the result names the provider in
// Result.Abandoned and adds its price to Result.Price, since it may bill
// the abandoned solve too. Only a queue of several providers takes one out
// of routing; with one, failures are retried with backoff and account
// errors pause sending.
// OnPause and Paused speak of all sending: they fire when every provider
// is paused.
//
// Withdrawn types. A provider's answer that it does not take a task's
// type (provider.TypeRefused) holds that type off it for RefusalHold: the
// task goes to another provider that solves the type, its attempt not
// counted, or fails with CodeUnsupportedType when none is left, and so do
// the type's waiting tasks. In a queue of several providers a type not yet
// taken at a provider goes there one task at a time, so a withdrawn type
// costs one refused submit; after the hold the next task probes it. A
// StateStore (store/sqlite, store/postgres) keeps the refusals across
// restarts.
//
// Cost and records. Each Result names its Provider and its Price (the
// per-solve price of its method at that provider, 0 on a flat-rate plan).
// The captcha id of a task in flight is checkpointed as "name:id", so a
// restarted queue polls the right provider; an id without a known prefix
// belongs to the first. Metrics.Providers gives each provider's threads,
// tasks, spend, cost per 1,000 solved tasks and health.
//
// The first provider loses nothing to spill-over: its lane is filled
// first on every pass, and a later one takes only tasks that waited
// (docs/providers.md in the repository gives its threads' busy time).
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
// poller, kept as an explicit override.
//
// Left 0, polls follow the default scheduler. It treats each poll request
// as a purchase: it learns each kind's solve time distribution from the
// provider's answers (before a kind's first answer, a log-normal prior
// around provider.MedianSolveTime), and sends a round when the answers
// probably ready and waiting are worth the request's cost (PollGap of one
// answer's wait), weighing them more while tasks wait for a thread or a
// deadline is near. A round asks for the ids whose answers may be ready by
// then. docs/engine.md in the repository says how it decides, and
// docs/performance.md what it reaches against a fixed interval and against
// the bounds of any polling client.
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
// answers' waiting (docs/protocols.md, Poll rules), and within its poll
// budget and result window (ProviderConfig.PollBudget, ResultWindow:
// CapMonster Cloud's and CapSolver's 120 polls in 5 minutes): past half
// the budget a task's polls are spread over the rest of its window, and
// one that reaches either is submitted again. A lone task costs a
// few polls: the first goes out when its kind's answer has probably
// waited PollGap, and each later one when it has probably waited that
// long again (1 to 2 polls a task on the fast mix).
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
// acceptance, and the order inside a burst never lets a task
// pass one of a more urgent effective priority or take another tenant's
// share. LongestFirst does the same over a whole input that reaches the
// queue over more than a second (larger than Config.MaxQueued).
//
// # Reservoirs
//
// Config.Reservoirs keeps tokens of named captchas solved ahead of
// demand, in the Store (a ReservoirStore). A new task whose Fingerprint is
// a reservoir's template's, from a tenant in its Clients, takes a token
// with at least MinLife left, if one is in stock: it is stored and
// finished at once with that token's answer (Result.Reservoir names the
// reservoir); otherwise it is an ordinary task. Each second the refill
// loop drops the tokens with less than MinLife left and submits refill
// tasks ("reservoir-NAME-…", at PriorityLowest) for what the reservoir
// lacks: sized from the demand it sees (internal/reservoir), within
// ReservoirShare of the threads; failed refills hold the next back (1 s,
// doubling to a minute). A refill's token goes to the stock, its result
// to no client (nor OnResult). Queue.Reservoirs gives their counts;
// Queue.SetReservoirs swaps the set on a running queue (serve's SIGHUP):
// one kept by name and captcha keeps its stock and counts, one removed
// loses its stock.
//
// # Loops and shutdown
//
// A started Queue runs its loops on the queue's run context: a
// dispatcher, which starts submits, one poller per provider, which
// polls the tasks in flight there, and with reservoirs the refill loop.
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
//
// The shared values (Task, Result, Record, Status, Store and the other
// store interfaces, Provider, ProviderConfig, Metrics, the errors and
// codes) are declared in package captchaqtype, whose docs describe their
// fields and methods; this package names each of them again, so a
// program imports this package alone.
package captchaq
