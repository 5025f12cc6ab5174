// Package sqlite is captchaq's embedded store: every task, checkpoint,
// result and dead letter in one SQLite file, through the pure-Go
// modernc.org/sqlite driver (no cgo).
//
//	s, err := sqlite.Open(ctx, path, sqlite.Config{})
//
// # Durability and speed
//
// The file is in WAL mode. Every write goes through one goroutine that
// takes all the writes waiting when it is free, commits them in one
// transaction, and only then answers each caller (group commit). An
// acknowledged Enqueue, Checkpoint or Finish is therefore committed; how
// far it is pushed to the disk is Config.Synchronous:
//
//   - SynchronousNormal (default): survives the process dying in any way,
//     kill -9 included; a power loss may lose the latest commits (the file
//     stays consistent).
//   - SynchronousFull: also survives a power loss, at one fsync per group
//     commit.
//
// Committed pages reach the database file itself through checkpoints. A
// goroutine of the store runs them on a connection of its own, each time
// the writer has added 1,000 pages to the WAL, and commits go on while it
// copies; by default SQLite would run them inside a commit, and every
// caller waiting on the writer would wait for the copy and its two fsyncs.
// Once the WAL passes 4,096 pages (16 MiB) the writer copies the pages
// added since the last checkpoint, between two commits, and the WAL starts
// over: the -wal file beside the store stays within 32 MiB.
//
// On a shared 2-core machine BenchmarkLifecycle measures 23,000 to 28,000
// task lifecycles (Enqueue, Checkpoint, Finish) per second with 64
// concurrent callers (14,000 to 16,000 with SynchronousFull), against
// 8,000 to 9,700 (1,400 to 1,650) for a single caller, which pays a commit
// for every call.
//
// # One process per file
//
// While open, a store holds an exclusive flock on PATH.lock (beside the
// file) with its pid in it. A second Open of the same path fails at once
// with an *InUseError: "store PATH is in use by another captchaq process
// (pid N)". The kernel drops the lock when the holder dies, so a killed
// process never leaves a stale lock; the lock file itself stays. The lock,
// like SQLite's own WAL locking, needs a local file system: keep the store
// off NFS and other network mounts.
//
// Open refuses, with an error naming the path and without writing to it, a
// directory, a file it cannot read and write, a file that is not SQLite, an
// SQLite database that is not a captchaq store, and a store with a newer
// schema. An older schema is migrated in one transaction (version 1 files,
// before fingerprints, keep their tasks; those are compared by their task;
// results stored before version 3 name no provider and no price).
// A store records its owner (Config.Owner: "batch", "serve", "gateway
// NAME"); Open with another owner is refused with an *OwnerError.
//
// OpenReader opens an existing store for reading only: no file is created,
// no lock is taken (it works while a queue has the store open) and the
// schema is not migrated.
//
// # Schema
//
// The file can be read with the sqlite3 shell while captchaq runs (WAL lets
// readers and the writer work at once). Times are UTC text,
// 2006-01-02T15:04:05.000000000Z, fixed width so that text order is time
// order; NULL means none.
//
//	schema_version(version INTEGER)   one row; the migrations applied
//	tasks(
//	  seq          INTEGER PRIMARY KEY AUTOINCREMENT  -- Record.Seq; never reused
//	  id           TEXT UNIQUE       -- Task.ID
//	  status       TEXT              -- queued, inflight, solved, failed
//	  priority, tenant, method,
//	  params       TEXT              -- JSON object, {} when none
//	  deadline, max_attempts, proxy, proxy_type, pingback
//	  captcha_id   TEXT              -- the attempt in flight; on a final task, the one that ended it (Result.CaptchaID)
//	  attempts     INTEGER
//	  not_before, last_error, last_error_code,
//	  accepted_at, submitted_at
//	  result_method, result_kind, result_token,
//	  result_answer TEXT             -- Result.Answer, verbatim JSON
//	  result_error, result_error_code, result_attempts, result_solve_seconds,
//	  result_expires_at, result_accepted_at, result_submitted_at,
//	  finished_at  TEXT              -- Result.FinishedAt; NULL until final
//	  fingerprint  TEXT              -- Task.Fingerprint(); '' for tasks stored at version 1
//	  result_provider TEXT           -- Result.Provider (version 3)
//	  result_price    REAL           -- Result.Price (version 3)
//	  result_abandoned TEXT          -- Result.Abandoned, a JSON array; NULL when none (version 3)
//	  result_reservoir TEXT          -- Result.Reservoir (version 7)
//	  report, reported_at            -- Record.Report (version 4)
//	  pingback_owed TEXT             -- since when its pingback is owed; NULL when none (version 6)
//	  pingback_lease TEXT            -- until when a sender holds that pingback (captchaq.PingbackLedger)
//	)
//	store_owner(owner TEXT)           at most one row: Config.Owner of the first opener
//	queue_state(name, value)          the queue's named values kept across restarts (version 5)
//	reservoir_tokens(                 reservoirs' tokens, captchaq.ReservoirStore (version 7)
//	  reservoir, id TEXT              -- PRIMARY KEY: the reservoir's name, Result.ID
//	  expires_at   TEXT              -- Result.ExpiresAt: TakeToken takes the soonest first
//	  method, kind, token, answer, attempts, captcha_id, solve_seconds, provider, price,
//	  abandoned, accepted_at, submitted_at, finished_at  -- the rest of the solved Result
//	)
//	INDEX tasks_status_seq ON tasks(status, seq)       -- Pending, Results, dead letters
//	INDEX tasks_finished_at ON tasks(finished_at)      -- pruning
//	INDEX reservoir_tokens_expiry ON reservoir_tokens(reservoir, expires_at, id)  -- TakeToken
//
// A token is taken in one statement of the writer (DELETE … RETURNING),
// so of two takes one gets it; tokens stay across a restart until taken
// or dropped (DropTokens).
//
// For example:
//
//	sqlite3 ~/.local/share/captchaq/batch-tasks.jsonl-HASH.db \
//	  "SELECT id, status, attempts, result_error_code FROM tasks WHERE status = 'failed' ORDER BY seq"
//
// # Retention
//
// Final tasks are deleted Config.Retention (default 7 days) after they
// finished, by a loop that runs at Open and every Config.PruneInterval
// (default 1h). RetentionOff keeps them until Prune is called.
//
// # Background loops and Close
//
// Open starts three loops, each an internal/startstop Loop: the writer
// (writer.go), the checkpointer (checkpointer.go) and, unless Retention is
// RetentionOff, the pruner (pruner.go, an internal/sqlstore Pruner, as
// store/postgres's). Close stops them in this order, each waited for
// before the next: the pruner, whose deletes go through the writer; the
// writer, which commits and answers every write it took while later
// writes fail with ErrClosed; the checkpointer, which the writer kicks.
// Only then are the connections closed and the lock file released.
package sqlite
