// Package amqp carries captchaq tasks and results over RabbitMQ, for a fleet
// of machines that share one provider key, or several providers' keys
// (see "Several providers").
//
// # Topology
//
// Every name starts with Config.Prefix (default "captcha"), so fleets and
// tests share one broker:
//
//	captcha.types      direct exchange; routing key = task kind (KindOf)
//	captcha.tasks.all  fanout; the alternate exchange of captcha.types
//	captcha.tasks      tasks of kinds without a lane
//	captcha.tasks.K    the lane of kind K (Config.Lanes), for consumers of K only
//	captcha.results    results; message id = task id
//	captcha.dlx        dead-letter exchange → captcha.failed
//	captcha.replayed   a notice for each task a gateway replayed from its
//	                   store, so Conn.Replay skips its older dead letters
//	                   (at most ReplayedNoticesMax, the oldest go first)
//	captcha.delay      headers exchange → captcha.delay.<ms>: retry tiers whose
//	                   TTL dead-letters back to captcha.types under the kind
//	captcha.checkpoints.<owner>
//	                   a worker's checkpoints: a quorum queue that
//	                   dead-letters what its holder lets go to captcha.adopt
//	captcha.adopt      checkpoints whose holder is gone, for any worker
//	captcha.status     fanout for status beats (see Stats)
//	captcha.replies    direct exchange; routing key = a reply queue's name
//	captcha.replies.unrouted
//	                   fanout → captcha.results; the alternate exchange of
//	                   captcha.replies (a result whose reply queue is gone)
//	captcha.replies.G  gateway G's reply queue: the results of the tasks it
//	                   published, and a copy of every dead letter (see Gateway)
//	captcha.threads    the plan's thread tokens (WorkerConfig.SharedThreads),
//	                   with captcha.threads.returning (a dead holder's tokens
//	                   waiting), captcha.threads.filled and captcha.threads.lock
//	captcha.provider.NAME.threads
//	                   with several providers, provider NAME's thread tokens,
//	                   with .returning, .filled and .lock after it
//	captcha.routing    the fleet's routing, one message every worker with
//	                   SharedThreads checks its own against (see "Several
//	                   providers"), with captcha.routing.lock
//
// Task queues dead-letter to captcha.dlx, so a task that waits longer than
// Config.TaskTTL (5 minutes) lands in captcha.failed with x-death reason
// "expired". Transient failures never go there: Publisher.Retry parks the
// task in a delay tier. Only permanent failures and exhausted retries are
// dead letters (Publisher.DeadLetter), with reason, error code and attempts
// in headers; DeadLetters lists them and Replay sends them back.
//
// Replay skips, and takes out, a gateway task's dead letters published
// before its gateway replayed the task or answered it: the gateway notes
// each such replay and answer in captcha.replayed under its name, an
// answer before it stores it (see Gateway). A dead letter replayed before
// its gateway reads the answer (the gateway down) is still solved again,
// as is one whose notice ReplayedNoticesMax newer ones pushed out.
//
// A worker answers a message id once, so Replay publishes each task under
// a wire id of its own, ID@GEN (GEN the replay's time, as a gateway's
// renew), with the task's id in the captchaq-replay-of header: even the
// worker that failed the task solves it again, while copies of one replay
// (redeliveries) are still solved once. The worker answers it, and
// dead-letters it if it fails again, under the task's own id, so collect
// and a gateway see the task's id and a failed replay replays again.
//
// # Priority: classic queues with x-max-priority
//
// The task queues are classic queues with x-max-priority 10. RabbitMQ 3.10
// quorum queues ignore priority; the alternative, one quorum queue per
// priority, cannot be consumed in priority order with push consumers (each
// lane would have its own prefetch, and a consumer would have to poll lanes
// with basic.get in order). A classic priority queue orders at the broker
// with no polling, and a small prefetch keeps the order honest. The cost is
// no replication; a broker restart keeps every task (durable queues,
// persistent messages). Task priority 1 (most urgent) maps to AMQP 9,
// the default 5 to 5.
//
// # Checkpoints: no second solve after a crash
//
// A task the provider has accepted is published, with its captcha id, to
// its consumer's own checkpoint queue (Publisher.Checkpoint) and confirmed;
// then the task delivery is acked. The consumer holds the checkpoint
// delivery while it polls, and acks it once the result is confirmed. If the
// consumer dies, the broker dead-letters the checkpoint to captcha.adopt
// at once (see Recovery): whoever takes it sees the captcha id and polls
// instead of submitting again. A checkpoint held longer than
// Config.InflightRefresh must be republished and the old delivery acked by
// its holder, so the
// broker's consumer_timeout (30 minutes) never fires. Idle checkpoint
// queues delete themselves after an hour. Each checkpoint names the
// worker run that published it (captchaq-run): a worker started again
// under the same owner name rejects the checkpoints of the run before,
// which sends them back to the fleet at once instead of dropping them.
// The worker's queue takes these steps through its captchaq.Journal
// (WorkerStore, given by the worker's captchaq.Fleet), which it calls
// where it would call its Store's Checkpoint, Retry and Finish; the
// queue's Store is a captchaq.MemoryStore of the worker's own, written by
// the same steps while the task is still the worker's.
//
// A worker submits a task only while it holds it: its delivery's channel
// is alive, or its checkpoint is confirmed (captchaq.Fleet's Admit). A task
// whose channel died is back in its queue for the fleet, so the worker
// hands its copy back instead of paying for a second solve. A worker cut
// off silently sees its channels alive until its client gives up on the
// connection (see Recovery), and a submit already on its way is not
// called back: cancelling a request does not stop the bytes already sent,
// which reach the provider when the network comes back.
//
// A connection lost between the provider's answer to a submit and its
// checkpoint's confirm puts the task back for the fleet while its captcha
// id is not yet durable. The first checkpoint of a task is confirmed only
// on the connection of the task delivery that holds it (publishIn; a copy
// the broker gave this same worker again meanwhile holds it too). When
// that connection closed first, a worker that lives through it reconnects,
// checkpoints the task and claims it, if it can still win: it publishes
// the task id on captcha.claims, a fanout every worker hears on its own
// queue captcha.claims.<owner>. A worker that receives a redelivered task
// without a captcha id holds it 5 seconds (redeliveredWait) before its
// queue takes it, and drops (acks) its copy when the claim comes, or came
// lately: one paid solve (TestLostDeliveryIsClaimed). A claim can win
// only within those 5 seconds of the broker letting go of the task, so a
// worker claims only within 4 s (claimWindow) of the latest moment it
// knows the broker held its connection: the close it saw, or, for a
// connection that fell silent for longer than Heartbeat before it ended
// (a partition, a stopped process), when it was last heard from. Past
// that it forfeits the task: no checkpoint, no polls, no answer; the
// fleet's copy is solved and answered (a second paid solve, one answer;
// TestPartitionedCheckpointIsForfeited, TestPartitionedSubmitIsAnsweredOnce).
// A copy of a forfeited task that reaches the same worker while its queue
// lets go of the task goes back to the broker, and is a fresh task to it
// once the queue has let go (the sweep runs every 200 ms), never taken
// into the forfeited entry. The cost: nothing per task; a
// claim per such task; and every redelivered task, after a worker's
// death, a dropped connection or a hand-back, waits those 5 seconds.
// A connection that dies right after the first checkpoint's confirm may
// take the ack of the task's delivery with it (an ack is never
// confirmed): the broker then requeues the task without its captcha id
// and dead-letters the checkpoint to captcha.adopt. So a worker whose
// connection ends less than 3 s (ackUnsure) of reading after such an ack
// claims the task too (WorkerStore.unsureAcks); a claim drops copies
// without a captcha id only, never the checkpoint; and a worker holding
// the copy waiting when the checkpoint reaches it adopts the checkpoint
// and acks the copy (TestLostAckIsClaimed: before, that copy was solved
// again after its wait, as TestFleetDroppedConnection saw under load).
// A holder killed there claims nothing: the worker that adopts its
// checkpoint claims the task (every adopted checkpoint is claimed), and
// a copy waiting at another worker is dropped (TestAdopterClaims; before,
// TestRecoverySIGKILL on a loaded machine had 4 tasks solved and
// answered twice in one run).
// Windows stay, each a second paid solve: a worker killed in that window
// (nobody is left to claim), or cut off silently in it; a reconnect
// slower than the claim window. The submit cap bounds how many tasks are
// in the window at once. And copies of an answer, none paid twice: a
// result whose channel died before its confirm is published again, and
// RabbitMQ makes no transaction atomic (https://www.rabbitmq.com/semantics.html,
// "atomicity in single queue: no"), so a broker stopped in the middle of
// a commit may keep its result and lose its ack; the checkpoint comes
// back and its adopter answers again from the same captcha id. Each copy
// is the same answer, which Conn.Collect and the gateway keep once (one
// fresh-clone CI run's TestRecoveryRestart counted 2 copies; the
// recovery tests bound copies by the plan's threads).
//
// # Recovery: from what the broker knows
//
// A worker's checkpoint queue is a quorum queue with x-delivery-limit 0
// and captcha.adopt as its dead-letter target, dead-lettering
// at-least-once: a broker that restarts returns every checkpoint its old
// connections held as it boots, maybe before captcha.adopt is up, and
// the queue keeps each until captcha.adopt has it (at-most-once, the
// broker's default, lost them all). A checkpoint queue an earlier version
// declared at-most-once serves as it is, with a warning, until it
// deletes itself an hour after its worker stops. RabbitMQ 3.10 counts a
// delivery returned for any reason (the holder's channel or connection
// closed, or it nacked), so the first return dead-letters the checkpoint,
// reason delivery_limit, carrying its captcha id; a checkpoint held never
// expires, and the lease (Config.InflightLease) only sends on the
// checkpoints a worker died with before it received them (published while
// its checkpoint consumer was away). So the fleet has a dead worker's
// tasks as soon as the broker knows the worker is gone:
//
//   - at once when its connection closes: SIGKILL, a crash, an OOM kill,
//     rabbitmqctl close_connection, a broker restart (it closes every
//     connection; the checkpoints come back as it boots);
//   - for a silent worker (power loss, a partition, SIGSTOP), when the
//     broker gives up on its heartbeats: two to three Config.Heartbeat
//     (5 s by default; measured 14 s, and 29 s at 10 s).
//
// Every worker consumes captcha.adopt on a channel of its own, prefetch
// its plan's threads, and its queue's MaxQueued leaves room for them, so
// an adopted checkpoint reaches a worker at once even when every worker's
// prefetch is full of tasks waiting for a thread. The adopter polls it
// (Queue.Adopt of an in-flight record) and holds that delivery as its
// checkpoint: its own death sends the task on again.
//
// A worker that is alive is never robbed, and nothing is answered twice.
// A worker holds a task through one delivery: its newest checkpoint, or
// the task's (or adopted checkpoint's) delivery before that. When that
// delivery's channel closes, the task is the fleet's: the stale sweeper
// has the queue let go of it (Queue.Abandon: no more polls, its thread
// freed). Finish publishes a task's answer (its result, and for a failed
// task its dead letter) on the channel of the checkpoint (or adopted
// checkpoint) that holds the task, in one AMQP transaction with that
// delivery's ack: the broker
// takes the answer and the ack together or neither of them, so whenever
// the connection dies the task is answered once, by this worker or by
// the adopter of the checkpoint the broker took back. (The consumers of
// checkpoints and captcha.adopt run in transaction mode, and
// every other ack on them is committed as it goes; answers that come
// while a commit is on its way share the next one, a group commit, so
// the broker round trips do not grow with the answers. RabbitMQ applies
// a commit whole when a connection dies; only a broker that crashes in
// the middle of one may apply it to some queues and not others.) So a
// worker that
// comes back from a partition, a SIGSTOP or a closed connection drops the
// tasks whose checkpoints died with its channel, answered or not; its own
// checkpoint coming back to it through captcha.adopt is taken up as it
// was, even when its connection closed before the checkpoint's delivery
// reached it (TestNewestCheckpointBackBeforeArriving: it was acked as
// an older copy, and the task lost). Nor does it answer a task it
// submitted while cut off: a task whose first checkpoint missed its
// connection is claimed, or forfeited when a
// claim can no longer win (see Checkpoints). A checkpoint is
// dead-lettered only when its holder's channel is gone, and a live
// holder's channel is gone only once the broker closed it: no timer on
// ready checkpoints decides it.
//
// Threads come back on the same clock (see Returning): a dead worker's
// tokens wait in captcha.threads.returning for 3 s; a worker that adopts
// one of its tasks at the provider takes that task's token from there,
// and the rest (tasks not at the provider, threads it held spare) go
// back to the fleet when the 3 s run out.
//
// Before the transaction, a result was published and confirmed on its
// own and the checkpoint acked after: a connection that closed between
// the two (a SIGSTOP longer than the heartbeat timeout, a partition, a
// broker's stop_app, which closes connections with confirms unsent) had
// the broker keep the result and give the checkpoint to an adopter,
// which answered the task a second time (TestAnswerAndAckAreOne; four
// tasks in one fresh-clone CI run's TestRecoverySIGSTOP). A commit costs
// one round trip, as the confirm it replaces did.
//
// A checkpoint's newer copy (a retry parks the task, InflightRefresh
// republishes it, a second submit checkpoints its new captcha id) goes
// out the same way, in one transaction with the ack of the copy it
// replaces. Before, the copy was confirmed on its own and the old one
// acked after, and a channel that closed between the two left both to
// the fleet, where two adopters answered the task twice
// (TestCopyAndAckAreOne). When the channel closes before the commit's
// answer, the worker lets the task go, and a copy of that commit that
// reaches it later goes to the fleet (it is then the only one).
//
// Windows that stay: a worker
// killed or cut off between the provider's answer to a submit and its
// checkpoint's confirm costs a second solve (see Checkpoints); a
// partitioned worker's tasks wait for the broker's heartbeat timeout,
// as nothing sooner tells a slow worker from a dead one.
//
// A broker restart (stop_app and start_app, about 10 s on a loaded
// machine) closes every connection at once, with reason 'shutdown', and
// gives their deliveries back to nobody until it listens again. So the
// claim window of a task whose first checkpoint its close cut off counts
// from the broker's last refused connect (Conn.brokerDownAt), not from
// the close, and a broker that shut down is tried again every second at
// most (shutdownRetryMax): the worker checkpoints and claims the task
// soon after the broker is back, and the copy's holder drops it, where
// the worker forfeited it and the fleet solved it again (TestMayClaim;
// TestRecoveryRestart's bound on second solves). This assumes one broker
// node: on a cluster another node may hand out the copies while this
// one is down, and a claim may come late.
//
// A partition, with the default Heartbeat of 5 s, in numbers: the
// client gives up on a silent connection 7.5 s after it last heard from
// the broker (amqp091's read deadline, three half-heartbeats), the broker
// 10–15 s after it last heard from the client, and the worker that
// receives a task of it again waits 5 s more before submitting it, 15 s
// at the soonest. Until its client gives up, the cut-off worker sees its
// deliveries alive and may submit; a submit held up in the partition
// reaches the provider when it lifts (within the HTTP client's 30 s), and
// one answered in the partition's first seconds, when the provider is
// still reachable (a partition from the broker alone), is answered as
// well. Either way its checkpoint misses its connection, last heard far
// more than 4 s before, so the worker forfeits the task: the fleet solves
// it again and answers it once (a second paid solve). The submit cap
// covers the checkpoint, and no held-up submit frees its slot before the
// client gives up, after which nothing is submitted: a partition costs at
// most the cap's second solves (the queue's bound on submits at once: 8 at 10
// threads); in practice a worker whose threads are all at the provider
// submits nothing once cut off (its polls, cut off too, free no thread).
// Refusing to submit on a connection not heard from lately was tried and
// misfired under load (a loaded process reads its heartbeats late). A
// process stopped (SIGSTOP) longer than the broker's heartbeat timeout
// with a submit on its way reads, on waking, the broker's last bytes
// left in its socket and then the close: to it they look fresh. So a
// Conn's watcher ticks four times a heartbeat, and a worker counts a
// gap in its ticks longer than Heartbeat as a stall: what it read just
// after one dates from the stall's start, and it forfeits the task
// rather than claim it too late (TestMayClaim).
//
// Measured with captchaq processes at their defaults (three captchaq
// worker --threads 10 on a 10-thread plan, Turnstile tasks of 0.5–2 s from
// captchaq enqueue, on a shared 2-core machine at load average 22–25; the
// fault strikes a worker right after the provider accepted one of its
// submits; before: the commit before this design, same runs). Short
// form, the recovery tests in cmd/captchaq (60 tasks, the fault 2 s in, a
// partition or SIGSTOP 30 s), ready→fetched max and makespan:
//
//	fault      lost  twice  paid twice  now: max / makespan   before
//	SIGKILL    0     0      0           1.65 s / 10.1 s       59.0 s / 60.2–68.6 s
//	partition  0     0      0           12.9 s / 25.4 s       32.5 s / 37.4 s
//	SIGSTOP    0     0      0           13.7 s / 25.4 s       20.3 s / 31.8 s (20 s stop)
//	close      0     0      0           2.32 s / 12.3 s       not run
//	restart    0     0      0           9.11 s / 23.0 s       46 of 60 lost
//
// (floor 6.0 s; partition and SIGSTOP: the worst of 3 runs each beside
// two busy loops, load average 2.5–4.4, floor 6.7 s, max 11.9–12.9 s and
// 11.7–13.7 s, makespan 24.8–25.4 s and 23.5–25.4 s, none paid twice;
// before a task's first checkpoint was bound to the connection that held
// it, a fresh-clone CI run under two busy loops answered 4 tasks of a
// partition twice and paid 4 twice; restart measured alone at load
// average 2 with go test -run '^TestRecoveryRestart$' ./cmd/captchaq,
// its answers waiting for the broker and for the workers' reconnect
// backoff, at most ReconnectMax, 5 s;
// before: checkpoints dead-lettered at-most-once as the broker booted,
// and a result counter that did not consume again). The full run, 150
// tasks of 0.5–2 s (captchaq bench --scenario fleet; docs/fleet.md has
// every fault and where the time goes), with one worker SIGKILLed 4 s in
// and another started, at load average 1.2 (with each answer committed
// with its holder's ack): ready→fetched p99 1.63 s, max 1.67 s, makespan
// 22.8 s against a floor of 16.5 s (the target 1.4 × floor + 3 s is
// 26.1 s), "no free thread" 0 of 150 submits, none lost, answered twice
// or paid twice; a partition's answers waited at most 10.8 s.
// Saturated utilization 0.740 (0.792 with no fault) is short of the 0.92
// asked, and 0.92 is out of reach while a thread is freed by its answer:
// on these solve times (mean 1.09 s) an answer polled at most once per
// PollGap (500 ms) waits at least 0.217 s on its best schedule, so the
// threads are at most 0.835 busy (bench.PollUtilization; 0.912 at half
// the gap; the report prints it; one worker alone measures 0.79). The
// fleet reaches 89–95% of that bound (docs/fleet.md: the ways past it). The
// threads' way from one task to the next costs under 1%; the rest is
// answers waiting for polls: each worker's first round goes about 2 s
// after its first submits (before a first answer its model is
// Turnstile's published median, 8 s, eight times these solves), about 8
// points of the run, and then a worker with 3–4 tasks in flight waits
// 0.1 s an answer, two to three times as long as one process with 10
// (0.04–0.06 s).
//
// # Threads: one plan for the fleet
//
// A plan's threads belong to the account, not to a machine. With
// WorkerConfig.SharedThreads (captchaq worker's default) the workers of a
// prefix hold them as tokens: captcha.threads holds one message per thread
// and can never hold more than N ready (x-max-length N, overflow
// reject-publish; a worker started with another N is refused: see
// Routing under "Several providers").
// A worker holds an unacknowledged token for each task it has at the
// provider or is submitting, and its queue submits only while it holds
// more tokens than that (captchaq.ThreadPool). When a worker dies or loses
// its connection the broker requeues what it held by itself: no
// coordinator, no lease to renew. A worker gives a token back by acking it
// and publishing a fresh one, in one transaction (the pool's channel is
// transactional), never by requeueing it: so a token the broker delivers
// marked redelivered is always one a holder died with (see Returning).
//
// Filling. Before it takes any task, a worker declares captcha.threads
// and, holding captcha.threads.lock, looks for captcha.threads.filled. The
// lock is an exclusive queue: one connection at a time can declare it, and
// the broker deletes it with that connection, so a worker that dies while
// filling releases it. If the marker is missing, the worker publishes the
// tokens (persistent, so a broker restart keeps them) in one transaction,
// then declares the marker. A worker that died between the commit and the
// marker left its tokens ready, and nobody consumes before the marker, so
// the next one tops up to N. A worker started with another N is refused
// by the routing check first (see "Several providers"). To change N, stop
// the workers and delete captcha.routing, captcha.threads and
// captcha.threads.filled.
//
// Sharing. Each worker consumes tokens on a channel of its own whose
// prefetch (global qos) caps what the broker sends it. Its demand is its
// tasks at the provider plus those waiting for a thread, at most N. Only a
// worker that wants more than it holds consumes; a satisfied one cancels
// its consumer, so a worker with no work holds no token, and the token
// queue's consumer count is the number of hungry workers. A worker reads
// the queue (a passive declare) once a second while the readings stay the
// same; at once when it has taken the tokens its last reading found
// ready; and 100 ms after a reading that changed (other workers turned
// hungry or satisfied, the ready tokens ran out or came back), the wait
// doubling back to a second. While no token is ready and other workers
// are hungry, its target is its fair share, ceil(N / (hungry others +
// 1)), and it gives back tokens above it. So a worker that took the whole
// plan just before the others turned hungry, as the first to get tasks
// does when a fleet starts on a backlog, hands them their shares within
// a few readings, not a second later (TestThreadPoolRefreshSchedule). A
// hungry worker takes up to its target and one more, so a token given
// back goes at once to a worker that needs it rather than waiting for a
// refresh. The queue may use only its target (Held), so a worker over its
// share submits nothing new and gives back each token its tasks free.
// Tokens above the demand go back after 200 ms, so a task that arrives
// just after another finished reuses the thread with no broker traffic.
// Tokens of tasks at the provider are never given back: the queue tells
// its demand under its task table's lock, so an adoption is never
// overwritten by a count read before it, and a give back keeps every token
// Held handed out since the demand it went by, lowering Held before the
// commit, since the queue may have started a submit on it
// (TestGiveBackKeepsWhatHeldHandedOut). The "no free thread" window (AIMD)
// stays on top, as the guard against other users of the key.
//
// Broker work. A busy worker keeps its tokens from task to task, so the
// pool costs nothing per task while the fleet is saturated; tokens move
// only when demand moves between workers: a delivery, and to give tokens
// back an ack and a publish each and one commit (a round trip) for the
// lot. Before tokens were parked (see Returning), a give-back was one
// nack with no round trip; the publish and the commit are the price of
// telling a dead holder's token from one given back. In
// BenchmarkFleetRealistic/shared (1,000 tasks, 50 threads, three workers)
// 0.09–0.43 token deliveries and as many give-backs per task (6 runs;
// with readings only once a second, 0.09–0.22 in 5 runs alongside, at
// the same utilization, 0.87–0.89), against three messages per task for
// the task itself (below); in BenchmarkFleetInstant 0.06–0.14 deliveries
// and 0.03–0.11 give-backs (15 and 11 runs; once a second, 0.06–0.10 and
// 0.02–0.06). The readings after a change move tokens sooner and so more
// often: the price of a worker that turns hungry getting its share within
// a few readings. A
// dead holder's token costs once an ack, a publish and a commit, then an
// expiry and a delivery. Plus, per worker, a passive declare a second
// (more often while the readings change) and a consume or cancel when it
// turns hungry or satisfied. Alternatives:
// splitting the plan (each worker --threads N/k) needs k and idles the
// threads of a worker with no work; AIMD alone measured 0.45–0.72
// utilization with up to 25% "no free thread" answers; a counter in
// another store (Redis, a database) is a second service to run, and a dead
// worker's share returns only when a lease it no longer renews runs out.
// Parking with publisher confirms instead of a transaction (publish, wait
// for the confirm, then ack) doubles a token if the channel dies between
// the two; the queue's x-max-length caps the ready tokens, not the held
// ones, so the fleet could run over N.
//
// Measured (BenchmarkFleetKill9: a 10-thread plan, three worker processes
// each with --threads 10, 100 ms polls, on a shared 2-core machine;
// short: 150 Turnstile tasks of 1 s; realistic: 90 of 3.5 s; slow: 60
// of 8 s, within reCAPTCHA v2's published 5–12 s (each latency's Spread
// is 0: every solve takes its median, clamped to 0.5–2 s, 2–6 s and
// 5–12 s to no effect); in the SIGKILL runs one
// worker is killed once a third of the tasks are accepted and another
// starts in its place), saturated utilization min/median/max of 3 runs
// and "no free thread" answers:
//
//	short, shared                          0.95 / 0.96 / 0.98; none
//	short, shared, SIGKILL and replace     0.93 / 0.95 / 0.96; none
//	short, one process with the plan       0.93 / 0.94 / 0.95; none
//	realistic, shared                      0.98 / 0.98 / 0.99; none
//	realistic, shared, SIGKILL and replace 0.97 / 0.98 / 0.99 (6 runs);
//	                                       1 of 95 submits in one, none
//	                                       in five (1 of 551 in all)
//	slow, shared                           0.98 / 0.99 / 0.99; none
//	slow, shared, SIGKILL and replace      0.99 / 0.99 / 0.99; none
//	before parking: short, SIGKILL         0.89–0.91 (6 runs);
//	                                       3–6 of 153–156 submits (2–4%)
//	own --threads each, short, SIGKILL     0.64–0.91 (8 runs, median 0.73);
//	                                       24–49 of 174–199 submits
//
// (Those runs had a 1 s lease; at the defaults, before the recovery
// above, a dead worker's answers waited a minute.) The SIGKILL runs also count 0–4 second solves: the benchmark
// kills right after an accepted submit, so often inside the window of a
// killed worker between the provider's answer and the checkpoint (see
// Checkpoints). At shorter solves (BenchmarkFleetRealistic, 0.4 s, 100 ms
// polls) shared is 0.86–0.89 (6 runs), as one process with the same plan
// (0.76–0.88), against 0.48–0.75 with own windows, with no "no free
// thread" answer: what keeps both below 0.92 there is the poll interval
// against the solve time, not the sharing.
//
// Returning. A worker killed with tasks at the provider loses its tokens at
// once, while those tasks run on there until solved. A worker that receives
// a redelivered token therefore does not use it: in one transaction it acks
// it and publishes a token to captcha.threads.returning with an expiration
// of 3 s (the adoption window), and that queue dead-letters it back into
// captcha.threads when it expires. The broker lets go of the dead
// worker's checkpoints in the same moment (see Recovery), and a worker
// that adopts one of them at the provider takes a token from
// captcha.threads.returning (basic.get, held as any other): the task
// still takes its thread at the provider, and the adopter holds its token
// until the task ends. Tokens nobody takes over, of tasks that were not
// at the provider and spare ones, are back after the window. A takeover
// that finds none parked (they went back before the adoption, or were
// never parked as no worker was hungry) takes a token from
// captcha.threads as usual. The adopter asks for the token once its
// queue counts the task among its threads in use, and its pool counts
// the task busy at once: either one late, the token went to a submit of
// its own or back to another worker's, and the fleet ran one solve more
// than the plan (TestTakeOverCountsTheTaskBusy). A token taken over
// keeps its window (a header on the parked token says when it ends): the
// adopted task may end at its first poll, its answer ready, while the
// token is the one a task of the dead holder that nobody adopted
// (submitted, not yet checkpointed) still runs on. Within the window the
// queue may not submit on it (Held leaves it out), and given back it goes
// back to captcha.threads.returning for the rest of it; such tokens are
// the first a worker gives back (TestTakenOverTokenWaitsOutItsWindow;
// before, TestFleetSharesOnePlan saw 7 solves at once on a 6-thread
// plan). A transaction's ack and
// publish take effect together at commit, and a channel that dies before
// the commit leaves the token unacked, so the broker requeues it again: a token is never lost or
// doubled (TestThreadsOfADeadHolderWait counts them). A worker whose
// connection drops has its own tokens parked the same way (its tasks at
// the provider go to the fleet with their checkpoints, and their
// adopters, itself among them, take the tokens over); a clean stop gives
// back at once the tokens of no task at the provider. Stats counts parked
// tokens as in use: they are, at the provider. Limits: an adopter that
// dies holding a token taken over returns it to captcha.threads.returning
// past its expiration, so it goes straight back to captcha.threads; RabbitMQ makes a transaction atomic per
// queue, so a broker that crashes in the middle of a commit may lose or
// keep a second copy of a parked token.
//
// # Several providers
//
// A worker whose WorkerConfig.Queue has Providers (captchaq worker
// --providers FILE) routes among them as one process does (captchaq's
// Config.Providers: by type, spill-over, fail-over). Every worker on the
// prefix must be given the same providers, in the same order, with the
// same threads, methods and SpillAfter: a worker that differs is refused
// (see Routing below).
//
// Threads. With SharedThreads each provider has a pool of its own,
// PREFIX.provider.NAME.threads (with .returning, .filled and .lock after
// it; Names.ProviderThreads), filled with that provider's Threads and
// shared exactly as the one plan's pool above: the fleet never has more
// tasks at a provider than its Threads, a per-solve service's included
// (its Threads is the concurrency you allow it). A lane asks its pool
// only for the tasks routing would give it now (a later provider's pool
// is not asked for tasks still waiting out its SpillAfter), and each
// result's solve time goes to its provider's pool (for Returning).
// DeleteProviderThreads deletes the pools, to change a provider's
// threads once its workers are stopped. The plan's pool (PREFIX.threads)
// is not used.
//
// Routing: one for the fleet. A worker with SharedThreads, with several
// providers or with one, checks its routing against the fleet's before it
// declares its pools and takes a task, and again on every reconnect. A
// worker without providers beside workers with them would take the
// plan's pool while they take theirs, and so could send the main provider
// more tasks than its threads; workers that differ in providers, order or
// methods send tasks where the others do not (one may submit a type its
// provider does not solve). The routing compared is text
// (routingOf): "one provider of N threads (no --providers)", or
// "providers " and each provider in order with its threads, its methods
// (sorted) and its SpillAfter, when set: what decides where a task goes
// and how many go there at once. Keys, URLs, prices, MaxSpendPerHour and
// DownAfter are not in it: they may hold secrets, and may differ between
// workers without routing a task elsewhere (the spend cap is each
// worker's own; see Spend).
//
// The fleet's routing is one persistent message in PREFIX.routing
// (Names.Routing), written by the first worker. A worker reads it under
// the exclusive queue PREFIX.routing.lock, as a pool is filled under its
// lock (basic.get, the message going back when the channel closes), and
// publishes its own if the queue is empty: of two workers starting at
// once with different routings, one records its own and the other is
// refused (TestRoutingRaceHasOneWinner). A worker that dies while
// checking leaves no lock, and the message it read goes back
// (TestRoutingSurvivesADeadChecker). A worker whose routing differs gets a
// *RoutingConflictError naming both routings and the fix (captchaq worker
// exits 2); on a reconnect, the reconnect fails and is retried, as for a
// pool's conflict. The record stays when the workers stop, as the pools
// do, so a fleet restarted with the same file starts as before. To change
// the routing on purpose, stop every worker on the prefix, delete the
// record (rabbitmqctl delete_queue PREFIX.routing, or DeleteRouting), and
// the pools of providers whose threads changed (DeleteProviderThreads; for
// the plan's, PREFIX.threads and PREFIX.threads.filled); then start the
// workers, all with the new routing. A worker without SharedThreads
// neither checks nor records the routing.
//
// Validation. A Gateway with GatewayConfig.Providers and captchaq enqueue
// --providers take a type when any provider solves it and refuse it
// otherwise, naming each provider's methods (captchaq.Task.ValidateFor,
// the check the worker's queue makes too). They read only names and
// methods from the file: no key.
//
// Captcha ids. Two providers may give out the same captcha id. A
// checkpoint carries the id with its provider's name (NAME:ID, as the
// queue stores it), so a worker that adopts it polls the right provider;
// a report (ProviderReport) carries the result's Provider, and a worker
// forwards it to that provider only, dropping one for a provider it does
// not have. Results carry Provider, Price and Abandoned to collect and to
// a gateway's store as they are.
//
// Spend. MaxSpendPerHour is counted by each worker for the submits it
// makes: it bounds each worker, not the fleet (TestFleetSpendCapIsPerWorker).
// For a fleet of k workers and a fleet-wide cap of X, give each worker
// X/k; a worker with no work spends nothing, so the fleet spends at most
// X and, when its work is uneven, less. Sharing the count through the
// broker was not done: a spend counter needs the prices of the last hour
// of every worker, which a queue of tokens does not hold.
//
// # Gateways: results by reply-to
//
// A Gateway (captchaq serve --amqp) publishes each task with the AMQP
// reply-to property naming its own durable reply queue,
// captcha.replies.<name>, and with the task id prefixed "<name>/", so
// gateways that share a fleet never collide on ids. Reply-to is a message
// property: it travels with the task through retries (the delay queues),
// checkpoints and dead letters, and Replay keeps it. A worker publishes the
// result to the reply-to queue, through captcha.replies, when it is a
// reply queue of this prefix; otherwise (no reply-to, as for tasks from
// enqueue, or any other queue) to captcha.results, so collect works as
// before. A reply queue that is gone leaves the result unrouted at
// captcha.replies, whose alternate exchange sends it to captcha.results
// instead: it is not lost, and the broker decides it, inside the
// transaction that carries the result (see Recovery). Each gateway gets
// exactly its own results, however many share the fleet. A gateway binds
// its reply queue to captcha.replies each time it starts, and a worker
// binds a reply queue at its first result for it, so a gateway from
// before captcha.replies existed still gets its results
// (TestReplyQueueOfAnOlderGateway).
//
// Results wait in the reply queue while their gateway is down. The
// gateway stores each before it acks it, and answers a task once: a copy
// of a result it has recorded is acked and dropped. The reply queue is
// also bound to captcha.dlx: a task whose TTL runs out in a task queue
// dies without a worker to report it, and the gateway records it failed
// (EXPIRED) from that copy; it ignores the other dead letters (a worker
// reports its own, and other gateways' are theirs).
//
// A gateway publishes a task before it records it (docs/engine.md says
// why), so nothing the store could refuse may reach the publish: the
// task's check (captchaq.Task.CheckFor) refuses every text the stores
// cannot hold. A record's write that fails after the publish is retried
// for up to 30 s; if it still fails, the task is kept in memory
// (GatewayCounts.Unrecorded, at most 10,000) and its record is written
// when its result comes or its client submits it again, which then
// publishes nothing: the solve is paid for once and answered. A gateway
// that stops first loses them (a crash window, see Gateway).
//
// A client's reportbad or reportgood reaches a gateway, which holds no
// provider key: Gateway.Report publishes it (the result's provider captcha
// id) on captcha.reports, and a worker with WorkerConfig.Report forwards
// it to the provider. A report the provider refuses is dropped with a log
// line; one that could not reach it goes back to the queue; one nobody
// forwards expires after an hour.
//
// # Ids
//
// An id names one task. The producers check their own ids: a Gateway
// against its Store, captchaq enqueue within its input. A worker refuses
// (dead-letters as ID_CONFLICT) another task under an id it holds or has
// finished; it remembers the fingerprints of its last idMemoryDefault
// (200,000) finished ids in a fixed ring, so the check costs bounded
// memory however long it runs, and an id older than that is not checked
// at the worker.
//
// # Broker work per task
//
// A task solved at its first submit costs the broker the publish,
// delivery and ack of three messages: the task (to a worker), its
// checkpoint (back to that worker) and its result (to collect). The task
// and the checkpoint are published with a confirm; the result goes out
// in one transaction with its checkpoint's ack, one commit in place of
// the confirm. Acks settled in a row travel as one multiple ack; on the
// worker's checkpoint and captcha.adopt channels each send of acks is a
// commit too. (Task deliveries are acked outside transactions: on that
// channel each ack would wait for a commit, and a broker restart found
// more of them unsent, each a task given back to the fleet twice; one
// fresh-clone CI run's TestRecoveryRestart then answered a task twice.
// A task that fails before its first checkpoint is answered the way
// every task was before: confirmed on its delivery's connection, then
// acked.) Nothing is declared per
// task (a worker declares its checkpoint queue once) and nothing asks the
// management API. Checkpoints are not batched: a checkpoint that waited
// for others, for a timer or for the confirm of another message, would
// widen the window above.
//
// # Connection
//
// Conn dials with timeouts, declares the topology under a timeout, and
// reconnects with exponential backoff and jitter; it notes when each
// connection last read from the broker, and its watcher ticks while
// connected so that a stall of the process is known (see Checkpoints and
// Recovery). Every channel has a
// generation; a Delivery remembers its own, and Ack on a delivery from a
// closed channel returns ErrStaleDelivery without sending anything (the
// broker redelivers the message). Acks settled in a row travel as one
// multiple ack; one settled out of order goes on its own, so a delivery
// held long never holds back the others. Publishing waits while the broker blocks
// (connection.blocked). Publisher confirms every message, publishes
// mandatory (an unroutable message is ErrUnroutable, not a silent loss)
// and publishes again what was unconfirmed when a channel died.
// Publisher.Send returns before the confirm, so a producer (captchaq
// enqueue) keeps many messages unconfirmed in their order on one channel.
//
// A declaration that conflicts with an existing queue (PRECONDITION_FAILED)
// is a *ConflictError that names the queue, the argument, both values and
// the fix: delete the queue once drained, or use another prefix.
//
// # Stats
//
// Stats reports the three numbers operators watch: tasks waiting in the task
// queues, dead letters per minute over a window, and the age of the oldest
// task a consumer holds unfinished, from the status beats consumers publish
// (so the management plugin is not needed).
//
// Message bodies are the user's Task or Result JSON; the provider key is
// never in a message.
//
// # A worker's loops and its shutdown
//
// Beside its queue and its consumers (tasks, captcha.adopt, its
// checkpoints and its claims), a running Worker has three background
// loops, each an
// internal/startstop Loop on the same background context: the refresher
// (refresher.go: republishes checkpoints before consumer_timeout), the
// beater (beater.go: status beats) and the stale sweeper (sweeper.go:
// hands back tasks held on a dead channel, and lets go of those whose
// checkpoint went to the fleet); with WorkerConfig.Report, a
// fourth, the report forwarder (reports.go). When Run's ctx ends, the
// worker stops in this order: it stops taking tasks and hands back those
// not yet at the provider; lets the queue finish those at the provider for
// up to Grace (captchaq's Queue.Shutdown) and closes the task consumer;
// ends the background context and closes the checkpoint, claim and
// reports consumers; stops the loops, in the order above, and waits for
// them and for the checkpoint and claim drains; gives its shared threads
// back (SharedThreads: it stops the thread pool's Loop, started before the
// others on a context of its own), once no task of its own is at the
// provider; and closes its publisher last. The Conn it runs on is the
// caller's: Conn.Close stops its reconnect watcher.
package amqp
