package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// migrations[i] takes the schema from version i to i+1. Never edit one that
// has shipped; append a new one.
var migrations = []string{
	`CREATE TABLE tasks (
		seq                  INTEGER PRIMARY KEY AUTOINCREMENT,
		id                   TEXT    NOT NULL UNIQUE,
		status               TEXT    NOT NULL CHECK (status IN ('queued', 'inflight', 'solved', 'failed')),
		priority             INTEGER NOT NULL,
		tenant               TEXT    NOT NULL,
		method               TEXT    NOT NULL,
		params               TEXT    NOT NULL,
		deadline             TEXT,
		max_attempts         INTEGER NOT NULL,
		proxy                TEXT    NOT NULL,
		proxy_type           TEXT    NOT NULL,
		pingback             TEXT    NOT NULL,
		captcha_id           TEXT    NOT NULL DEFAULT '',
		attempts             INTEGER NOT NULL DEFAULT 0,
		not_before           TEXT,
		last_error           TEXT    NOT NULL DEFAULT '',
		last_error_code      TEXT    NOT NULL DEFAULT '',
		accepted_at          TEXT    NOT NULL,
		submitted_at         TEXT,
		result_method        TEXT,
		result_kind          TEXT,
		result_token         TEXT,
		result_answer        TEXT,
		result_error         TEXT,
		result_error_code    TEXT,
		result_attempts      INTEGER,
		result_solve_seconds REAL,
		result_expires_at    TEXT,
		result_accepted_at   TEXT,
		result_submitted_at  TEXT,
		finished_at          TEXT
	);
	CREATE INDEX tasks_status_seq ON tasks (status, seq);
	CREATE INDEX tasks_finished_at ON tasks (finished_at) WHERE finished_at IS NOT NULL;`,
	// Version 2: each task's fingerprint (tasks stored before it have '',
	// and are compared by their task), and the store's owner.
	`ALTER TABLE tasks ADD COLUMN fingerprint TEXT NOT NULL DEFAULT '';
	CREATE TABLE store_owner (owner TEXT NOT NULL);`,
	// Version 3: which provider a result came from, its price, and the
	// providers that went down with the task in flight (several providers).
	`ALTER TABLE tasks ADD COLUMN result_provider TEXT;
	ALTER TABLE tasks ADD COLUMN result_price REAL;
	ALTER TABLE tasks ADD COLUMN result_abandoned TEXT;`,
	// Version 4: a client's report on a solved task's answer (once), and
	// an index of each tenant's dead letters, so one client's are found
	// without reading the others'.
	`ALTER TABLE tasks ADD COLUMN report TEXT NOT NULL DEFAULT '';
	ALTER TABLE tasks ADD COLUMN reported_at TEXT;
	CREATE INDEX tasks_dead_by_tenant ON tasks (tenant, seq) WHERE status = 'failed';`,
	// Version 5: small named values of the queue kept across restarts,
	// such as its providers' refusals of types (LoadState, SaveState).
	`CREATE TABLE queue_state (name TEXT PRIMARY KEY, value BLOB NOT NULL);`,
	// Version 6: the pingbacks owed (captchaq.PingbackLedger): since when
	// (NULL: none), and until when a sender holds one.
	`ALTER TABLE tasks ADD COLUMN pingback_owed TEXT;
	ALTER TABLE tasks ADD COLUMN pingback_lease TEXT;
	CREATE INDEX tasks_pingback_owed ON tasks (pingback_owed) WHERE pingback_owed IS NOT NULL;`,
	// Version 7: reservoirs' tokens (captchaq.ReservoirStore), each a
	// solved result, taken in the order they expire; which reservoir's
	// token answered a task (Result.Reservoir).
	`ALTER TABLE tasks ADD COLUMN result_reservoir TEXT;
	CREATE TABLE reservoir_tokens (
		reservoir     TEXT    NOT NULL,
		id            TEXT    NOT NULL,
		method        TEXT    NOT NULL,
		kind          TEXT    NOT NULL,
		token         TEXT    NOT NULL,
		answer        TEXT,
		attempts      INTEGER NOT NULL,
		captcha_id    TEXT    NOT NULL,
		solve_seconds REAL    NOT NULL,
		expires_at    TEXT    NOT NULL,
		provider      TEXT    NOT NULL,
		price         REAL    NOT NULL,
		abandoned     TEXT,
		accepted_at   TEXT,
		submitted_at  TEXT,
		finished_at   TEXT,
		PRIMARY KEY (reservoir, id)
	);
	CREATE INDEX reservoir_tokens_expiry ON reservoir_tokens (reservoir, expires_at, id);`,
}

// schemaVersion is the version this code writes and reads.
var schemaVersion = len(migrations)

// migrate brings the file's schema up to schemaVersion in one transaction.
// It refuses a file with tables that is not a captchaq store, and one
// written by a newer captchaq, without changing either.
func migrate(ctx context.Context, conn *sql.Conn, path string) error {
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("store %s: %w", path, err)
	}
	err := migrateTx(ctx, conn, path)
	if err != nil {
		_, _ = conn.ExecContext(ctx, "ROLLBACK")
		return err
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("store %s: commit schema: %w", path, err)
	}
	return nil
}

func migrateTx(ctx context.Context, conn *sql.Conn, path string) error {
	version, err := schemaOf(ctx, conn, path)
	if err != nil {
		return err
	}
	if version < 0 {
		if _, err := conn.ExecContext(ctx, `CREATE TABLE schema_version (version INTEGER NOT NULL);
			INSERT INTO schema_version (version) VALUES (0)`); err != nil {
			return fmt.Errorf("store %s: create schema: %w", path, err)
		}
		version = 0
	}
	for v := version; v < schemaVersion; v++ {
		if _, err := conn.ExecContext(ctx, migrations[v]); err != nil {
			return fmt.Errorf("store %s: migrate schema to version %d: %w", path, v+1, err)
		}
	}
	if version != schemaVersion {
		if _, err := conn.ExecContext(ctx, `UPDATE schema_version SET version = ?`, schemaVersion); err != nil {
			return fmt.Errorf("store %s: record schema version: %w", path, err)
		}
	}
	return nil
}

// schemaOf returns the store's schema version, -1 for a database without
// tables, or an error when the file is not a captchaq store this code can
// use. It only reads.
func schemaOf(ctx context.Context, conn *sql.Conn, path string) (int, error) {
	var tables int
	if err := conn.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE type = 'table'`).Scan(&tables); err != nil {
		return 0, fmt.Errorf("store %s is not a usable SQLite database (%v); captchaq leaves it as it is: move it aside or choose another path", path, err)
	}
	if tables == 0 {
		return -1, nil
	}
	var version int
	err := conn.QueryRowContext(ctx, `SELECT version FROM schema_version`).Scan(&version)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("store %s has an empty schema_version table: it was not written by captchaq, or was edited; move it aside", path)
	}
	if err != nil {
		return 0, fmt.Errorf("store %s is an SQLite database but not a captchaq store (%v); captchaq leaves it as it is: choose another path", path, err)
	}
	if version > schemaVersion {
		return 0, fmt.Errorf("store %s has schema version %d, newer than this captchaq knows (%d): upgrade captchaq", path, version, schemaVersion)
	}
	return version, nil
}
