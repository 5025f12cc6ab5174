// Package amqp carries captchaq tasks and results over RabbitMQ, for a fleet
// of machines that share one provider key.
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
//	captcha.delay      headers exchange → captcha.delay.<ms>: retry tiers whose
//	                   TTL dead-letters back to captcha.types under the kind
//	captcha.inflight   headers exchange → captcha.inflight.<owner>: checkpoints
//	captcha.status     fanout for status beats (see Stats)
//	captcha.replies.G  gateway G's reply queue: the results of the tasks it
//	                   published, and a copy of every dead letter (see Gateway)
//	captcha.threads    the plan's thread tokens (WorkerConfig.SharedThreads),
//	                   with captcha.threads.filled and captcha.threads.lock
//
// Task queues dead-letter to captcha.dlx, so a task that waits longer than
// Config.TaskTTL (5 minutes) lands in captcha.failed with x-death reason
// "expired". Transient failures never go there: Publisher.Retry parks the
// task in a delay tier. Only permanent failures and exhausted retries are
// dead letters (Publisher.DeadLetter), with reason, error code and attempts
// in headers; DeadLetters lists them and Replay sends them back.
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
// consumer dies, the checkpoint goes back to ready, its lease
// (Config.InflightLease) runs out, and the queue dead-letters it to
// captcha.types under its kind: whoever takes it sees the captcha id and
// polls instead of submitting again. A checkpoint held longer than
// Config.InflightRefresh must be republished and the old delivery acked by
// its holder, so the
// broker's consumer_timeout (30 minutes) never fires. Idle checkpoint
// queues delete themselves after an hour. Each checkpoint names the
// worker run that published it (captchaq-run): a worker started again
// under the same owner name rejects the checkpoints of the run before,
// which sends them back to the fleet at once instead of dropping them.
//
// A worker submits a task only while it holds it: its delivery's channel
// is alive, or its checkpoint is confirmed (captchaq.Config.Admit). A task
// whose channel died is back in its queue for the fleet, so the worker
// hands its copy back instead of paying for a second solve. One window
// stays: a connection lost between the provider's answer to a submit and
// its checkpoint's confirm puts the task back for the fleet while its
// captcha id is not yet durable, and another worker may solve it again.
// The submit cap bounds how many tasks are in that window at once.
//
// # Threads: one plan for the fleet
//
// A plan's threads belong to the account, not to a machine. With
// WorkerConfig.SharedThreads (captchaq worker's default) the workers of a
// prefix hold them as tokens: captcha.threads holds one message per thread
// and can never hold more than N ready (x-max-length N, overflow
// reject-publish; a worker started with another N gets a *ConflictError).
// A worker holds an unacknowledged token for each task it has at the
// provider or is submitting, and its queue submits only while it holds
// more tokens than that (captchaq.ThreadPool). Tokens are never acked. A
// worker gives one back by requeueing it (nack), and when a worker dies or
// loses its connection the broker requeues what it held by itself: no
// coordinator, no lease to renew.
//
// Filling. Before it takes any task, a worker declares captcha.threads
// and, holding captcha.threads.lock, looks for captcha.threads.filled. The
// lock is an exclusive queue: one connection at a time can declare it, and
// the broker deletes it with that connection, so a worker that dies while
// filling releases it. If the marker is missing, the worker publishes the
// tokens (persistent, so a broker restart keeps them) in one transaction,
// then declares the marker. A worker that died between the commit and the
// marker left its tokens ready, and nobody consumes before the marker, so
// the next one tops up to N. To change N, stop the workers and delete
// captcha.threads and captcha.threads.filled.
//
// Sharing. Each worker consumes tokens on a channel of its own whose
// prefetch (global qos) caps what the broker sends it. Its demand is its
// tasks at the provider plus those waiting for a thread, at most N. Only a
// worker that wants more than it holds consumes; a satisfied one cancels
// its consumer, so a worker with no work holds no token, and the token
// queue's consumer count is the number of hungry workers. About once a
// second a worker reads the queue (a passive declare): while no token is
// ready and other workers are hungry, its target is its fair share,
// ceil(N / (hungry others + 1)), and it gives back tokens above it. A
// hungry worker takes up to its target and one more, so a token given
// back goes at once to a worker that needs it rather than waiting for a
// refresh. The queue may use only its target (Held), so a worker over its
// share submits nothing new and gives back each token its tasks free.
// Tokens above the demand go back after 200 ms, so a task that arrives
// just after another finished reuses the thread with no broker traffic; tokens of tasks at the provider are never given back. The
// "no free thread" window (AIMD) stays on top, as the guard against other
// users of the key.
//
// Broker work. A busy worker keeps its tokens from task to task, so the
// pool costs nothing per task while the fleet is saturated; tokens move
// only when demand moves between workers (a delivery and a nack each). In
// BenchmarkFleetRealistic/shared (1,000 tasks, 50 threads, three workers)
// 0.08–0.13 token deliveries per task, against three messages per task
// for the task itself (below); in BenchmarkFleetInstant 0.06–0.07. Plus, per
// worker, a passive declare a second and a consume or cancel when it
// turns hungry or satisfied. Alternatives: splitting the plan (each worker
// --threads N/k) needs k and idles the threads of a worker with no work;
// AIMD alone measured 0.45–0.72 utilization with up to 25% "no free
// thread" answers; a counter in another store (Redis, a database) is a second
// service to run, and a dead worker's share returns only when a lease
// it no longer renews runs out, where the broker requeues at once.
//
// Measured (BenchmarkFleetKill9: 150 Turnstile tasks of 0.5–2 s, a
// 10-thread plan, three worker processes each with --threads 10, on a
// loaded 2-core machine), saturated utilization and "no free thread"
// answers per run:
//
//	shared                                0.96, 0.98; none
//	shared, one SIGKILLed and replaced    0.89–0.91 (6 runs);
//	                                      3–6 of 153–156 submits (2–4%)
//	own --threads each, SIGKILL+replace   0.64–0.91 (8 runs, median 0.73);
//	                                      24–49 of 174–199 submits
//	one process with the plan             0.96–0.99
//
// The SIGKILL runs' refusals are the dead worker's tasks, still at the
// provider while its tokens are back (see Limits): they miss the 1% goal
// there. Each also halves the refused worker's window and holds its
// submits for a while; that is the likely cause of the gap to 0.96, not
// measured apart. At shorter solves (BenchmarkFleetRealistic, 0.4 s,
// 100 ms polls) shared is 0.87–0.89, as one process with the same plan
// (0.88–0.89), against 0.45–0.62 with own windows, with no "no free
// thread" answer: what keeps both below 0.92 there is the poll interval
// against the solve time, not the sharing.
//
// Limits. A worker killed with tasks at the provider hands its tokens back
// at once while those tasks run on there until solved (its checkpoints
// then send them to be polled): for up to one solve time the fleet may run
// up to that worker's threads over N, and the provider's "no free thread"
// answers, which AIMD absorbs, are the cost. A worker whose connection
// drops likewise; it submits nothing until its pool's channel is back.
//
// # Gateways: results by reply-to
//
// A Gateway (captchaq serve --amqp) publishes each task with the AMQP
// reply-to property naming its own durable reply queue,
// captcha.replies.<name>, and with the task id prefixed "<name>/", so
// gateways that share a fleet never collide on ids. Reply-to is a message
// property: it travels with the task through retries (the delay queues),
// checkpoints and dead letters, and Replay keeps it. A worker publishes the
// result to the reply-to queue when it is a reply queue of this prefix;
// otherwise (no reply-to, as for tasks from enqueue, or any other queue) to
// captcha.results, so collect works as before. A reply queue that is gone
// makes the result unroutable; it then goes to captcha.results instead, and is
// not lost. Each gateway gets exactly its own results, however many share
// the fleet.
//
// Results wait in the reply queue while their gateway is down. The
// gateway stores each before it acks it, and answers a task once: a copy
// of a result it has recorded is acked and dropped. The reply queue is
// also bound to captcha.dlx: a task whose TTL runs out in a task queue
// dies without a worker to report it, and the gateway records it failed
// (EXPIRED) from that copy; it ignores the other dead letters (a worker
// reports its own, and other gateways' are theirs).
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
// A task solved at its first submit costs the broker the publish (with a
// confirm), delivery and ack of three messages: the task (to a worker),
// its checkpoint (back to that worker) and its result (to collect). Acks
// settled in a row travel as one multiple ack. Nothing is declared per
// task (a worker declares its checkpoint queue once) and nothing asks the
// management API. Checkpoints are not batched: a checkpoint that waited
// for others, for a timer or for the confirm of another message, would
// widen the window above.
//
// # Connection
//
// Conn dials with timeouts, declares the topology under a timeout, and
// reconnects with exponential backoff and jitter. Every channel has a
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
// Beside its queue, a running Worker has three background loops, each an
// internal/startstop Loop on the same background context: the refresher
// (refresher.go: republishes checkpoints before consumer_timeout), the
// beater (beater.go: status beats) and the stale sweeper (sweeper.go:
// hands back tasks held on a dead channel). When Run's ctx ends, the
// worker stops in this order: it stops taking tasks and hands back those
// not yet at the provider; lets the queue finish those at the provider for
// up to Grace (captchaq's Queue.Shutdown); ends the background context and
// closes the checkpoint and reports consumers; stops the three loops and
// waits for them and the report forwarder; gives its shared threads back
// (SharedThreads), once no task of its own is at the provider; and closes
// its publisher last.
package amqp
