package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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

// IsURL reports whether a --store value names a PostgreSQL database
// (postgres:// or postgresql://) rather than a file.
func IsURL(spec string) bool {
	return strings.HasPrefix(spec, "postgres://") || strings.HasPrefix(spec, "postgresql://")
}

// Store is a captchaq.Store in a PostgreSQL database. It is safe for
// concurrent use, by many goroutines and by many processes on one
// database.
type Store struct {
	name     string // postgres://user@host:port/db, never a password
	pool     *pgxpool.Pool
	pruner   *sqlstore.Pruner
	log      *slog.Logger
	instance string // this Store among those on the database (Event)
	notify   bool   // Config.Notify
	closed   atomic.Bool

	// announced carries the events to announce to the other Stores;
	// announcer sends them (announce.go).
	announced chan string
	announcer *startstop.Loop

	mu      sync.Mutex
	watcher *startstop.Loop // Watch's; nil until it is called
}

var _ captchaq.Store = (*Store)(nil)

// CheckURL returns the error Open gives for a connection string that
// cannot be read, or nil; it connects to nothing, so a command can refuse
// a bad --store before it starts. The error holds no password.
func CheckURL(connString string) error {
	_, err := parseConnString(connString)
	return err
}

func parseConnString(connString string) (*pgxpool.Config, error) {
	pc, err := pgxpool.ParseConfig(connString)
	if err != nil {
		// pgconn's parse errors hide the password; say so plainly anyway.
		return nil, fmt.Errorf("postgres: the connection string is not valid (%v): use postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE", scrub(err, connString))
	}
	return pc, nil
}

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
	s := &Store{name: name, pool: pool, log: cfg.Logger, instance: newInstance(), notify: cfg.Notify,
		announced: make(chan string, announceBuffer)}
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

// Redact names the database a connection string points at without its
// password: postgres://USER@HOST:PORT/DATABASE.
func Redact(connString string) string {
	cc, err := pgconn.ParseConfig(connString)
	if err != nil {
		if u, uerr := url.Parse(connString); uerr == nil && u.Scheme != "" {
			return u.Redacted()
		}
		return "(a PostgreSQL connection string that does not parse)"
	}
	u := url.URL{Scheme: "postgres", Host: net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))), Path: "/" + cc.Database}
	if cc.User != "" {
		u.User = url.User(cc.User)
	}
	return u.String()
}

// scrub takes the connection string's password out of an error's text,
// should a driver ever put it there.
func scrub(err error, connString string) error {
	pw := ""
	if cc, perr := pgconn.ParseConfig(connString); perr == nil {
		pw = cc.Password
	} else if u, uerr := url.Parse(connString); uerr == nil {
		pw, _ = u.User.Password()
	}
	if pw == "" || !strings.Contains(err.Error(), pw) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), pw, "xxxxx"))
}

// Name is the database the store is in, without a password.
func (s *Store) Name() string { return s.name }

// Pool is the store's connection pool, for the parts of a front that keep
// state of their own beside the tasks (LISTEN/NOTIFY, shared counters).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

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

