// Package postgres is captchaq's shared store: every task, checkpoint,
// result and dead letter in one PostgreSQL database, through
// github.com/jackc/pgx/v5 and its pool, so that several processes (the
// replicas of one front, see docs/fronts.md) see one state.
//
//	s, err := postgres.Open(ctx, "postgres://captchaq@db.example/captchaq", postgres.Config{})
//
// The connection string is libpq's, as a URL or key=value pairs; the pool
// takes its size from pool_max_conns (default: the larger of 4 and the
// number of CPUs), and the password from the string, PGPASSWORD or
// ~/.pgpass. No error and no log line of the store holds the password:
// Name and Redact give postgres://USER@HOST:PORT/DATABASE.
//
// # Schema and migrations
//
// The migrations are SQL files embedded in the binary
// (migrations/NNN_name.sql). Open applies those the database lacks in one
// transaction that holds an advisory lock (pg_advisory_xact_lock), so
// replicas starting at once migrate once and the others wait for it. A
// database whose schema_version is newer than this code knows is refused
// with a *NewerSchemaError that says to upgrade; a database with a tasks
// table that is not captchaq's is refused and left as it is. The tables
// live in the connection's search_path (public unless the string sets
// options=-csearch_path=…), so one database can hold several stores in
// several schemas.
//
//	schema_version(version integer)   one row; the migrations applied
//	tasks(
//	  seq          bigint identity PRIMARY KEY  -- Record.Seq; never reused
//	  id           text UNIQUE                  -- Task.ID
//	  status       text                         -- queued, inflight, solved, failed
//	  priority, tenant, method,
//	  params       text                         -- JSON object, {} when none
//	  deadline     timestamptz, max_attempts, proxy, proxy_type, pingback,
//	  fingerprint  text                         -- Task.Fingerprint()
//	  captcha_id   text                         -- the attempt in flight; on a final task, Result.CaptchaID
//	  attempts, not_before, last_error, last_error_code, accepted_at, submitted_at,
//	  result_method, result_kind, result_token,
//	  result_answer text                        -- Result.Answer, verbatim JSON
//	  result_error, result_error_code, result_attempts, result_solve_seconds,
//	  result_expires_at, result_accepted_at, result_submitted_at,
//	  finished_at  timestamptz                  -- NULL until final
//	  result_provider, result_price,
//	  result_abandoned text[]
//	  result_reservoir text                     -- Result.Reservoir (version 8)
//	  report, reported_at
//	  pingback_owed timestamptz                 -- since when its pingback is owed; NULL when none
//	  pingback_lease timestamptz                -- until when a sender holds it (captchaq.PingbackLedger)
//	)
//	store_owner(one boolean PRIMARY KEY, owner text)   at most one row: Config.Owner
//	reservoir_tokens(                 reservoirs' tokens, captchaq.ReservoirStore (version 8)
//	  reservoir, id text                        -- PRIMARY KEY: the reservoir's name, Result.ID
//	  expires_at   timestamptz                  -- Result.ExpiresAt; indexed: TakeToken's order
//	  method, kind, token, answer, attempts, captcha_id, solve_seconds, provider, price,
//	  abandoned text[], accepted_at, submitted_at, finished_at  -- the rest of the solved Result
//	)
//	queue_state(name text PRIMARY KEY, value bytea)   captchaq.StateStore (version 9)
//
// Times are timestamptz (microseconds). PostgreSQL text holds neither NUL
// bytes nor invalid UTF-8: Params are stored as JSON text, which holds any
// string; a task with either in another field is refused as invalid
// (captchaq.TaskError naming the field; every door refuses both in any
// text before, with Task.Validate), an id with either is never found,
// and a provider's answer with either is stored with U+FFFD in their place.
// The unique index on id holds at most 2704 bytes an entry: an id is at
// most captchaq.MaxIDBytes.
//
// # Round trips
//
// Each call is one statement on a pooled connection, committed on its
// own: Enqueue sends its inserts as one batch (one round trip, one implicit
// transaction; a second round trip reads the records of ids already
// stored), Checkpoint and Retry update and read the status in one
// statement. PostgreSQL commits concurrent calls together (group commit),
// so no writer goroutine is needed as in store/sqlite.
//
// # Several processes on one database
//
// The replicas of a front (docs/fronts.md) share more than the tasks:
// FinishIf stores a result only while the record is as its caller read it
// (one of several replicas stores it); Watch tells a Store what the others
// accepted (Config.Notify) and finished, over LISTEN/NOTIFY, announced
// after each commit in batches (events.go says why); IDBlock hands out
// blocks of task ids from a sequence, and IDKey the key, made once, with
// which every replica permutes them; Admit keeps a client's
// max_inflight (front_slots, under the client's advisory lock) and rate
// (a token bucket a client, front_rates) across them, in one round trip;
// PendingHeads and Heads read records without their params (an image
// task's body), for a replica that reads the others' news and the
// front's unfinished tasks again (their states and times); Activate holds
// the database's active-queue lock for a queue that solves tasks itself;
// ClaimOwner lets processes that start at once agree on one owner;
// TakePingback and ClaimPingbacks lease a pingback owed to one replica,
// at the database's clock (FOR UPDATE SKIP LOCKED: claimers at once take
// different rows); TakeToken deletes and returns a reservoir's token in
// one statement, FOR UPDATE SKIP LOCKED too, so replicas taking at once
// neither wait for each other nor get one token twice, and one that dies
// after its commit loses that token only.
//
// Announcements are not durable. One a process never sent (it died after
// its commit, or its queue of announcements was full), one whose NOTIFY
// failed after the commit, and one sent while a watcher was between
// connections are lost; only the last is told (EventResync). So a Watch
// caller reads again on a timer too: the amqp gateway reads the unfinished
// tasks' heads (PendingHeads) every ResyncEvery (30 s) and takes what it
// missed that is over 10 s old, so a count it keeps from the news is wrong
// for at most about 40 s. The cost is that read, about 360 bytes an
// unfinished task a replica each time, and nothing a task.
//
// # Background loops and Close
//
// Open starts the announcer (events.go) and, unless Retention is
// RetentionOff, the pruner (pruner.go, an internal/sqlstore Pruner, as
// store/sqlite's), which deletes final tasks Config.Retention after they
// finished, at Open and every Config.PruneInterval; Watch starts the
// watcher on a connection of its own; Activate starts a check of its
// lock's connection, stopped by Release. Close stops, in order, the pruner, the watcher and the
// announcer (which sends what is queued), then closes the pool, which
// waits for the connections in use to come back.
package postgres
