package sqlstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/captchaq/captchaq"
)

// row is one row of RecordColumns by column name, as a driver would scan
// it; a column it does not name is NULL.
type row map[string]any

// Scan fills dest in the order of RecordColumns, and fails unless there
// is one dest a column.
func (r row) Scan(dest ...any) error {
	cols := strings.Split(RecordColumns, ",")
	if len(dest) != len(cols) {
		return fmt.Errorf("scan of %d columns into %d destinations", len(cols), len(dest))
	}
	for i, col := range cols {
		d := reflect.ValueOf(dest[i]).Elem()
		x, ok := r[strings.TrimSpace(col)]
		if !ok || x == nil {
			d.SetZero()
			continue
		}
		v := reflect.ValueOf(x)
		if d.Kind() == reflect.Pointer {
			p := reflect.New(d.Type().Elem())
			p.Elem().Set(v.Convert(d.Type().Elem()))
			d.Set(p)
			continue
		}
		d.Set(v.Convert(d.Type()))
	}
	return nil
}

// textDecoder is a dialect that holds times as RFC 3339 text and
// Result.Abandoned as a comma-separated list, "" for none.
var textDecoder = Decoder[string, string]{
	Time: func(s string) (time.Time, error) {
		if s == "" {
			return time.Time{}, nil
		}
		return time.Parse(time.RFC3339Nano, s)
	},
	Abandoned: func(s string) ([]string, error) {
		if s == "" {
			return nil, nil
		}
		return strings.Split(s, ","), nil
	},
}

func queuedRow() row {
	return row{
		"seq": int64(7), "id": "t1", "status": "inflight", "priority": 2, "tenant": "acme", "method": "turnstile",
		"params": `{"sitekey":"k"}`, "deadline": "2026-12-07T17:00:00+01:00", "max_attempts": 3,
		"proxy": "p:1", "proxy_type": "http", "pingback": "https://cb", "captcha_id": "c9", "attempts": 1,
		"not_before": "", "last_error": "busy", "last_error_code": "ERROR_NO_SLOT_AVAILABLE",
		"accepted_at": "2026-12-07T15:00:00Z", "submitted_at": "2026-12-07T15:00:01.5Z",
		"fingerprint": "fp", "report": "",
	}
}

func date(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

func TestScanRecordUnfinished(t *testing.T) {
	t.Parallel()
	got, err := ScanRecord(queuedRow(), textDecoder)
	if err != nil {
		t.Fatal(err)
	}
	want := captchaq.Record{
		Task: captchaq.Task{ID: "t1", Method: "turnstile", Params: map[string]string{"sitekey": "k"}, Priority: 2,
			Tenant: "acme", Deadline: date("2026-12-07T16:00:00Z"), MaxAttempts: 3, Proxy: "p:1", ProxyType: "http",
			Pingback: "https://cb"},
		Status: captchaq.StatusInFlight, Seq: 7, Fingerprint: "fp", CaptchaID: "c9", Attempts: 1,
		LastError: "busy", LastErrorCode: "ERROR_NO_SLOT_AVAILABLE",
		AcceptedAt: date("2026-12-07T15:00:00Z"), SubmittedAt: date("2026-12-07T15:00:01.5Z"),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("record (-want +got):\n%s", diff)
	}
	if got.Task.Deadline.Location() != time.UTC {
		t.Errorf("Deadline in %v, want UTC", got.Task.Deadline.Location())
	}
}

// TestScanRecordFinal: a final row's result columns make its Result,
// which takes the captcha id; "{}" params are none.
func TestScanRecordFinal(t *testing.T) {
	t.Parallel()
	r := queuedRow()
	for k, v := range map[string]any{
		"status": "solved", "params": "{}", "result_method": "turnstile", "result_kind": "token",
		"result_token": "tok", "result_answer": `{"x":1}`, "result_attempts": 2, "result_solve_seconds": 4.5,
		"result_expires_at": "2026-12-07T15:02:00Z", "result_accepted_at": "2026-12-07T15:00:00Z",
		"result_submitted_at": "2026-12-07T15:00:01.5Z", "finished_at": "2026-12-07T15:00:06Z",
		"result_provider": "main", "result_price": 0.002, "result_abandoned": "spare,slow", "result_reservoir": "ts",
		"report": "good", "reported_at": "2026-12-07T15:10:00Z",
	} {
		r[k] = v
	}
	got, err := ScanRecord(r, textDecoder)
	if err != nil {
		t.Fatal(err)
	}
	if got.Task.Params != nil || got.CaptchaID != "" || got.Report != "good" || !got.ReportedAt.Equal(date("2026-12-07T15:10:00Z")) {
		t.Errorf("Params %v, CaptchaID %q, Report %q at %v; want nil, \"\", good at 15:10",
			got.Task.Params, got.CaptchaID, got.Report, got.ReportedAt)
	}
	want := &captchaq.Result{
		ID: "t1", Status: captchaq.StatusSolved, Method: "turnstile", Kind: "token", Token: "tok",
		Answer: json.RawMessage(`{"x":1}`), Attempts: 2, CaptchaID: "c9", SolveSeconds: 4.5,
		ExpiresAt: date("2026-12-07T15:02:00Z"), Provider: "main", Price: 0.002, Abandoned: []string{"spare", "slow"},
		Reservoir:  "ts",
		AcceptedAt: date("2026-12-07T15:00:00Z"), SubmittedAt: date("2026-12-07T15:00:01.5Z"),
		FinishedAt: date("2026-12-07T15:00:06Z"),
	}
	if diff := cmp.Diff(want, got.Result); diff != "" {
		t.Errorf("Result (-want +got):\n%s", diff)
	}
}

func TestScanRecordErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		set  row
		want string
	}{
		{"params", row{"params": "{"}, `task "t1": bad params JSON in store: unexpected end of JSON input`},
		{"time", row{"submitted_at": "yesterday"}, `task "t1": parsing time "yesterday" as "2006-01-02T15:04:05.999999999Z07:00": cannot parse "yesterday" as "2006"`},
		{"result time", row{"status": "failed", "finished_at": "never"}, `task "t1": parsing time "never" as "2006-01-02T15:04:05.999999999Z07:00": cannot parse "never" as "2006"`},
	} {
		r := queuedRow()
		for k, v := range tc.set {
			r[k] = v
		}
		_, err := ScanRecord(r, textDecoder)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.want)
		}
	}
}

