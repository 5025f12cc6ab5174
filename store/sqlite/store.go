package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/sqlstore"
)

// ErrClosed is returned by every method called after Close. It is
// captchaq.ErrStoreClosed, so callers need not know which store they hold.
var ErrClosed = captchaq.ErrStoreClosed

// Store is a captchaq.Store in one SQLite file. It is safe for concurrent
// use; writes from many goroutines share commits (see the package doc).
type Store struct {
	path   string
	db     *sql.DB
	conn   *sql.Conn // the writer's
	st     *statements
	w      *writer
	ckpt   *checkpointer
	pruner *sqlstore.Pruner
	lock   *fileLock
	closed atomic.Bool
}

var _ captchaq.Store = (*Store)(nil)

// sqliteHeader starts every SQLite database file.
var sqliteHeader = []byte("SQLite format 3\x00")

// Open opens the store at path, creating the file and its schema when the
// file does not exist, and migrating an older schema. It fails with an error
// naming path, and changes nothing in the file, when path is a directory,
// cannot be read and written, is not an SQLite database, is an SQLite
// database of something other than captchaq, or has a newer schema. While
// the store is open it holds an exclusive lock on PATH.lock; a second Open
// of the same path, from this process or another, fails at once with an
// *InUseError (errors.Is ErrInUse) naming the holder's pid.
//
// ctx bounds the opening only; the Store outlives it until Close.
func Open(ctx context.Context, path string, cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if path == "" {
		return nil, errors.New("sqlite: store path is empty: give a file path, or use DefaultPath()")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", path, err)
	}
	if fi, err := os.Stat(abs); err == nil && fi.IsDir() {
		return nil, fmt.Errorf("store %s is a directory: give the path of a file in it, such as %s", abs, filepath.Join(abs, "captchaq.db"))
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("store %s cannot be opened: %w", abs, err)
	}
	lock, err := lockStore(abs)
	if err != nil {
		return nil, err
	}
	s, err := open(ctx, abs, cfg, lock)
	if err != nil {
		_ = lock.unlock()
		return nil, err
	}
	return s, nil
}

func open(ctx context.Context, path string, cfg Config, lock *fileLock) (*Store, error) {
	if err := checkHeader(path); err != nil {
		return nil, err
	}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", cfg.BusyTimeout.Milliseconds()))
	q.Add("_pragma", "synchronous("+string(cfg.Synchronous)+")")
	dsn := (&url.URL{Scheme: "file", Path: path}).String() + "?" + q.Encode()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", path, err)
	}
	db.SetMaxIdleConns(4)
	db.SetConnMaxIdleTime(time.Minute)
	s := &Store{path: path, db: db, lock: lock}
	ckptConn, err := s.init(ctx, cfg)
	if err != nil {
		if s.st != nil {
			s.st.close()
		}
		for _, c := range []*sql.Conn{s.conn, ckptConn} {
			if c != nil {
				_ = c.Close()
			}
		}
		_ = db.Close()
		return nil, err
	}
	s.ckpt = newCheckpointer(ckptConn, path, cfg.Logger, cfg.checkpointed)
	_ = s.ckpt.Start(context.Background())
	s.w = newWriter(s.conn, s.st, cfg.MaxBatch, s.ckpt)
	s.w.start()
	if cfg.Retention != RetentionOff {
		s.pruner = newPruner(s, cfg.Retention, cfg.PruneInterval, cfg.Logger, cfg.pruned)
		_ = s.pruner.Start(context.Background())
	}
	return s, nil
}

// checkHeader refuses a file that is not empty and not an SQLite database,
// before SQLite touches it, and one that cannot be opened for writing. A
// file that does not exist yet is created for its owner alone (0600):
// the store holds tasks with their proxies' passwords, and SQLite gives
// the WAL and its index the database file's mode.
func checkHeader(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return fmt.Errorf("store %s cannot be created: %w", path, err)
		}
		return f.Close()
	}
	if err != nil {
		return fmt.Errorf("store %s cannot be opened for reading and writing: %w", path, err)
	}
	defer f.Close()
	head := make([]byte, len(sqliteHeader))
	n, err := io.ReadFull(f, head)
	if n == 0 && (err == io.EOF) {
		return nil // empty: SQLite makes it a new database
	}
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("store %s cannot be read: %w", path, err)
	}
	if !bytes.Equal(head[:n], sqliteHeader) {
		return fmt.Errorf("store %s is not an SQLite database (it starts with %q); captchaq leaves it as it is: move it aside or choose another path", path, head[:n])
	}
	return nil
}

