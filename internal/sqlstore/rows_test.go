package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/captchaq/captchaq"
)

// rows are the rows of a query: each Scan reads the next one; err is
// what Err returns once they are read.
type rows struct {
	ids  []string
	next int
	err  error
}

func (r *rows) Next() bool { r.next++; return r.next <= len(r.ids) }
func (r *rows) Err() error { return r.err }
func (r *rows) Scan(dest ...any) error {
	*dest[0].(*string) = r.ids[r.next-1]
	return nil
}

// scanID reads the id of a row, refusing one named "bad".
func scanID(sc Scanner) (captchaq.Record, error) {
	var rec captchaq.Record
	if err := sc.Scan(&rec.Task.ID); err != nil {
		return rec, err
	}
	if rec.Task.ID == "bad" {
		return rec, errors.New("bad row")
	}
	return rec, nil
}

func wrapIn(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("wrapped: %w", err)
}

func TestEach(t *testing.T) {
	t.Parallel()
	stop := errors.New("stop")
	for _, tc := range []struct {
		name    string
		ids     []string
		rowsErr error
		stopAt  string
		want    []string
		wantErr string
	}{
		{name: "all", ids: []string{"a", "b", "c"}, want: []string{"a", "b", "c"}},
		{name: "fn's error as it is", ids: []string{"a", "b", "c"}, stopAt: "b", want: []string{"a", "b"}, wantErr: "stop"},
		{name: "scan error wrapped", ids: []string{"a", "bad", "c"}, want: []string{"a"}, wantErr: "wrapped: bad row"},
		{name: "rows error wrapped", ids: []string{"a"}, rowsErr: errors.New("conn reset"), want: []string{"a"}, wantErr: "wrapped: conn reset"},
	} {
		var got []string
		err := Each(&rows{ids: tc.ids, err: tc.rowsErr}, scanID, func(rec captchaq.Record) error {
			got = append(got, rec.Task.ID)
			if rec.Task.ID == tc.stopAt {
				return stop
			}
			return nil
		}, wrapIn)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: fn got %v, want %v", tc.name, got, tc.want)
		}
		if (err == nil && tc.wantErr != "") || (err != nil && err.Error() != tc.wantErr) {
			t.Errorf("%s: Each: %v, want %q", tc.name, err, tc.wantErr)
		}
		if tc.stopAt != "" && err != stop {
			t.Errorf("%s: fn's error came back as %#v, want it as it is", tc.name, err)
		}
	}
}

func TestWrap(t *testing.T) {
	t.Parallel()
	notFound := fmt.Errorf("%w: %q", captchaq.ErrNotFound, "t1")
	deadline := fmt.Errorf("read: %w", context.DeadlineExceeded)
	other := errors.New("disk I/O error")
	for _, tc := range []struct {
		err    error
		closed bool
		want   error
		text   string
	}{
		{err: nil, want: nil},
		{err: nil, closed: true, want: nil},
		{err: notFound, closed: true, want: notFound},
		{err: captchaq.ErrStoreClosed, want: captchaq.ErrStoreClosed},
		{err: context.Canceled, closed: true, want: context.Canceled},
		{err: deadline, want: deadline},
		{err: other, closed: true, want: captchaq.ErrStoreClosed},
		{err: other, text: "store /data/q.db: Finish: disk I/O error"},
	} {
		got := Wrap(tc.err, tc.closed, "/data/q.db", "Finish")
		if tc.text != "" {
			if got == nil || got.Error() != tc.text || !errors.Is(got, other) {
				t.Errorf("Wrap(%v, closed %v) = %v, want %q wrapping it", tc.err, tc.closed, got, tc.text)
			}
			continue
		}
		if got != tc.want {
			t.Errorf("Wrap(%v, closed %v) = %v, want %v", tc.err, tc.closed, got, tc.want)
		}
	}
}