// Enqueue implements captchaq.Store. The tasks go in one round trip and
// one transaction (a batch of inserts); a batch that names one id twice
// keeps the first. A task without an id, or with a NUL byte or invalid
// UTF-8 in a field other than Params, fails the whole call and nothing is
// stored. Task.TTL is not stored.
func (s *Store) Enqueue(ctx context.Context, tasks []captchaq.Task, now time.Time) ([]captchaq.Record, []bool, error) {
	if s.closed.Load() {
		return nil, nil, ErrClosed
	}
	if len(tasks) == 0 {
		return nil, nil, nil
	}
	rows, err := sqlstore.NewTaskRows("postgres", tasks, func(t captchaq.Task) (taskRow, error) { return newTaskRow(t, now) })
	if err != nil {
		return nil, nil, err
	}
	recs := make([]captchaq.Record, len(rows))
	existed := make([]bool, len(rows))
	batch := &pgx.Batch{}
	for _, r := range rows {
		batch.Queue(insertTask, r.args()...)
	}
	br := s.pool.SendBatch(ctx, batch)
	var known []string
	for i, r := range rows {
		var seq int64
		err := br.QueryRow().Scan(&seq)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			existed[i] = true
			known = append(known, r.Task.ID)
		case err != nil:
			_ = br.Close()
			return nil, nil, s.wrap("Enqueue", err)
		default:
			recs[i] = r.Queued(seq)
		}
	}
	if err := br.Close(); err != nil {
		return nil, nil, s.wrap("Enqueue", err)
	}
	if s.notify {
		for i, r := range rows {
			if !existed[i] {
				s.announce(EventAccepted, r.Task.ID)
			}
		}
	}
	if len(known) == 0 {
		return recs, existed, nil
	}
	have := map[string]captchaq.Record{}
	err = s.each(ctx, "Enqueue", func(r captchaq.Record) error { have[r.Task.ID] = r; return nil },
		selectRecord+` WHERE id = ANY($1)`, known)
	if err != nil {
		return nil, nil, err
	}
	for i, r := range rows {
		if !existed[i] {
			continue
		}
		rec, ok := have[r.Task.ID]
		if !ok {
			return nil, nil, fmt.Errorf("store %s: Enqueue: task %q was stored by another call and deleted (pruned) before it could be read; submit it again", s.name, r.Task.ID)
		}
		recs[i] = rec
	}
	return recs, existed, nil
}

const insertTask = `INSERT INTO tasks (id, status, priority, tenant, method, params, deadline, max_attempts,
	proxy, proxy_type, pingback, accepted_at, fingerprint) VALUES ($1, 'queued', $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
	ON CONFLICT (id) DO NOTHING RETURNING seq`

// insertMarked is insertTask for a task already handed to its solver:
// in flight under captchaID ($13) since it was accepted, attempts 0, as
// Checkpoint would leave it.
const insertMarked = `INSERT INTO tasks (id, status, priority, tenant, method, params, deadline, max_attempts,
	proxy, proxy_type, pingback, accepted_at, fingerprint, captcha_id, attempts, submitted_at)
	VALUES ($1, 'inflight', $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, 0, $11)
	ON CONFLICT (id) DO NOTHING RETURNING seq`

// EnqueueMarked stores one new task already handed to its solver (a
// gateway's task published to its fleet) as Enqueue then Checkpoint(id,
// captchaID, 0, now) would, in one statement: one round trip and one
// commit instead of two. It returns false, storing nothing, when the id
// is stored already (the caller goes on with Enqueue and Checkpoint).
func (s *Store) EnqueueMarked(ctx context.Context, t captchaq.Task, now time.Time, captchaID string) (captchaq.Record, bool, error) {
	if s.closed.Load() {
		return captchaq.Record{}, false, ErrClosed
	}
	if t.ID == "" {
		return captchaq.Record{}, false, fmt.Errorf("postgres: EnqueueMarked: task (method %q) has no id: every task needs a unique id", t.Method)
	}
	r, err := newTaskRow(t, now)
	if err != nil {
		return captchaq.Record{}, false, err
	}
	var seq int64
	err = s.pool.QueryRow(ctx, insertMarked, append(r.args(), clean(captchaID))...).Scan(&seq)
	if errors.Is(err, pgx.ErrNoRows) {
		return captchaq.Record{}, false, nil
	}
	if err != nil {
		return captchaq.Record{}, false, s.wrap("EnqueueMarked", err)
	}
	if s.notify {
		s.announce(EventAccepted, r.Task.ID)
	}
	return captchaq.Record{Task: r.Task, Status: captchaq.StatusInFlight, Seq: seq, Fingerprint: r.Fingerprint,
		AcceptedAt: r.AcceptedAt, CaptchaID: clean(captchaID), SubmittedAt: r.AcceptedAt}, true, nil
}

