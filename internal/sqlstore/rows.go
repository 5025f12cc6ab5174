package sqlstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/captchaq/captchaq"
)

// Rows are the rows of a query, pgx.Rows or *sql.Rows; their caller
// closes them.
type Rows interface {
	Scanner
	Next() bool
	Err() error
}

// Each calls fn with the record scan reads from each of rows, stopping at
// fn's first error, which it returns as it is. An error reading the rows
// goes through wrap.
func Each(rows Rows, scan func(Scanner) (captchaq.Record, error), fn func(captchaq.Record) error, wrap func(error) error) error {
	for rows.Next() {
		rec, err := scan(rows)
		if err != nil {
			return wrap(err)
		}
		if err := fn(rec); err != nil {
			return err
		}
	}
	return wrap(rows.Err())
}

// LoadState reads the value of a captchaq.StateStore from row: nil, with
// no error, when there is no row (an error that is noRows); an empty
// value, not nil, for an empty one stored. Another error goes through
// wrap.
func LoadState(row Scanner, noRows error, wrap func(error) error) ([]byte, error) {
	var v []byte
	err := row.Scan(&v)
	switch {
	case errors.Is(err, noRows):
		return nil, nil
	case err != nil:
		return nil, wrap(err)
	case v == nil:
		return []byte{}, nil
	}
	return v, nil
}

// Wrap names the store (its path, or its database without a password)
// and the call in a database error. ErrNotFound, ErrStoreClosed and
// context errors pass through as they are; any other error of a store
// that is closed is ErrStoreClosed, since the store was closed under the
// call.
func Wrap(err error, closed bool, store, op string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, captchaq.ErrNotFound), errors.Is(err, captchaq.ErrStoreClosed),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case closed:
		return captchaq.ErrStoreClosed
	}
	return fmt.Errorf("store %s: %s: %w", store, op, err)
}
