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
	"strings"
	"sync/atomic"

	"github.com/captchaq/captchaq"
)

// Reader reads a store without writing to it: it never creates the file,
// takes no lock (so it works while a queue has the store open) and never
// migrates the schema. For commands that only look (results, dlq list).
type Reader struct {
	path      string
	db        *sql.DB
	selectRec string
	closed    atomic.Bool
}

// OpenReader opens the existing store at path for reading. It fails, and
// creates nothing, when path does not exist, is not a captchaq store, or
// has a schema newer than this code knows.
func OpenReader(ctx context.Context, path string) (*Reader, error) {
	if path == "" {
		return nil, errors.New("sqlite: store path is empty: give a file path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", path, err)
	}
	fi, err := os.Stat(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("store %s does not exist (nothing was created): check the path, or run the batch that writes it first", abs)
	case err != nil:
		return nil, fmt.Errorf("store %s cannot be opened: %w", abs, err)
	case fi.IsDir():
		return nil, fmt.Errorf("store %s is a directory: give the path of a store file in it", abs)
	}
	if err := checkHeaderReadOnly(abs); err != nil {
		return nil, err
	}
	q := url.Values{}
	q.Add("mode", "ro")
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", BusyTimeoutDefault.Milliseconds()))
	q.Add("_pragma", "query_only(1)")
	dsn := (&url.URL{Scheme: "file", Path: abs}).String() + "?" + q.Encode()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", abs, err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("store %s is not a usable SQLite database (%v); captchaq leaves it as it is", abs, err)
	}
	version, err := schemaOf(ctx, conn, abs)
	conn.Close()
	if err == nil && version < 1 {
		err = fmt.Errorf("store %s is empty: no task was ever stored in it", abs)
	}
	if err != nil {
		db.Close()
		return nil, err
	}
	r := &Reader{path: abs, db: db, selectRec: selectRecord}
	if version < 7 {
		// Before reservoirs: results came from none.
		r.selectRec = strings.Replace(r.selectRec, "result_reservoir,", "NULL,", 1)
	}
	if version < 4 {
		// Before reports: none.
		r.selectRec = strings.Replace(r.selectRec, "report, reported_at FROM", "'', NULL FROM", 1)
	}
	if version < 3 {
		// Before providers: results name none.
		r.selectRec = strings.Replace(r.selectRec, "result_provider, result_price, result_abandoned,", "NULL, NULL, NULL,", 1)
	}
	if version < 2 {
		// Before fingerprints: records read with none (compared by task).
		r.selectRec = strings.Replace(r.selectRec, "finished_at, fingerprint,", "finished_at, '',", 1)
	}
	return r, nil
}

func checkHeaderReadOnly(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("store %s cannot be opened for reading: %w", path, err)
	}
	defer f.Close()
	head := make([]byte, len(sqliteHeader))
	n, err := io.ReadFull(f, head)
	if n == 0 {
		return fmt.Errorf("store %s is empty: no task was ever stored in it", path)
	}
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("store %s cannot be read: %w", path, err)
	}
	if !bytes.Equal(head[:n], sqliteHeader) {
		return fmt.Errorf("store %s is not an SQLite database (it starts with %q); captchaq leaves it as it is", path, head[:n])
	}
	return nil
}

// Path returns the absolute path of the store's file.
func (r *Reader) Path() string { return r.path }

// Get returns one task's record, or captchaq.ErrNotFound.
func (r *Reader) Get(ctx context.Context, id string) (captchaq.Record, error) {
	if r.closed.Load() {
		return captchaq.Record{}, ErrClosed
	}
	rec, err := scanRecord(r.db.QueryRowContext(ctx, r.selectRec+` WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return captchaq.Record{}, fmt.Errorf("%w: %q", captchaq.ErrNotFound, id)
	}
	return rec, r.wrap(err)
}

// Results calls fn for every stored final result, in Seq order.
func (r *Reader) Results(ctx context.Context, fn func(captchaq.Result) error) error {
	return r.each(ctx, func(rec captchaq.Record) error { return fn(*rec.Result) },
		r.selectRec+` WHERE status IN ('solved', 'failed') ORDER BY seq`)
}

// DeadLetters calls fn for every failed task that matches f, in Seq order.
func (r *Reader) DeadLetters(ctx context.Context, f captchaq.DeadLetterFilter, fn func(captchaq.Record) error) error {
	args, err := filterArgs(f)
	if err != nil {
		return err
	}
	return r.each(ctx, fn, r.selectRec+` WHERE status = 'failed' AND `+deadLettersWhere(f)+` ORDER BY seq`, args...)
}

// Pending calls fn for every queued or in-flight task, in Seq order.
func (r *Reader) Pending(ctx context.Context, fn func(captchaq.Record) error) error {
	return r.each(ctx, fn, r.selectRec+` WHERE status IN ('queued', 'inflight') ORDER BY seq`)
}

func (r *Reader) each(ctx context.Context, fn func(captchaq.Record) error, query string, args ...any) error {
	if r.closed.Load() {
		return ErrClosed
	}
	return each(ctx, r.db, r.wrap, fn, query, args...)
}

func (r *Reader) wrap(err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("store %s: %w", r.path, err)
}

// Close releases the reader.
func (r *Reader) Close() error {
	if !r.closed.CompareAndSwap(false, true) {
		return ErrClosed
	}
	return r.db.Close()
}