// Checkpoint implements captchaq.Store. It clears NotBefore, and fails for
// a task that is already final.
func (s *Store) Checkpoint(ctx context.Context, id, captchaID string, attempt int, at time.Time) error {
	if s.closed.Load() {
		return ErrClosed
	}
	return s.unfinished(ctx, "Checkpoint", id, `UPDATE tasks SET status = 'inflight', captcha_id = $2, attempts = $3,
		submitted_at = $4, not_before = NULL WHERE id = $1 AND status IN ('queued', 'inflight')`,
		id, clean(captchaID), attempt, timeArg(at))
}

// Retry implements captchaq.Store. SubmittedAt keeps the latest submit. It
// fails for a task that is already final.
func (s *Store) Retry(ctx context.Context, id string, attempts int, notBefore time.Time, errText, errCode string) error {
	if s.closed.Load() {
		return ErrClosed
	}
	return s.unfinished(ctx, "Retry", id, `UPDATE tasks SET status = 'queued', captcha_id = '', attempts = $2,
		not_before = $3, last_error = $4, last_error_code = $5 WHERE id = $1 AND status IN ('queued', 'inflight')`,
		id, attempts, timeArg(notBefore), clean(errText), clean(errCode))
}

// unfinished runs an UPDATE limited to queued and in-flight tasks, and
// in the same round trip reads the task's status, to tell an unknown id
// (ErrNotFound) from a final task.
func (s *Store) unfinished(ctx context.Context, op, id, update string, args ...any) error {
	if !storable(id) {
		return fmt.Errorf("%w: %q", captchaq.ErrNotFound, id)
	}
	var updated bool
	var status *string
	err := s.pool.QueryRow(ctx, `WITH u AS (`+update+` RETURNING 1)
		SELECT EXISTS (SELECT 1 FROM u), (SELECT status FROM tasks WHERE id = $1)`, args...).Scan(&updated, &status)
	switch {
	case err != nil:
		return s.wrap(op, err)
	case updated:
		return nil
	case status == nil:
		return fmt.Errorf("%w: %q", captchaq.ErrNotFound, id)
	}
	return fmt.Errorf("postgres: %s %q: task is already %s", op, id, *status)
}

// Finish implements captchaq.Store. It sets the task's status and attempts
// from r, and for a failed r its LastError; it clears the captcha id and
// keeps r whole. Texts that PostgreSQL cannot hold (NUL bytes, invalid
// UTF-8) are stored with U+FFFD in their place.
func (s *Store) Finish(ctx context.Context, r captchaq.Result) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if !r.Status.Final() {
		return fmt.Errorf("postgres: Finish %q: status %q is not final: use %q or %q", r.ID, r.Status, captchaq.StatusSolved, captchaq.StatusFailed)
	}
	if !storable(r.ID) {
		return fmt.Errorf("%w: %q", captchaq.ErrNotFound, r.ID)
	}
	tag, err := s.pool.Exec(ctx, finishTask+` WHERE id = $1`, finishArgs(r)...)
	if err == nil && tag.RowsAffected() == 0 {
		err = fmt.Errorf("%w: %q", captchaq.ErrNotFound, r.ID)
	}
	return s.wrap("Finish", err)
}

const finishTask = `UPDATE tasks SET status = $2, captcha_id = $3, attempts = $4,
	last_error = CASE WHEN $2 = 'failed' THEN $8 ELSE last_error END,
	last_error_code = CASE WHEN $2 = 'failed' THEN $9 ELSE last_error_code END,
	result_method = $5, result_kind = $6, result_token = $7, result_answer = $10, result_error = $8,
	result_error_code = $9, result_attempts = $4, result_solve_seconds = $11, result_expires_at = $12,
	result_accepted_at = $13, result_submitted_at = $14, finished_at = $15, result_provider = $16,
	result_price = $17, result_abandoned = $18, result_reservoir = $19,
	pingback_owed = CASE WHEN pingback <> '' THEN now() END, pingback_lease = NULL`

