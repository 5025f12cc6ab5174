package sqlstore

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
)

// TaskRow is a task as both stores insert it: normalized, its Params as
// JSON text ("{}" for none), its fingerprint and the time it was
// accepted.
type TaskRow struct {
	Task        captchaq.Task
	Params      string
	Fingerprint string
	AcceptedAt  time.Time
}

// NewTaskRow encodes t, accepted at now (UTC, no monotonic reading).
func NewTaskRow(t captchaq.Task, now time.Time) (TaskRow, error) {
	t = normalize(t)
	params := "{}"
	if len(t.Params) > 0 {
		b, err := json.Marshal(t.Params)
		if err != nil {
			return TaskRow{}, fmt.Errorf("params: %w", err)
		}
		params = string(b)
	}
	return TaskRow{Task: t, Params: params, Fingerprint: t.Fingerprint(), AcceptedAt: now.UTC().Round(0)}, nil
}

// NewTaskRows encodes the tasks of one Enqueue with newRow. A task
// without an id fails the whole call, with an error that pkg ("sqlite")
// starts; so does an error of newRow, returned as it is.
func NewTaskRows[R any](pkg string, tasks []captchaq.Task, newRow func(captchaq.Task) (R, error)) ([]R, error) {
	rows := make([]R, len(tasks))
	for i, t := range tasks {
		if t.ID == "" {
			return nil, fmt.Errorf("%s: Enqueue: task %d (method %q) has no id: every task needs a unique id", pkg, i, t.Method)
		}
		r, err := newRow(t)
		if err != nil {
			return nil, err
		}
		rows[i] = r
	}
	return rows, nil
}

// normalize makes t what a read of it returns: UTC times, no TTL, nil for
// empty params.
func normalize(t captchaq.Task) captchaq.Task {
	t.TTL = 0
	if !t.Deadline.IsZero() {
		t.Deadline = t.Deadline.UTC().Round(0)
	}
	if len(t.Params) == 0 {
		t.Params = nil
	}
	return t
}

// Args are the arguments of both stores' insert of a task, $1 to $12:
// id, priority, tenant, method, params, deadline, max_attempts, proxy,
// proxy_type, pingback, accepted_at, fingerprint. deadline and acceptedAt
// are the row's times as the store's dialect takes them.
func (r TaskRow) Args(deadline, acceptedAt any) []any {
	t := r.Task
	return []any{
		t.ID, t.Priority, t.Tenant, t.Method, r.Params, deadline, t.MaxAttempts,
		t.Proxy, t.ProxyType, t.Pingback, acceptedAt, r.Fingerprint,
	}
}

// Queued is the record of the row just stored as a queued task with seq.
func (r TaskRow) Queued(seq int64) captchaq.Record {
	return captchaq.Record{Task: r.Task, Status: captchaq.StatusQueued, Seq: seq, Fingerprint: r.Fingerprint, AcceptedAt: r.AcceptedAt}
}

// RecordColumns are the columns ScanRecord reads, in its order;
// HeadColumns are the same with no params read (an image task's body:
// megabytes of base64), for readers of states and times.
const (
	RecordColumns = `seq, id, status, priority, tenant, method, params,` + restColumns
	HeadColumns   = `seq, id, status, priority, tenant, method, '{}',` + restColumns
	restColumns   = ` deadline, max_attempts,
	proxy, proxy_type, pingback, captcha_id, attempts, not_before, last_error, last_error_code,
	accepted_at, submitted_at, result_method, result_kind, result_token, result_answer, result_error,
	result_error_code, result_attempts, result_solve_seconds, result_expires_at, result_accepted_at,
	result_submitted_at, finished_at, fingerprint, result_provider, result_price, result_abandoned, result_reservoir,
	report, reported_at`
)

// Scanner is a row of a query: pgx.Row and pgx.Rows, *sql.Row and
// *sql.Rows.
type Scanner interface{ Scan(dest ...any) error }

