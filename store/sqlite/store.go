package sqlite

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
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

// Synchronous is SQLite's synchronous setting: how hard a commit pushes its
// data to the disk before Finish, Checkpoint or Enqueue returns.
type Synchronous string

const (
	// SynchronousNormal (the default) writes each commit to the WAL without
	// fsync. An acknowledged write survives the process being killed
	// (kill -9, a panic, an OOM kill): it is in the OS's page cache and
	// SQLite finds it in the WAL on the next open. A power loss or kernel
	// crash may lose the last commits since the latest WAL checkpoint, but
	// never corrupts the file.
	SynchronousNormal Synchronous = "NORMAL"
	// SynchronousFull fsyncs the WAL at every commit, so an acknowledged
	// write also survives a power loss. Group commit shares one fsync among
	// the writes that commit together.
	SynchronousFull Synchronous = "FULL"
)

// Defaults for Config.
const (
	SynchronousDefault   = SynchronousNormal
	BusyTimeoutDefault   = 5 * time.Second
	RetentionDefault     = 7 * 24 * time.Hour
	PruneIntervalDefault = time.Hour
	MaxBatchDefault      = 512
)

// RetentionOff, as Config.Retention, turns the automatic prune off.
const RetentionOff time.Duration = -1

// Config configures a Store. The zero value is ready to use.
type Config struct {
	// Synchronous is SynchronousNormal or SynchronousFull. Default
	// SynchronousNormal.
	Synchronous Synchronous
	// BusyTimeout is how long a statement waits for a lock another
	// connection holds (a sqlite3 shell writing to the file, say) before it
	// fails. Default 5s.
	BusyTimeout time.Duration
	// Retention is how long final tasks (solved and failed) are kept after
	// they finished; a background loop prunes older ones every
	// PruneInterval, starting at Open. Default 7 days; RetentionOff keeps
	// them until Prune is called.
	Retention time.Duration
	// PruneInterval is how often the prune loop runs. Default 1h.
	PruneInterval time.Duration
	// MaxBatch bounds how many writes share one transaction. Default 512.
	MaxBatch int
	// Owner names who keeps its tasks in the store ("batch", "serve",
	// "gateway NAME", …). The first Open with an Owner records it; a later
	// Open with another Owner is refused (errors.Is ErrOtherOwner), so one
	// program never resumes another's tasks as its own. Empty claims
	// nothing and checks nothing.
	Owner string
	// Logger receives the prune loop's reports and failures. Default:
	// discard (captchaq logs nothing unless it is given a Logger).
	Logger *slog.Logger

	// pruned, when set, is told of each automatic prune (tests).
	pruned func(n int, err error)
	// checkpointed, when set, is told of each checkpoint of the WAL
	// (tests).
	checkpointed func(walPages, copied int, err error)
}

// withDefaults returns c with its zero fields filled in. It checks
// nothing: validate does, on its result.
func (c Config) withDefaults() Config {
	c.Synchronous = cmp.Or(c.Synchronous, SynchronousDefault)
	c.BusyTimeout = cmp.Or(c.BusyTimeout, BusyTimeoutDefault)
	c.Retention = cmp.Or(c.Retention, RetentionDefault)
	c.PruneInterval = cmp.Or(c.PruneInterval, PruneIntervalDefault)
	c.MaxBatch = cmp.Or(c.MaxBatch, MaxBatchDefault)
	c.Logger = cmp.Or(c.Logger, discardLogger)
	return c
}

// discardLogger is the default Logger: the store logs nothing unless it is
// given a Logger.
var discardLogger = slog.New(slog.DiscardHandler)

// validate reports every problem of a Config that went through
// withDefaults at once, each naming the field and the fix.
func (c Config) validate() error {
	var errs []error
	switch c.Synchronous {
	case SynchronousNormal, SynchronousFull:
	default:
		errs = append(errs, fmt.Errorf("sqlite: Config.Synchronous %q is not valid: use SynchronousNormal or SynchronousFull", c.Synchronous))
	}
	if c.BusyTimeout < 0 {
		errs = append(errs, fmt.Errorf("sqlite: Config.BusyTimeout %v is negative: use 0 for the default (%v) or a positive duration", c.BusyTimeout, BusyTimeoutDefault))
	}
	if c.Retention < 0 && c.Retention != RetentionOff {
		errs = append(errs, fmt.Errorf("sqlite: Config.Retention %v is negative: use RetentionOff to keep results, 0 for the default (%v) or a positive duration", c.Retention, RetentionDefault))
	}
	if c.PruneInterval < 0 {
		errs = append(errs, fmt.Errorf("sqlite: Config.PruneInterval %v is negative: use 0 for the default (%v) or a positive duration", c.PruneInterval, PruneIntervalDefault))
	}
	if c.MaxBatch < 0 {
		errs = append(errs, fmt.Errorf("sqlite: Config.MaxBatch %d is negative: use 0 for the default (%d) or a positive number", c.MaxBatch, MaxBatchDefault))
	}
	return errors.Join(errs...)
}

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