func finishArgs(r captchaq.Result) []any {
	var answer any
	if len(r.Answer) > 0 {
		answer = clean(string(r.Answer))
	}
	abandoned, _ := encoder.Abandoned(r.Abandoned)
	return []any{
		r.ID, string(r.Status), clean(r.CaptchaID), r.Attempts, clean(r.Method), clean(string(r.Kind)), clean(r.Token),
		clean(r.Error), clean(r.ErrorCode), answer, r.SolveSeconds, timeArg(r.ExpiresAt), timeArg(r.AcceptedAt),
		timeArg(r.SubmittedAt), r.FinishedAt.UTC(), clean(r.Provider), r.Price, abandoned, clean(r.Reservoir),
	}
}

// Renew implements captchaq.Store.
func (s *Store) Renew(ctx context.Context, t captchaq.Task, now time.Time) (captchaq.Record, error) {
	if s.closed.Load() {
		return captchaq.Record{}, ErrClosed
	}
	r, err := newTaskRow(t, now)
	if err != nil {
		return captchaq.Record{}, err
	}
	rec, err := scanRecord(s.pool.QueryRow(ctx, `UPDATE tasks SET status = 'queued', priority = $2, tenant = $3, method = $4,
		params = $5, deadline = $6, max_attempts = $7, proxy = $8, proxy_type = $9, pingback = $10, accepted_at = $11,
		fingerprint = $12, attempts = 0, captcha_id = '', not_before = NULL, last_error = '', last_error_code = '',
		submitted_at = NULL, report = '', reported_at = NULL,`+clearResult+` WHERE id = $1 AND status = 'solved' RETURNING `+recordColumns, r.args()...))
	if !errors.Is(err, pgx.ErrNoRows) {
		return rec, s.wrap("Renew", err)
	}
	var status string
	err = s.pool.QueryRow(ctx, `SELECT status FROM tasks WHERE id = $1`, t.ID).Scan(&status)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return captchaq.Record{}, fmt.Errorf("%w: %q", captchaq.ErrNotFound, t.ID)
	case err != nil:
		return captchaq.Record{}, s.wrap("Renew", err)
	}
	return captchaq.Record{}, fmt.Errorf("postgres: Renew %q: task is %s, not solved", t.ID, status)
}

const clearResult = ` result_method = NULL, result_kind = NULL, result_token = NULL, result_answer = NULL,
	result_error = NULL, result_error_code = NULL, result_attempts = NULL, result_solve_seconds = NULL,
	result_expires_at = NULL, result_accepted_at = NULL, result_submitted_at = NULL, finished_at = NULL,
	result_provider = NULL, result_price = NULL, result_abandoned = NULL, result_reservoir = NULL`

// Replay implements captchaq.Store. A replayed task keeps its Seq and
// LastError; AcceptedAt becomes now and SubmittedAt is cleared.
func (s *Store) Replay(ctx context.Context, f captchaq.DeadLetterFilter, now time.Time) (int, error) {
	if s.closed.Load() {
		return 0, ErrClosed
	}
	tag, err := s.pool.Exec(ctx, `UPDATE tasks SET status = 'queued', attempts = 0, captcha_id = '', not_before = NULL,
		accepted_at = $5, submitted_at = NULL,`+clearResult+` WHERE status = 'failed' AND `+filterWhere,
		append(filterArgs(f), now.UTC())...)
	if err != nil {
		return 0, s.wrap("Replay", err)
	}
	return int(tag.RowsAffected()), nil
}