// Decoder reads the columns a store's dialect holds its own way: a time
// scans into a T (*time.Time from timestamptz, sql.NullString from
// text) and Result.Abandoned into an A ([]string from text[],
// sql.NullString from JSON text). A NULL is the zero time or no
// abandoned providers.
type Decoder[T, A any] struct {
	Time      func(T) (time.Time, error)
	Abandoned func(A) ([]string, error)
}

// ScanRecord reads the RecordColumns of one row into a record: for a
// final task its Result too, which takes the captcha id (a Record's is
// only for a task in flight). Times come back in UTC.
func ScanRecord[T, A any](sc Scanner, d Decoder[T, A]) (captchaq.Record, error) {
	var (
		rec                                    captchaq.Record
		status, params                         string
		deadline, notBefore, acceptedAt, subAt T
		rExpires, rAccepted, rSub, finAt       T
		reportedAt                             T
		rMethod, rKind, rToken, rAnswer, rErr  *string
		rCode, rProvider, rReservoir           *string
		rAttempts                              *int
		rSolve, rPrice                         *float64
		rAbandoned                             A
	)
	t := &rec.Task
	err := sc.Scan(&rec.Seq, &t.ID, &status, &t.Priority, &t.Tenant, &t.Method, &params, &deadline, &t.MaxAttempts,
		&t.Proxy, &t.ProxyType, &t.Pingback, &rec.CaptchaID, &rec.Attempts, &notBefore, &rec.LastError, &rec.LastErrorCode,
		&acceptedAt, &subAt, &rMethod, &rKind, &rToken, &rAnswer, &rErr,
		&rCode, &rAttempts, &rSolve, &rExpires, &rAccepted,
		&rSub, &finAt, &rec.Fingerprint, &rProvider, &rPrice, &rAbandoned, &rReservoir, &rec.Report, &reportedAt)
	if err != nil {
		return captchaq.Record{}, err
	}
	rec.Status = captchaq.Status(status)
	if params != "{}" {
		if err := json.Unmarshal([]byte(params), &t.Params); err != nil {
			return captchaq.Record{}, fmt.Errorf("task %q: bad params JSON in store: %w", t.ID, err)
		}
	}
	times := []struct {
		dst *time.Time
		src T
	}{
		{&t.Deadline, deadline}, {&rec.NotBefore, notBefore}, {&rec.AcceptedAt, acceptedAt}, {&rec.SubmittedAt, subAt},
		{&rec.ReportedAt, reportedAt},
	}
	if rec.Status.Final() {
		r := &captchaq.Result{
			ID: t.ID, Status: rec.Status, Method: deref(rMethod), Kind: provider.Kind(deref(rKind)), Token: deref(rToken),
			Error: deref(rErr), ErrorCode: deref(rCode), Provider: deref(rProvider), Reservoir: deref(rReservoir),
			Attempts: deref(rAttempts), SolveSeconds: deref(rSolve), Price: deref(rPrice),
		}
		if r.Abandoned, err = d.Abandoned(rAbandoned); err != nil {
			return captchaq.Record{}, fmt.Errorf("task %q: %w", t.ID, err)
		}
		if rAnswer != nil {
			r.Answer = json.RawMessage(*rAnswer)
		}
		// A final record's captcha_id is its Result's.
		r.CaptchaID, rec.CaptchaID = rec.CaptchaID, ""
		times = append(times, []struct {
			dst *time.Time
			src T
		}{{&r.ExpiresAt, rExpires}, {&r.AcceptedAt, rAccepted}, {&r.SubmittedAt, rSub}, {&r.FinishedAt, finAt}}...)
		rec.Result = r
	}
	for _, tm := range times {
		at, err := d.Time(tm.src)
		if err != nil {
			return captchaq.Record{}, fmt.Errorf("task %q: %w", t.ID, err)
		}
		*tm.dst = at.UTC()
	}
	return rec, nil
}

// deref is *p, or the zero value for a NULL (nil).
func deref[V any](p *V) V {
	var v V
	if p != nil {
		v = *p
	}
	return v
}
