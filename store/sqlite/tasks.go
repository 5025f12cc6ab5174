package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/sqlstore"
)

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