// Report implements captchaq.Store.
func (s *Store) Report(ctx context.Context, id string, good bool, at time.Time) (bool, error) {
	if s.closed.Load() {
		return false, ErrClosed
	}
	if !storable(id) {
		return false, fmt.Errorf("%w: %q", captchaq.ErrNotFound, id)
	}
	verdict := captchaq.ReportBad
	if good {
		verdict = captchaq.ReportGood
	}
	// One statement: of several processes reporting at once, one sets it.
	var status string
	var first bool
	err := s.pool.QueryRow(ctx, `WITH set AS (
			UPDATE tasks SET report = $2, reported_at = $3 WHERE id = $1 AND status = 'solved' AND report = '' RETURNING id)
		SELECT status, EXISTS (SELECT 1 FROM set) FROM tasks WHERE id = $1`, id, verdict, at.UTC()).Scan(&status, &first)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, fmt.Errorf("%w: %q", captchaq.ErrNotFound, id)
	case err != nil:
		return false, s.wrap("Report", err)
	case status != string(captchaq.StatusSolved):
		return false, fmt.Errorf("postgres: Report %q: task is %s: %w", id, status, captchaq.ErrNotSolved)
	}
	return first, nil
}

// Prune implements captchaq.Store.
func (s *Store) Prune(ctx context.Context, finishedBefore time.Time) (int, error) {
	if s.closed.Load() {
		return 0, ErrClosed
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM tasks WHERE status IN ('solved', 'failed') AND finished_at < $1`, finishedBefore.UTC())
	if err != nil {
		return 0, s.wrap("Prune", err)
	}
	return int(tag.RowsAffected()), nil
}

// Get implements captchaq.Store. An id PostgreSQL cannot hold (a NUL
// byte, invalid UTF-8) is not found.
func (s *Store) Get(ctx context.Context, id string) (captchaq.Record, error) {
	if s.closed.Load() {
		return captchaq.Record{}, ErrClosed
	}
	if !storable(id) {
		return captchaq.Record{}, fmt.Errorf("%w: %q", captchaq.ErrNotFound, id)
	}
	rec, err := scanRecord(s.pool.QueryRow(ctx, selectRecord+` WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return captchaq.Record{}, fmt.Errorf("%w: %q", captchaq.ErrNotFound, id)
	}
	return rec, s.wrap("Get", err)
}

// Pending implements captchaq.Store.
func (s *Store) Pending(ctx context.Context, fn func(captchaq.Record) error) error {
	return s.each(ctx, "Pending", fn, selectRecord+` WHERE status IN ('queued', 'inflight') ORDER BY seq`)
}

// PendingHeads is Pending with no task's Params read (each record's are
// nil): for a reader of states and times, such as a gateway of a front
// reading the front's unfinished tasks again every 30 s, which would
// otherwise read every unfinished image task's body each time.
func (s *Store) PendingHeads(ctx context.Context, fn func(captchaq.Record) error) error {
	return s.each(ctx, "PendingHeads", fn, `SELECT `+headColumns+` FROM tasks WHERE status IN ('queued', 'inflight') ORDER BY seq`)
}

// Heads calls fn, in one round trip, with the record of each of ids that
// is stored, as Get reads it but with no Params; an id not stored is left
// out.
func (s *Store) Heads(ctx context.Context, ids []string, fn func(captchaq.Record) error) error {
	var some []string
	for _, id := range ids {
		if storable(id) { // one it cannot hold is not stored
			some = append(some, id)
		}
	}
	return s.each(ctx, "Heads", fn, `SELECT `+headColumns+` FROM tasks WHERE id = ANY($1) ORDER BY seq`, some)
}

// Results implements captchaq.Store.
func (s *Store) Results(ctx context.Context, fn func(captchaq.Result) error) error {
	return s.each(ctx, "Results", func(r captchaq.Record) error { return fn(*r.Result) },
		selectRecord+` WHERE status IN ('solved', 'failed') ORDER BY seq`)
}

// DeadLetters implements captchaq.Store. IDs and ErrorCode, when both are
// set, must both match; All selects every dead letter whatever else is set.
func (s *Store) DeadLetters(ctx context.Context, f captchaq.DeadLetterFilter, fn func(captchaq.Record) error) error {
	where := filterWhere
	if f.Tenant != "" {
		// Planned on tasks_dead_by_tenant, also as a generic plan.
		where += ` AND tenant = $4`
	}
	return s.each(ctx, "DeadLetters", fn, selectRecord+` WHERE status = 'failed' AND `+where+` ORDER BY seq`, filterArgs(f)...)
}