// Enqueue implements captchaq.Store. A batch that names one id twice keeps
// the first task; the second is reported as existed. A task without an id
// fails the whole call, and nothing is stored. Task.TTL is not stored.
func (s *Store) Enqueue(ctx context.Context, tasks []captchaq.Task, now time.Time) ([]captchaq.Record, []bool, error) {
	if s.closed.Load() {
		return nil, nil, ErrClosed
	}
	if len(tasks) == 0 {
		return nil, nil, nil
	}
	rows, err := sqlstore.NewTaskRows("sqlite", tasks, func(t captchaq.Task) (taskRow, error) {
		r, err := newTaskRow(t, now)
		if err != nil {
			return r, fmt.Errorf("sqlite: Enqueue: task %q: %w", t.ID, err)
		}
		return r, nil
	})
	if err != nil {
		return nil, nil, err
	}
	var recs []captchaq.Record
	var existed []bool
	err = s.w.do(ctx, func(ctx context.Context, st *statements) error {
		recs = make([]captchaq.Record, len(rows))
		existed = make([]bool, len(rows))
		for i, r := range rows {
			// An Exec costs less than reading the new seq back with
			// RETURNING; the insert does nothing when the id is stored.
			res, err := st.insert.ExecContext(ctx, r.args()...)
			if err = affected(r.Task.ID)(res, err); errors.Is(err, captchaq.ErrNotFound) {
				rec, err := scanRecord(st.getByID.QueryRowContext(ctx, r.Task.ID))
				if err != nil {
					return err
				}
				recs[i], existed[i] = rec, true
				continue
			}
			if err != nil {
				return err
			}
			seq, err := res.LastInsertId()
			if err != nil {
				return err
			}
			recs[i] = r.Queued(seq)
		}
		return nil
	})
	if err != nil {
		return nil, nil, s.wrap("Enqueue", err)
	}
	return recs, existed, nil
}

// Checkpoint implements captchaq.Store. It clears NotBefore, and fails for
// a task that is already final.
func (s *Store) Checkpoint(ctx context.Context, id, captchaID string, attempt int, at time.Time) error {
	if s.closed.Load() {
		return ErrClosed
	}
	err := s.w.do(ctx, func(ctx context.Context, st *statements) error {
		return st.unfinished(ctx, id, "Checkpoint")(st.checkpoint.ExecContext(ctx, captchaID, attempt, timeArg(at), id))
	})
	return s.wrap("Checkpoint", err)
}

// Retry implements captchaq.Store. SubmittedAt keeps the latest submit. It
// fails for a task that is already final.
func (s *Store) Retry(ctx context.Context, id string, attempts int, notBefore time.Time, errText, errCode string) error {
	if s.closed.Load() {
		return ErrClosed
	}
	err := s.w.do(ctx, func(ctx context.Context, st *statements) error {
		return st.unfinished(ctx, id, "Retry")(st.retry.ExecContext(ctx, attempts, timeArg(notBefore), errText, errCode, id))
	})
	return s.wrap("Retry", err)
}

// Finish implements captchaq.Store. It sets the task's status and attempts
// from r, and for a failed r its LastError; it clears the captcha id and
// keeps r whole.
func (s *Store) Finish(ctx context.Context, r captchaq.Result) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if !r.Status.Final() {
		return fmt.Errorf("sqlite: Finish %q: status %q is not final: use %q or %q", r.ID, r.Status, captchaq.StatusSolved, captchaq.StatusFailed)
	}
	var answer any
	if len(r.Answer) > 0 {
		answer = string(r.Answer)
	}
	abandoned, err := encoder.Abandoned(r.Abandoned)
	if err != nil {
		return fmt.Errorf("sqlite: Finish %q: %w", r.ID, err)
	}
	args := []any{
		string(r.Status), r.Attempts, r.Method, string(r.Kind), r.Token, answer, r.Error, r.ErrorCode,
		r.Attempts, r.SolveSeconds, timeArg(r.ExpiresAt), timeArg(r.AcceptedAt), timeArg(r.SubmittedAt),
		timeText(r.FinishedAt), r.ID, r.CaptchaID, r.Provider, r.Price, abandoned, timeText(time.Now()), r.Reservoir,
	}
	err = s.w.do(ctx, func(ctx context.Context, st *statements) error {
		return affected(r.ID)(st.finish.ExecContext(ctx, args...))
	})
	return s.wrap("Finish", err)
}

