package sqlite

import (
	"context"
	"database/sql"

	"github.com/captchaq/captchaq/internal/sqlstore"
)

// LoadState returns the value SaveState stored under name, or nil. The
// queue keeps its providers' refusals of types here
// (captchaq.Config.RefusalHold).
func (s *Store) LoadState(ctx context.Context, name string) ([]byte, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	row := s.db.QueryRowContext(ctx, `SELECT value FROM queue_state WHERE name = ?`, name)
	return sqlstore.LoadState(row, sql.ErrNoRows, func(err error) error { return s.wrap("LoadState", err) })
}

// SaveState stores value under name, replacing what was there.
func (s *Store) SaveState(ctx context.Context, name string, value []byte) error {
	if s.closed.Load() {
		return ErrClosed
	}
	err := s.w.do(ctx, func(ctx context.Context, st *statements) error {
		_, err := st.saveState.ExecContext(ctx, name, value)
		return err
	})
	return s.wrap("SaveState", err)
}