// each calls fn for every record the query returns, stopping at fn's first
// error, which it returns as it is. The rows are read as they come, on one
// connection of the pool.
func (s *Store) each(ctx context.Context, op string, fn func(captchaq.Record) error, query string, args ...any) error {
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
func (s *Store) wrap(op string, err error) error {
	return sqlstore.Wrap(err, s.closed.Load(), s.name, op)
}

// filterWhere selects the dead letters a filter names; its arguments come
// from filterArgs. The zero filter selects none.
const filterWhere = `($1 OR (($2::text[] IS NOT NULL OR $3 <> '')
	AND ($2::text[] IS NULL OR id = ANY($2::text[]))
	AND ($3 = '' OR result_error_code = $3)))
	AND ($4 = '' OR tenant = $4)`

func filterArgs(f captchaq.DeadLetterFilter) []any {
	var ids []string
	for _, id := range f.IDs {
		if storable(id) { // one it cannot hold matches nothing
			ids = append(ids, id)
		}
	}
	var idArg any
	if len(f.IDs) > 0 {
		idArg = append([]string{}, ids...)
	}
	return []any{f.All, idArg, clean(f.ErrorCode), clean(f.Tenant)}
}

// storable reports whether PostgreSQL can hold s as text: valid UTF-8
// without NUL bytes.
func storable(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// clean makes s storable, with U+FFFD for what is not.
func clean(s string) string {
	if storable(s) {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

func timeArg(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC()
}

// taskRow is a task encoded for the insert statements.
type taskRow struct{ sqlstore.TaskRow }

// newTaskRow encodes t. Params go as JSON text, which holds any string;
// the other texts must be storable, or t is refused as invalid.
func newTaskRow(t captchaq.Task, now time.Time) (taskRow, error) {
	for _, f := range []struct{ name, v string }{
		{"id", t.ID}, {"method", t.Method}, {"tenant", t.Tenant}, {"proxy", t.Proxy},
		{"proxytype", t.ProxyType}, {"pingback", t.Pingback},
	} {
		if !storable(f.v) {
			return taskRow{}, &captchaq.TaskError{ID: clean(t.ID), Code: captchaq.CodeInvalidTask,
				Msg: f.name + ": holds a NUL byte or invalid UTF-8: send text"}
		}
	}
	r, err := sqlstore.NewTaskRow(t, now)
	if err != nil {
		return taskRow{}, fmt.Errorf("postgres: task %q: %w", t.ID, err)
	}
	return taskRow{r}, nil
}

func (r taskRow) args() []any { return r.Args(timeArg(r.Task.Deadline), r.AcceptedAt) }

// recordColumns are the columns scanRecord expects; headColumns are the
// same with no params read, for PendingHeads and Heads.
const (
	recordColumns = sqlstore.RecordColumns
	headColumns   = sqlstore.HeadColumns
)

const selectRecord = `SELECT ` + recordColumns + ` FROM tasks`

// scanRecord reads a row of recordColumns or headColumns: times from
// timestamptz, Result.Abandoned from text[].
func scanRecord(row sqlstore.Scanner) (captchaq.Record, error) {
	return sqlstore.ScanRecord(row, decoder)
}

// encoder writes times as timestamptz (NULL for none), Result.Abandoned
// as text[] (NULL for none), and texts clean.
var encoder = sqlstore.Encoder{
	Time: timeArg,
	Abandoned: func(a []string) (any, error) {
		if len(a) == 0 {
			return nil, nil
		}
		out := make([]string, len(a))
		for i, p := range a {
			out[i] = clean(p)
		}
		return out, nil
	},
	Text: clean,
}

var decoder = sqlstore.Decoder[*time.Time, []string]{
	Time: func(t *time.Time) (time.Time, error) {
		if t == nil {
			return time.Time{}, nil
		}
		return *t, nil
	},
	Abandoned: func(a []string) ([]string, error) { return a, nil },
}