// Renew implements captchaq.Store.
func (s *Store) Renew(ctx context.Context, t captchaq.Task, now time.Time) (captchaq.Record, error) {
	if s.closed.Load() {
		return captchaq.Record{}, ErrClosed
	}
	r, err := newTaskRow(t, now)
	if err != nil {
		return captchaq.Record{}, fmt.Errorf("sqlite: Renew %q: %w", t.ID, err)
	}
	var rec captchaq.Record
	err = s.w.do(ctx, func(ctx context.Context, st *statements) error {
		res, err := st.renew.ExecContext(ctx, r.args()...)
		if err := affected(t.ID)(res, err); err != nil {
			status, err := st.statusAfterNone(ctx, t.ID, err)
			if err != nil {
				return err
			}
			return &rejectedError{msg: fmt.Sprintf("sqlite: Renew %q: task is %s, not solved", t.ID, status)}
		}
		rec, err = scanRecord(st.getByID.QueryRowContext(ctx, t.ID))
		return err
	})
	return rec, s.wrap("Renew", err)
}

// Replay implements captchaq.Store. A replayed task keeps its Seq and
// LastError; AcceptedAt becomes now and SubmittedAt is cleared.
func (s *Store) Replay(ctx context.Context, f captchaq.DeadLetterFilter, now time.Time) (int, error) {
	if s.closed.Load() {
		return 0, ErrClosed
	}
	fargs, err := filterArgs(f)
	if err != nil {
		return 0, err
	}
	var n int64
	err = s.w.do(ctx, func(ctx context.Context, st *statements) error {
		res, err := st.replay.ExecContext(ctx, append(fargs, timeText(now))...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), s.wrap("Replay", err)
}

// Report implements captchaq.Store.
func (s *Store) Report(ctx context.Context, id string, good bool, at time.Time) (bool, error) {
	if s.closed.Load() {
		return false, ErrClosed
	}
	verdict := captchaq.ReportBad
	if good {
		verdict = captchaq.ReportGood
	}
	first := false
	err := s.w.do(ctx, func(ctx context.Context, st *statements) error {
		res, err := st.report.ExecContext(ctx, id, verdict, timeText(at))
		err = affected(id)(res, err)
		if err == nil {
			first = true
			return nil
		}
		status, err := st.statusAfterNone(ctx, id, err)
		if err != nil {
			return err
		}
		if status != string(captchaq.StatusSolved) {
			return &rejectedError{msg: fmt.Sprintf("sqlite: Report %q: task is %s, not solved", id, status), is: captchaq.ErrNotSolved}
		}
		return nil // reported before
	})
	return first, s.wrap("Report", err)
}

// Prune implements captchaq.Store.
func (s *Store) Prune(ctx context.Context, finishedBefore time.Time) (int, error) {
	if s.closed.Load() {
		return 0, ErrClosed
	}
	var n int64
	err := s.w.do(ctx, func(ctx context.Context, st *statements) error {
		res, err := st.prune.ExecContext(ctx, timeText(finishedBefore))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), s.wrap("Prune", err)
}

// Get implements captchaq.Store.
func (s *Store) Get(ctx context.Context, id string) (captchaq.Record, error) {
	if s.closed.Load() {
		return captchaq.Record{}, ErrClosed
	}
	rec, err := scanRecord(s.db.QueryRowContext(ctx, selectRecord+` WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return captchaq.Record{}, fmt.Errorf("%w: %q", captchaq.ErrNotFound, id)
	}
	return rec, s.wrap("Get", err)
}

// LoadState returns the value SaveState stored under name, or nil. The
// queue keeps its providers' refusals of types here
// (captchaq.Config.RefusalHold).
func (s *Store) LoadState(ctx context.Context, name string) ([]byte, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	row := s.db.QueryRowContext(ctx, `SELECT value FROM queue_state WHERE name = ?`, name)
	return sqlstore.LoadState(row, sql.ErrNoRows, func(err error) error { return s.wrap("LoadState", err) })
}

// SaveState stores value under name, replacing what was there.
func (s *Store) SaveState(ctx context.Context, name string, value []byte) error {
	if s.closed.Load() {
		return ErrClosed
	}
	err := s.w.do(ctx, func(ctx context.Context, st *statements) error {
		_, err := st.saveState.ExecContext(ctx, name, value)
		return err
	})
	return s.wrap("SaveState", err)
}

// Pending implements captchaq.Store.
func (s *Store) Pending(ctx context.Context, fn func(captchaq.Record) error) error {
	return s.each(ctx, "Pending", fn, selectRecord+` WHERE status IN ('queued', 'inflight') ORDER BY seq`)
}

// Results implements captchaq.Store.
func (s *Store) Results(ctx context.Context, fn func(captchaq.Result) error) error {
	return s.each(ctx, "Results", func(r captchaq.Record) error { return fn(*r.Result) },
		selectRecord+` WHERE status IN ('solved', 'failed') ORDER BY seq`)
}

// DeadLetters implements captchaq.Store. IDs and ErrorCode, when both are
// set, must both match; All selects every dead letter whatever else is set.
func (s *Store) DeadLetters(ctx context.Context, f captchaq.DeadLetterFilter, fn func(captchaq.Record) error) error {
	args, err := filterArgs(f)
	if err != nil {
		return err
	}
	return s.each(ctx, "DeadLetters", fn, selectRecord+` WHERE status = 'failed' AND `+deadLettersWhere(f)+` ORDER BY seq`, args...)
}

// each calls fn for every record the query returns, stopping at fn's first
// error, which it returns as it is.
func (s *Store) each(ctx context.Context, op string, fn func(captchaq.Record) error, query string, args ...any) error {
	if s.closed.Load() {
		return ErrClosed
	}
	return each(ctx, s.db, func(err error) error { return s.wrap(op, err) }, fn, query, args...)
}

// each calls fn for every record the query on db returns, stopping at
// fn's first error, which it returns as it is; other errors go through
// wrap.
func each(ctx context.Context, db *sql.DB, wrap func(error) error, fn func(captchaq.Record) error, query string, args ...any) error {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return wrap(err)
	}
	defer rows.Close()
	return sqlstore.Each(rows, scanRecord, fn, wrap)
}

// wrap names the store in database errors; ErrNotFound, ErrClosed and
// context errors pass through unchanged.
func (s *Store) wrap(op string, err error) error {
	return sqlstore.Wrap(err, s.closed.Load(), s.path, op)
}

// affected turns an UPDATE of no row into ErrNotFound.
func affected(id string) func(sql.Result, error) error {
	return func(res sql.Result, err error) error {
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("%w: %q", captchaq.ErrNotFound, id)
		}
		return nil
	}
}

// unfinished turns an UPDATE of no row, which is limited to queued and
// in-flight tasks, into ErrNotFound or an error saying the task is final.
func (st *statements) unfinished(ctx context.Context, id, op string) func(sql.Result, error) error {
	return func(res sql.Result, err error) error {
		if err = affected(id)(res, err); err == nil {
			return nil
		}
		status, err := st.statusAfterNone(ctx, id, err)
		if err != nil {
			return err
		}
		return &rejectedError{msg: fmt.Sprintf("sqlite: %s %q: task is already %s", op, id, status)}
	}
}

// statusAfterNone reads the status of task id after an UPDATE of it that
// changed no row (err is affected's ErrNotFound): the row is not there
// (err itself), or not in a state the UPDATE takes. Any other err is
// returned as it is.
func (st *statements) statusAfterNone(ctx context.Context, id string, err error) (string, error) {
	if !errors.Is(err, captchaq.ErrNotFound) {
		return "", err
	}
	var status string
	if serr := st.statusOf.QueryRowContext(ctx, id).Scan(&status); serr != nil {
		if errors.Is(serr, sql.ErrNoRows) {
			return "", err
		}
		return "", serr
	}
	return status, nil
}

// filterWhere selects the dead letters a filter names; its arguments come
// from filterArgs. The zero filter selects none.
const filterWhere = `(?1 OR ((?2 IS NOT NULL OR ?3 <> '')
	AND (?2 IS NULL OR id IN (SELECT value FROM json_each(?2)))
	AND (?3 = '' OR result_error_code = ?3)))
	AND (?4 = '' OR tenant = ?4)`

// deadLettersWhere is filterWhere for a read of f: with a Tenant, the
// tenant's own term too, which SQLite plans on the tasks_dead_by_tenant
// index (it cannot plan on the term that lets an empty ?4 match all).
func deadLettersWhere(f captchaq.DeadLetterFilter) string {
	if f.Tenant != "" {
		return filterWhere + ` AND tenant = ?4`
	}
	return filterWhere
}

func filterArgs(f captchaq.DeadLetterFilter) ([]any, error) {
	var ids any
	if len(f.IDs) > 0 {
		b, err := json.Marshal(f.IDs)
		if err != nil {
			return nil, fmt.Errorf("sqlite: dead letter filter IDs: %w", err)
		}
		ids = string(b)
	}
	return []any{f.All, ids, f.ErrorCode, f.Tenant}, nil
}

// timeLayout is fixed width so that text order is time order (prune and the
// sqlite3 shell compare the text); times are stored in UTC.
const timeLayout = "2006-01-02T15:04:05.000000000Z07:00"

func timeText(t time.Time) string { return t.UTC().Format(timeLayout) }

// timeArg is NULL for the zero time.
func timeArg(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return timeText(t)
}

func parseTime(ns sql.NullString) (time.Time, error) {
	if !ns.Valid || ns.String == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(timeLayout, ns.String)
	if err != nil {
		return time.Time{}, fmt.Errorf("bad time %q in store: %w", ns.String, err)
	}
	return t.UTC(), nil
}

// taskRow is a task encoded for the insert and renew statements.
type taskRow struct{ sqlstore.TaskRow }

func newTaskRow(t captchaq.Task, now time.Time) (taskRow, error) {
	r, err := sqlstore.NewTaskRow(t, now)
	return taskRow{r}, err
}

func (r taskRow) args() []any { return r.Args(timeArg(r.Task.Deadline), timeText(r.AcceptedAt)) }

// selectRecord reads the columns scanRecord expects.
const selectRecord = `SELECT ` + sqlstore.RecordColumns + ` FROM tasks`

// scanRecord reads a row of selectRecord: times from text, NULL for
// none; Result.Abandoned from a JSON array.
func scanRecord(sc sqlstore.Scanner) (captchaq.Record, error) {
	return sqlstore.ScanRecord(sc, decoder)
}

var decoder = sqlstore.Decoder[sql.NullString, sql.NullString]{
	Time: parseTime,
	Abandoned: func(a sql.NullString) ([]string, error) {
		if !a.Valid {
			return nil, nil
		}
		var abandoned []string
		if err := json.Unmarshal([]byte(a.String), &abandoned); err != nil {
			return nil, fmt.Errorf("bad result_abandoned JSON in store: %w", err)
		}
		return abandoned, nil
	},
}

// encoder writes times as text (NULL for none) and Result.Abandoned as
// a JSON array (NULL for none); texts go as they are.
var encoder = sqlstore.Encoder{
	Time: timeArg,
	Abandoned: func(a []string) (any, error) {
		if len(a) == 0 {
			return nil, nil
		}
		b, err := json.Marshal(a)
		if err != nil {
			return nil, fmt.Errorf("abandoned: %w", err)
		}
		return string(b), nil
	},
	Text: func(s string) string { return s },
}

// statements are the writer's prepared statements.
type statements struct {
	begin, commit                                                       *sql.Stmt
	insert, getByID, statusOf, checkpoint, retry, finish, replay, prune *sql.Stmt
	renew, report, saveState                                            *sql.Stmt
	takePingback, owedPingbacks, leasePingback, pingbackDone            *sql.Stmt
	stockToken, takeToken, dropTokens                                   *sql.Stmt
	// all are those prepared, for close.
	all []*sql.Stmt
}

func prepare(ctx context.Context, conn *sql.Conn) (*statements, error) {
	st := &statements{}
	for _, p := range []struct {
		dst   **sql.Stmt
		query string
	}{
		{&st.begin, `BEGIN IMMEDIATE`},
		{&st.commit, `COMMIT`},
		{&st.insert, `INSERT INTO tasks (id, status, priority, tenant, method, params, deadline, max_attempts,
			proxy, proxy_type, pingback, accepted_at, fingerprint) VALUES (?1, 'queued', ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
			ON CONFLICT (id) DO NOTHING`},
		{&st.getByID, selectRecord + ` WHERE id = ?`},
		{&st.statusOf, `SELECT status FROM tasks WHERE id = ?`},
		{&st.checkpoint, `UPDATE tasks SET status = 'inflight', captcha_id = ?1, attempts = ?2, submitted_at = ?3,
			not_before = NULL WHERE id = ?4 AND status IN ('queued', 'inflight')`},
		{&st.retry, `UPDATE tasks SET status = 'queued', captcha_id = '', attempts = ?1, not_before = ?2,
			last_error = ?3, last_error_code = ?4 WHERE id = ?5 AND status IN ('queued', 'inflight')`},
		{&st.finish, `UPDATE tasks SET status = ?1, captcha_id = ?16, attempts = ?2,
			last_error = iif(?1 = 'failed', ?7, last_error), last_error_code = iif(?1 = 'failed', ?8, last_error_code),
			result_method = ?3, result_kind = ?4,
			result_token = ?5, result_answer = ?6, result_error = ?7, result_error_code = ?8, result_attempts = ?9,
			result_solve_seconds = ?10, result_expires_at = ?11, result_accepted_at = ?12, result_submitted_at = ?13,
			finished_at = ?14, result_provider = ?17, result_price = ?18, result_abandoned = ?19, result_reservoir = ?21,
			pingback_owed = iif(pingback <> '', ?20, NULL), pingback_lease = NULL WHERE id = ?15`},
		{&st.replay, `UPDATE tasks SET status = 'queued', attempts = 0, captcha_id = '', not_before = NULL,
			accepted_at = ?5, submitted_at = NULL,
			result_method = NULL, result_kind = NULL, result_token = NULL, result_answer = NULL, result_error = NULL,
			result_error_code = NULL, result_attempts = NULL, result_solve_seconds = NULL, result_expires_at = NULL,
			result_accepted_at = NULL, result_submitted_at = NULL, finished_at = NULL,
			result_provider = NULL, result_price = NULL, result_abandoned = NULL, result_reservoir = NULL
			WHERE status = 'failed' AND ` + filterWhere},
		{&st.renew, `UPDATE tasks SET status = 'queued', priority = ?2, tenant = ?3, method = ?4, params = ?5,
			deadline = ?6, max_attempts = ?7, proxy = ?8, proxy_type = ?9, pingback = ?10, accepted_at = ?11,
			fingerprint = ?12, attempts = 0, captcha_id = '', not_before = NULL, last_error = '', last_error_code = '',
			submitted_at = NULL,
			result_method = NULL, result_kind = NULL, result_token = NULL, result_answer = NULL, result_error = NULL,
			result_error_code = NULL, result_attempts = NULL, result_solve_seconds = NULL, result_expires_at = NULL,
			result_accepted_at = NULL, result_submitted_at = NULL, finished_at = NULL,
			result_provider = NULL, result_price = NULL, result_abandoned = NULL, result_reservoir = NULL,
			report = '', reported_at = NULL
			WHERE id = ?1 AND status = 'solved'`},
		{&st.report, `UPDATE tasks SET report = ?2, reported_at = ?3 WHERE id = ?1 AND status = 'solved' AND report = ''`},
		{&st.saveState, `INSERT INTO queue_state (name, value) VALUES (?1, ?2)
			ON CONFLICT (name) DO UPDATE SET value = excluded.value`},
		{&st.prune, `DELETE FROM tasks WHERE status IN ('solved', 'failed') AND finished_at < ?`},
		{&st.takePingback, `UPDATE tasks SET pingback_lease = ?3 WHERE id = ?1 AND ` + pingbackFree},
		{&st.owedPingbacks, `SELECT id FROM tasks WHERE pingback_owed <= ?1 AND ` + pingbackFree + `
			ORDER BY pingback_owed LIMIT ?3`},
		{&st.leasePingback, `UPDATE tasks SET pingback_lease = ?2 WHERE id = ?1`},
		{&st.pingbackDone, `UPDATE tasks SET pingback_owed = NULL, pingback_lease = NULL WHERE id = ?1`},
		{&st.stockToken, stockToken},
		{&st.takeToken, takeToken},
		{&st.dropTokens, dropTokens},
	} {
		stmt, err := conn.PrepareContext(ctx, p.query)
		if err != nil {
			st.close()
			return nil, fmt.Errorf("prepare %q: %w", p.query, err)
		}
		*p.dst = stmt
		st.all = append(st.all, stmt)
	}
	return st, nil
}

func (st *statements) close() {
	for _, s := range st.all {
		_ = s.Close()
	}
}
