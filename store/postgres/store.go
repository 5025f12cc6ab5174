package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/sqlstore"
	"github.com/captchaq/captchaq/internal/startstop"
)

// ErrClosed is returned by every method called after Close. It is
// captchaq.ErrStoreClosed, so callers need not know which store they hold.
var ErrClosed = captchaq.ErrStoreClosed

// ErrOtherOwner matches the error of Open for a database that another
// owner recorded (Config.Owner).
var ErrOtherOwner = errors.New("postgres: store belongs to another owner")

// OwnerError refuses a database recorded by another owner.
type OwnerError struct {
	Name, Owner, Want string
}

func (e *OwnerError) Error() string {
	return fmt.Sprintf("store %s holds the tasks of %s, not of %s: opening it would take over %s's unfinished tasks; give %s a database of its own, or run %s on this one", e.Name, e.Owner, e.Want, e.Owner, e.Want, e.Owner)
}

// Is makes every OwnerError match ErrOtherOwner.
func (e *OwnerError) Is(target error) bool { return target == ErrOtherOwner }

// Store is a captchaq.Store in a PostgreSQL database. It is safe for
// concurrent use, by many goroutines and by many processes on one
// database.
//
// It is a composition of parts that share the connection pool (db), each
// working on its own part of the database: the Store's own methods on
// the tasks, events on the announcements to and from the other Stores,
// fronts on what the replicas of a front share, and reservoirs,
// pingbacks and states on their tables.
type Store struct {
	*db
	events
	fronts
	reservoirs
	pingbacks
	states
	pruner *sqlstore.Pruner
}

// db is what every part of a Store works through.
type db struct {
	name   string // postgres://user@host:port/db, never a password
	pool   *pgxpool.Pool
	log    *slog.Logger
	closed atomic.Bool
}

var _ captchaq.Store = (*Store)(nil)

// Open connects to the database connString names (a URL or key=value
// string, as libpq takes), creates the schema or migrates an older one
// under an advisory lock, so replicas starting at once migrate once, and
// refuses a schema newer than this code knows (*NewerSchemaError). No
// error or log line holds the password.
//
// ctx bounds the opening only; the Store outlives it until Close.
func Open(ctx context.Context, connString string, cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	pc, err := parseConnString(connString)
	if err != nil {
		return nil, err
	}
	if pc.ConnConfig.ConnectTimeout == 0 {
		pc.ConnConfig.ConnectTimeout = cfg.ConnectTimeout
	}
	if !strings.Contains(connString, "pool_max_conns") {
		// A front's handlers each hold a connection for a round trip,
		// and a round trip is mostly waiting: pgxpool's default (the
		// number of CPUs, at least 4) makes them queue for connections.
		pc.MaxConns = max(PoolDefault, 4*int32(runtime.NumCPU()))
	}

	name := Redact(connString)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", name, scrub(err, connString))
	}
	d := &db{name: name, pool: pool, log: cfg.Logger}
	s := &Store{db: d, fronts: fronts{d}, reservoirs: reservoirs{d}, pingbacks: pingbacks{d}, states: states{d},
		events: events{db: d, instance: newInstance(), notify: cfg.Notify, announced: make(chan string, announceBuffer)}}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("store %s cannot be reached: %w", name, scrub(err, connString))
	}
	if err := migrate(ctx, pool, name); err != nil {
		pool.Close()
		return nil, err
	}
	if err := s.claimOwner(ctx, cfg.Owner); err != nil {
		pool.Close()
		return nil, err
	}
	s.announcer = startstop.New(s.announceLoop)
	_ = s.announcer.Start(context.Background())
	if cfg.Retention != RetentionOff {
		s.pruner = newPruner(s, cfg.Retention, cfg.PruneInterval, cfg.Logger, cfg.pruned)
		_ = s.pruner.Start(context.Background())
	}
	return s, nil
}

// Name is the database the store is in, without a password.
func (s *db) Name() string { return s.name }

// Pool is the store's connection pool, for the parts of a front that keep
// state of their own beside the tasks (LISTEN/NOTIFY, shared counters).
func (s *db) Pool() *pgxpool.Pool { return s.pool }

func (s *Store) claimOwner(ctx context.Context, owner string) error {
	if owner == "" {
		return nil
	}
	have, err := s.ClaimOwner(ctx, owner)
	if err != nil {
		return err
	}
	if have != owner {
		return &OwnerError{Name: s.name, Owner: have, Want: owner}
	}
	return nil
}

// ClaimOwner records owner when the database records none, and returns
// the owner it records then: owner, or the one an earlier (or concurrent)
// claim recorded. Config.Owner is the usual way; this one lets processes
// that start at once agree on one name.
func (s *Store) ClaimOwner(ctx context.Context, owner string) (string, error) {
	if s.closed.Load() {
		return "", ErrClosed
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO store_owner (owner) VALUES ($1) ON CONFLICT (one) DO NOTHING`, clean(owner)); err != nil {
		return "", fmt.Errorf("store %s: record owner: %w", s.name, err)
	}
	return s.Owner(ctx)
}

// Owner returns the owner the database records ("" for none).
func (s *Store) Owner(ctx context.Context) (string, error) {
	var have string
	err := s.pool.QueryRow(ctx, `SELECT owner FROM store_owner`).Scan(&have)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return have, s.wrap("Owner", err)
}

// Close stops the prune loop and the watcher, and closes the pool once the calls under way
// have returned their connections. Calls after Close, Close included,
// return ErrClosed.
func (s *Store) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return ErrClosed
	}
	if s.pruner != nil {
		s.pruner.Stop()
	}
	s.mu.Lock()
	if s.watcher != nil {
		s.watcher.Stop()
	}
	s.mu.Unlock()
	s.announcer.Stop()
	s.pool.Close()
	return nil
}

// each calls fn for every record the query returns, stopping at fn's first
// error, which it returns as it is. The rows are read as they come, on one
// connection of the pool.
func (s *db) each(ctx context.Context, op string, fn func(captchaq.Record) error, query string, args ...any) error {
	if s.closed.Load() {
		return ErrClosed
	}
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return s.wrap(op, err)
	}
	defer rows.Close()
	return sqlstore.Each(rows, scanRecord, fn, func(err error) error { return s.wrap(op, err) })
}

// wrap names the store in database errors; ErrNotFound, ErrClosed and
// context errors pass through unchanged.
func (s *db) wrap(op string, err error) error {
	return sqlstore.Wrap(err, s.closed.Load(), s.name, op)
}
