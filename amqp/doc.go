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
//	captcha.claims     fanout of claims, heard on captcha.claims.<owner>
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
// A task waiting longer than Config.TaskTTL (5 minutes) is dead-lettered
// "expired"; transient failures wait in a delay tier (Publisher.Retry);
// permanent failures and exhausted retries are dead letters with reason,
// code and attempts in headers. Replay sends each back under a wire id of
// its own, ID@GEN (captchaq-replay-of names the task), so even the worker
// that failed it solves it again; the answer carries the task's id. Replay
// skips, and takes out, a gateway task's dead letters published before its
// gateway replayed or answered the task: the gateway notes each such
// replay and answer in captcha.replayed, an answer before it stores it.
//
// # Priority: classic queues with x-max-priority
//
// Classic queues with x-max-priority 10 (quorum queues ignore priority),
// durable, persistent: no replication. Priority 1 maps to AMQP 9, 5 to 5.
//
// # Checkpoints: no second solve after a crash
//
// A task the provider accepted is published with its captcha id to its
// consumer's own checkpoint queue (Publisher.Checkpoint) and confirmed;
// then the task delivery is acked. The consumer holds the checkpoint while
// it polls; if it dies, the broker dead-letters the checkpoint to
// captcha.adopt at once (see Recovery), and whoever takes it polls instead
// of submitting again. A checkpoint held longer than
// Config.InflightRefresh is republished, so consumer_timeout never fires;
// idle checkpoint queues delete themselves after an hour. A worker started
// again under the same owner rejects its dead run's checkpoints
// (captchaq-run), sending them to the fleet at once. The worker's queue
// takes these steps through its captchaq.Journal (WorkerStore).
//
// A worker submits a task only while it holds it (Fleet's Admit): its
// delivery's channel is alive, or its checkpoint is confirmed. The first
// checkpoint is confirmed only on the connection of the delivery that
// holds the task (publishIn). When that connection closed between the
// provider's answer and the confirm, a worker that lives through it
// checkpoints the task and claims it on captcha.claims; a worker that
// receives a redelivered task without a captcha id holds it 5 s
// (redeliveredWait) and drops its copy when a claim comes
// (TestLostDeliveryIsClaimed). A claim wins only within those 5 s, so a
// worker claims only within 4 s (claimWindow) of the last moment it knows
// the broker held its connection; past that it forfeits the task, and the
// fleet's copy is solved and answered once
// (TestPartitionedCheckpointIsForfeited). A
// connection that ends within 3 s (ackUnsure) of a first checkpoint's
// confirm may have lost the delivery's ack, so the worker claims then too
// (TestLostAckIsClaimed), and the adopter of a killed holder's checkpoint
// claims the task (TestAdopterClaims). A Conn's watcher ticks four times a
// heartbeat, so a stall of the process dates what it read after it
// (TestMayClaim).
//
// # Recovery: from what the broker knows
//
// A checkpoint queue is a quorum queue with x-delivery-limit 0 and
// captcha.adopt as its dead-letter target, at-least-once: the first return
// of a delivery (its holder's channel closed) dead-letters it with its
// captcha id, and a restarting broker keeps each until captcha.adopt has
// it. A held checkpoint never expires; the lease (Config.InflightLease)
// only sends on those a worker died with before receiving them. So the
// fleet has a dead worker's tasks as soon as the broker knows: at once
// when its connection closes (SIGKILL, a crash, close_connection, a broker
// restart), and for a silent worker (power loss, a partition, SIGSTOP)
// when the broker gives up on its heartbeats, two to three
// Config.Heartbeat (5 s by default; measured 14 s). Every worker consumes
// captcha.adopt on a channel of its own with room in its queue, so an
// adopted checkpoint is polled at once; the adopter (Queue.Adopt) holds it
// as the task's checkpoint.
//
// A live worker is never robbed, and nothing is answered twice. A worker
// holds a task through one delivery, its newest checkpoint or the delivery
// before; when that channel closes the task is the fleet's, and the stale
// sweeper has the queue let go of it (Queue.Abandon). Finish publishes the
// answer (a result, and a failed task's dead letter) on the holding
// checkpoint's channel in one AMQP transaction with its ack, so the broker
// takes both or neither (TestAnswerAndAckAreOne); a checkpoint's newer
// copy goes out with the ack of the one it replaces (TestCopyAndAckAreOne).
// Answers that come while a commit is on its way share the next one. A
// worker back from a partition or SIGSTOP drops the tasks whose
// checkpoints died with its channel; its own checkpoint coming back
// through captcha.adopt is taken up (TestNewestCheckpointBackBeforeArriving).
// Only the broker closing a holder's channel decides, never a timer.
//
// # Threads: one plan for the fleet
//
// With WorkerConfig.SharedThreads (captchaq worker's default) the workers
// of a prefix hold the plan's threads as tokens: captcha.threads holds one
// message per thread, never more than N ready (x-max-length N, overflow
// reject-publish). A worker holds an unacked token for each task at the
// provider or being submitted, and submits only while it holds more
// (captchaq.ThreadPool). A dead worker's tokens are requeued by the
// broker: no coordinator, no lease. A token is given back by an ack and a
// fresh publish in one transaction, never a requeue, so a redelivered
// token is always a dead holder's.
//
// Filling. Holding captcha.threads.lock (an exclusive queue), a worker that
// finds no captcha.threads.filled publishes the tokens in one transaction,
// then declares the marker. To change N, stop the workers and delete
// captcha.routing, captcha.threads and captcha.threads.filled.
//
// Sharing. A worker's demand is its tasks at the provider plus those
// waiting for a thread; only a worker that wants more than it holds
// consumes. It reads the queue once a second while readings stay the same,
// at once when it took what the last one found, and 100 ms after one that
// changed. While others are hungry and no token is ready, its target is
// ceil(N / (hungry others + 1)) and it gives back the rest
// (TestThreadPoolRefreshSchedule). Tokens above the demand go back after
// 200 ms; tokens of tasks at the provider never
// (TestGiveBackKeepsWhatHeldHandedOut). The "no free thread" window (AIMD)
// stays on top, against other users of the key. Tokens move only when
// demand moves between workers (BenchmarkFleetRealistic/shared: 0.09–0.43
// a task). Splitting the plan idles a worker's threads when it has no
// work; AIMD alone measures 0.45–0.72 utilization.
//
// Returning. A worker that receives a redelivered token parks it: in one
// transaction it acks it and publishes a token to
// captcha.threads.returning, expiring after 3 s (the adoption window) back
// into captcha.threads. A worker that adopts a dead worker's task at the
// provider takes a token from there (or from captcha.threads when none is
// parked) and holds it until the task ends (TestTakeOverCountsTheTaskBusy);
// within the token's window the queue may not submit on it
// (TestTakenOverTokenWaitsOutItsWindow). A token is never lost or doubled
// (TestThreadsOfADeadHolderWait). Stats counts parked tokens as in use.
//
// # Several providers
//
// A worker with WorkerConfig.Queue.Providers (captchaq worker --providers)
// routes as one process does. With SharedThreads each provider has a pool
// of its own, PREFIX.provider.NAME.threads (Names.ProviderThreads), shared
// as the plan's: the fleet never has more tasks at a provider than its
// Threads; a lane asks its pool only for the tasks routing gives it now.
//
// Routing: one for the fleet. A worker with SharedThreads checks its
// routing (routingOf: each provider in order with its threads, sorted
// methods and SpillAfter; no keys, URLs, prices or caps) against the
// fleet's, one persistent message in PREFIX.routing read under the
// exclusive queue PREFIX.routing.lock, before it declares its pools and on
// every reconnect. Of two workers starting with different routings one
// starts (TestRoutingRaceHasOneWinner); one that differs gets a
// *RoutingConflictError naming both and the fix (exit 2). To change it,
// stop every worker, delete PREFIX.routing (DeleteRouting) and the
// changed pools (DeleteProviderThreads).
//
// A Gateway with GatewayConfig.Providers and enqueue --providers refuse a
// type no provider solves, with no key. A checkpoint carries NAME:ID; a
// report goes to the result's Provider only. MaxSpendPerHour bounds each
// worker: a fleet cap of X on k workers is X/k each. A type a provider
// refuses costs a worker one refused submit at most, one started later
// none (it reads PREFIX.state).
//
// # Gateways: results by reply-to
//
// A Gateway (captchaq serve --amqp) publishes each task with reply-to
// naming its durable queue captcha.replies.<name> and the id prefixed
// "<name>/". Reply-to travels with the task through retries, checkpoints
// and dead letters; a worker publishes the result through captcha.replies,
// whose alternate exchange sends one for a queue that is gone to
// captcha.results, and tasks with no reply-to go to captcha.results. The
// gateway stores each result before it acks it and drops a copy of one
// recorded; its reply queue is bound to captcha.dlx too, so a task that
// expires is recorded failed (EXPIRED). It publishes a task before it
// records it (docs/engine.md says why), so CheckFor refuses every text the
// stores cannot hold; a record's write that fails is retried for 30 s,
// then kept in memory (GatewayCounts.Unrecorded, at most 10,000). Reports
// (Gateway.Report) go through captcha.reports to a worker, which answers
// each outcome (AttachReports); one expired (an hour) is never answered.
//
// # Ids, broker work and stats
//
// A worker dead-letters (ID_CONFLICT) another task under an id it holds or
// finished (its last idMemoryDefault, 200,000); a Gateway checks its Store.
// A task solved at its first submit costs the publish, delivery and ack of
// three messages (task, checkpoint, result), acked outside transactions;
// nothing is declared per task, and checkpoints are not batched. Stats
// reports tasks waiting, dead letters per minute, the oldest task held and
// the fleet's threads from status beats. Bodies are the user's Task or
// Result JSON, never the provider key.
//
// # Windows that stay
//
// Known limits and their costs (docs/fleet.md has the runs):
//   - A worker killed, or cut off silently, between a submit's answer and
//     its checkpoint's confirm (a broker round trip): a second paid solve,
//     answered once. BenchmarkFleetKill9, killing right after an accepted
//     submit, counts 0–3 a run.
//   - A broker restart hands the tasks of the connections it closed to
//     nobody until it listens again, so a claim's window counts from its
//     last refused connect (Conn.brokerDownAt; one broker node assumed).
//     A worker reconnecting later than that window forfeits: a second
//     paid solve, answered once, bounded by the plan's threads. RabbitMQ may
//     hold a checkpoint queue's dead letters for a timeout (docs/fleet.md).
//   - A partition or SIGSTOP: the worker's tasks wait for the broker's
//     heartbeat timeout (at most three Heartbeat, 15 s), as nothing sooner
//     tells a slow worker from a dead one; its submits held up in the
//     partition are forfeited, each a second paid solve, at most the
//     queue's submits at once (8 at 10 threads).
//   - Copies of an answer, none paid twice: a result whose channel died
//     before its confirm is published again, and RabbitMQ makes no
//     transaction atomic (https://www.rabbitmq.com/semantics.html,
//     "atomicity in single queue: no"), so a broker stopped in the middle
//     of a commit may keep its result and lose its ack; the checkpoint
//     comes back and its adopter answers again from the same captcha id.
//     Each copy is the same answer, which Conn.Collect and the gateway keep
//     once (the recovery tests bound copies by the plan's threads).
//   - A dead worker's tokens wait 3 s to be taken over; a broker crashing
//     mid-commit may lose or double a parked token.
//   - A gateway that stops with tasks published and not yet recorded
//     drops their results; a dead letter replayed before its gateway reads
//     the answer, or whose notice ReplayedNoticesMax newer ones pushed
//     out, is solved again.
package amqp
