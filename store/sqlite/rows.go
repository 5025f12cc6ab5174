package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/sqlstore"
)

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