// init sets up the writer's connection and returns the checkpointer's.
func (s *Store) init(ctx context.Context, cfg Config) (*sql.Conn, error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, s.unusable(err)
	}
	s.conn = conn
	// Look before switching to WAL, which rewrites the header of a
	// database that is not ours.
	if _, err := schemaOf(ctx, conn, s.path); err != nil {
		return nil, err
	}
	var mode string
	if err := conn.QueryRowContext(ctx, "PRAGMA journal_mode = WAL").Scan(&mode); err != nil {
		return nil, s.unusable(err)
	}
	if mode != "wal" {
		return nil, fmt.Errorf("store %s: cannot switch to WAL journal mode (got %q)", s.path, mode)
	}
	if err := migrate(ctx, conn, s.path); err != nil {
		return nil, err
	}
	if err := claimOwner(ctx, conn, s.path, cfg.Owner); err != nil {
		return nil, err
	}
	// The checkpointer copies the WAL (see checkpointer). SQLite's own
	// checkpoint in the writer stays as a safety net, far past where the
	// checkpointer has the WAL start over.
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("PRAGMA wal_autocheckpoint = %d", 4*walRestartPages)); err != nil {
		return nil, fmt.Errorf("store %s: %w", s.path, err)
	}
	s.st, err = prepare(ctx, conn)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", s.path, err)
	}
	ckpt, err := s.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", s.path, err)
	}
	return ckpt, nil
}

func (s *Store) unusable(err error) error {
	return fmt.Errorf("store %s is not a usable SQLite database (%v); captchaq leaves it as it is: move it aside or choose another path", s.path, err)
}

// Path returns the absolute path of the store's file.
func (s *Store) Path() string { return s.path }

// ErrOtherOwner matches the error of Open for a store that another owner
// recorded (Config.Owner).
var ErrOtherOwner = errors.New("sqlite: store belongs to another owner")

// OwnerError refuses a store recorded by another owner.
type OwnerError struct {
	Path, Owner, Want string
}

func (e *OwnerError) Error() string {
	return fmt.Sprintf("store %s holds the tasks of %s, not of %s: opening it would take over %s's unfinished tasks; give %s a store of its own (--store PATH), or run %s on this one", e.Path, e.Owner, e.Want, e.Owner, e.Want, e.Owner)
}

// Is makes every OwnerError match ErrOtherOwner.
func (e *OwnerError) Is(target error) bool { return target == ErrOtherOwner }

// claimOwner records owner in a store that has none, and refuses a store
// that records another.
func claimOwner(ctx context.Context, conn *sql.Conn, path, owner string) error {
	if owner == "" {
		return nil
	}
	var have string
	err := conn.QueryRowContext(ctx, `SELECT owner FROM store_owner`).Scan(&have)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		if _, err := conn.ExecContext(ctx, `INSERT INTO store_owner (owner) VALUES (?)`, owner); err != nil {
			return fmt.Errorf("store %s: record owner: %w", path, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("store %s: read owner: %w", path, err)
	case have != owner:
		return &OwnerError{Path: path, Owner: have, Want: owner}
	}
	return nil
}

// Owner returns the owner the store records ("" for none).
func (s *Store) Owner(ctx context.Context) (string, error) {
	var have string
	err := s.db.QueryRowContext(ctx, `SELECT owner FROM store_owner`).Scan(&have)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return have, s.wrap("Owner", err)
}

// Close stops the prune loop, waits for the writes already taken to
// commit, and releases the file and its lock. Calls after Close, Close
// included, return ErrClosed.
func (s *Store) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return ErrClosed
	}
	if s.pruner != nil {
		s.pruner.Stop()
	}
	s.w.stop()
	s.ckpt.Stop()
	s.st.close()
	err := errors.Join(s.conn.Close(), s.ckpt.conn.Close())
	err = errors.Join(err, s.db.Close())
	err = errors.Join(err, s.lock.unlock())
	if err != nil {
		return fmt.Errorf("store %s: close: %w", s.path, err)
	}
	return nil
}