// TestTaskRow: a task is stored as a read of it returns it (UTC, no TTL,
// nil for empty params), its params as JSON text, in the insert's order.
func TestTaskRow(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 7, 16, 0, 0, 5, time.FixedZone("CET", 3600))
	task := captchaq.Task{ID: "t1", Method: "turnstile", Params: map[string]string{}, Priority: 2, Tenant: "acme",
		Deadline: now.Add(time.Hour), TTL: time.Minute, MaxAttempts: 3, Proxy: "p:1", ProxyType: "http", Pingback: "https://cb"}
	r, err := NewTaskRow(task, now)
	if err != nil {
		t.Fatal(err)
	}
	norm := task
	norm.Params, norm.TTL, norm.Deadline = nil, 0, now.Add(time.Hour).UTC()
	if diff := cmp.Diff(TaskRow{Task: norm, Params: "{}", Fingerprint: task.Fingerprint(), AcceptedAt: now.UTC()}, r); diff != "" {
		t.Errorf("NewTaskRow (-want +got):\n%s", diff)
	}
	if r.AcceptedAt.Location() != time.UTC || r.Task.Deadline.Location() != time.UTC {
		t.Errorf("times in %v and %v, want UTC", r.AcceptedAt.Location(), r.Task.Deadline.Location())
	}
	task.Params = map[string]string{"sitekey": "k"}
	if r, _ = NewTaskRow(task, now); r.Params != `{"sitekey":"k"}` {
		t.Errorf("Params %s, want {\"sitekey\":\"k\"}", r.Params)
	}
	wantArgs := []any{"t1", 2, "acme", "turnstile", `{"sitekey":"k"}`, "DEADLINE", 3, "p:1", "http", "https://cb", "ACCEPTED", r.Fingerprint}
	if diff := cmp.Diff(wantArgs, r.Args("DEADLINE", "ACCEPTED")); diff != "" {
		t.Errorf("Args (-want +got):\n%s", diff)
	}
	want := captchaq.Record{Task: r.Task, Status: captchaq.StatusQueued, Seq: 9, Fingerprint: r.Fingerprint, AcceptedAt: now.UTC()}
	if diff := cmp.Diff(want, r.Queued(9)); diff != "" {
		t.Errorf("Queued (-want +got):\n%s", diff)
	}
}

// TestNewTaskRows: the rows come in the tasks' order; a task without an
// id, or an error of newRow, fails the whole call.
func TestNewTaskRows(t *testing.T) {
	t.Parallel()
	id := func(t captchaq.Task) (string, error) { return "row " + t.ID, nil }
	rows, err := NewTaskRows("sqlite", []captchaq.Task{{ID: "b"}, {ID: "a"}}, id)
	if err != nil || !slices.Equal(rows, []string{"row b", "row a"}) {
		t.Errorf("NewTaskRows: %q, %v; want [row b row a], nil", rows, err)
	}
	rows, err = NewTaskRows("sqlite", []captchaq.Task{{ID: "a"}, {Method: "turnstile"}}, id)
	want := `sqlite: Enqueue: task 1 (method "turnstile") has no id: every task needs a unique id`
	if rows != nil || err == nil || err.Error() != want {
		t.Errorf("a task without an id: %q, %v; want nil, %s", rows, err, want)
	}
	refused := errors.New("refused")
	rows, err = NewTaskRows("postgres", []captchaq.Task{{ID: "a"}, {ID: "b"}}, func(t captchaq.Task) (string, error) {
		if t.ID == "b" {
			return "", refused
		}
		return t.ID, nil
	})
	if rows != nil || err != refused {
		t.Errorf("newRow's error: %q, %v; want nil, refused as it is", rows, err)
	}
}
