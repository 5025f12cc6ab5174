package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// migrationFiles holds the schema's migrations, NNN_name.sql: file NNN
// takes the schema from version NNN-1 to NNN. Never edit one that has
// shipped; add the next.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrations are the embedded migrations in order; migrations[i] makes
// version i+1.
var migrations = mustLoadMigrations(migrationFiles)

// schemaVersion is the version this code writes and reads.
var schemaVersion = len(migrations)

// migrateLock is the advisory lock that replicas starting at once take
// around the schema: one migrates, the others wait and find it done.
// The number is the first 8 bytes of "captchaq" read as an integer.
const migrateLock int64 = 0x6361707463686171

func mustLoadMigrations(fsys fs.FS) []string {
	ms, err := loadMigrations(fsys)
	if err != nil {
		panic(err)
	}
	return ms
}

func loadMigrations(fsys fs.FS) ([]string, error) {
	names, err := fs.Glob(fsys, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	var out []string
	for i, name := range names {
		base := strings.TrimPrefix(name, "migrations/")
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v != i+1 {
			return nil, fmt.Errorf("postgres: migration %s: want the name %03d_NAME.sql", name, i+1)
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		out = append(out, string(b))
	}
	return out, nil
}

// migrate brings the database's schema up to schemaVersion in one
// transaction under migrateLock. It refuses, changing nothing, a database
// whose tables look like a captchaq store's without being one, and a
// schema newer than this code knows.
func migrate(ctx context.Context, pool *pgxpool.Pool, name string) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("store %s: %w", name, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrateLock); err != nil {
		return fmt.Errorf("store %s: take the schema lock: %w", name, err)
	}
	version, err := schemaOf(ctx, tx, name)
	if err != nil {
		return err
	}
	if version < 0 {
		if _, err := tx.Exec(ctx, `CREATE TABLE schema_version (version integer NOT NULL);
			INSERT INTO schema_version (version) VALUES (0)`); err != nil {
			return fmt.Errorf("store %s: create schema: %w", name, err)
		}
		version = 0
	}
	if version == schemaVersion {
		return nil
	}
	for v := version; v < schemaVersion; v++ {
		if _, err := tx.Exec(ctx, migrations[v]); err != nil {
			return fmt.Errorf("store %s: migrate schema to version %d: %w", name, v+1, err)
		}
	}
	if _, err := tx.Exec(ctx, `UPDATE schema_version SET version = $1`, schemaVersion); err != nil {
		return fmt.Errorf("store %s: record schema version: %w", name, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("store %s: commit schema: %w", name, err)
	}
	return nil
}

// schemaOf returns the schema version of the database's current schema
// (search_path), -1 when it holds no captchaq table, or an error when it
// cannot be used. It only reads.
func schemaOf(ctx context.Context, tx pgx.Tx, name string) (int, error) {
	var hasVersion, hasTasks bool
	err := tx.QueryRow(ctx, `SELECT to_regclass('schema_version') IS NOT NULL, to_regclass('tasks') IS NOT NULL`).Scan(&hasVersion, &hasTasks)
	if err != nil {
		return 0, fmt.Errorf("store %s: read the schema: %w", name, err)
	}
	switch {
	case !hasVersion && hasTasks:
		return 0, fmt.Errorf("store %s has a tasks table but no schema_version: it is not a captchaq store; captchaq leaves it as it is: choose another database (or schema, with search_path)", name)
	case !hasVersion:
		return -1, nil
	}
	var version int
	err = tx.QueryRow(ctx, `SELECT version FROM schema_version`).Scan(&version)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("store %s has an empty schema_version table: it was not written by captchaq, or was edited; choose another database", name)
	}
	if err != nil {
		return 0, fmt.Errorf("store %s: read schema_version: %w", name, err)
	}
	if version > schemaVersion {
		return 0, &NewerSchemaError{Name: name, Version: version, Known: schemaVersion}
	}
	return version, nil
}

// NewerSchemaError refuses a database that a newer captchaq migrated.
type NewerSchemaError struct {
	Name           string
	Version, Known int
}

func (e *NewerSchemaError) Error() string {
	return fmt.Sprintf("store %s has schema version %d, newer than this captchaq knows (%d): a newer captchaq migrated it; upgrade this one (every process on one database must be at least as new as the newest that opened it)", e.Name, e.Version, e.Known)
}
