package postgres

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/sqlstore"
)

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
