package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/sqlstore"
)

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

// FinishIf stores r as Finish does, but only while the task's record is
// still as seen shows it (its status, captcha id, acceptance time and
// finish time): a compare-and-swap among the processes that share the
// database, so that of several that read a task unfinished and took a
// result for it, one stores it. It returns false when the record changed
// meanwhile (read it again and decide again), or is gone. A stored result
// is announced to the Watch functions of the other Stores.
func (s *Store) FinishIf(ctx context.Context, r captchaq.Result, seen captchaq.Record) (bool, error) {
	if s.closed.Load() {
		return false, ErrClosed
	}
	if !r.Status.Final() {
		return false, fmt.Errorf("postgres: FinishIf %q: status %q is not final: use %q or %q", r.ID, r.Status, captchaq.StatusSolved, captchaq.StatusFailed)
	}
	if !storable(r.ID) {
		return false, fmt.Errorf("%w: %q", captchaq.ErrNotFound, r.ID)
	}
	captchaID, finished := seen.CaptchaID, any(nil)
	if seen.Result != nil {
		captchaID, finished = seen.Result.CaptchaID, timeArg(seen.Result.FinishedAt)
	}
	args := append(finishArgs(r), string(seen.Status), clean(captchaID), seen.AcceptedAt.UTC(), finished)
	return s.finishWhere(ctx, "FinishIf", r.ID, ` WHERE id = $1 AND status = $20 AND captcha_id = $21
		AND accepted_at = $22 AND finished_at IS NOT DISTINCT FROM $23`, args)
}

// FinishMarked stores r for a task in flight under captchaID (the mark
// its gateway checkpointed it with), in one statement: false, storing
// nothing, when the task is not in flight under it (the caller reads the
// record and decides). A stored result is announced as FinishIf's is.
func (s *Store) FinishMarked(ctx context.Context, r captchaq.Result, captchaID string) (bool, error) {
	if s.closed.Load() {
		return false, ErrClosed
	}
	if !r.Status.Final() {
		return false, fmt.Errorf("postgres: FinishMarked %q: status %q is not final: use %q or %q", r.ID, r.Status, captchaq.StatusSolved, captchaq.StatusFailed)
	}
	if !storable(r.ID) || !storable(captchaID) {
		return false, nil
	}
	return s.finishWhere(ctx, "FinishMarked", r.ID, ` WHERE id = $1 AND status = 'inflight' AND captcha_id = $20`,
		append(finishArgs(r), captchaID))
}

// finishWhere stores a result with finishTask under where (its arguments
// after finishArgs'), and announces it: false, storing nothing, when
// where matched no row.
func (s *Store) finishWhere(ctx context.Context, op, id, where string, args []any) (bool, error) {
	tag, err := s.pool.Exec(ctx, finishTask+where, args...)
	if err != nil {
		return false, s.wrap(op, err)
	}
	if tag.RowsAffected() == 0 {
		return false, nil
	}
	s.announce(EventFinished, id)
	return true, nil
}
