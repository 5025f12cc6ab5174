package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/sqlstore"
)

var _ captchaq.StateStore = (*Store)(nil)

// states keeps the queue's named state (table queue_state).
type states struct{ *db }

// LoadState implements captchaq.StateStore: the value SaveState stored
// under name, or nil. The queue keeps its providers' refusals of types
// here (captchaq.Config.RefusalHold), so the queue that takes over a
// database knows those of the one before.
func (s *states) LoadState(ctx context.Context, name string) ([]byte, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	if !storable(name) {
		return nil, nil
	}
	row := s.pool.QueryRow(ctx, `SELECT value FROM queue_state WHERE name = $1`, name)
	return sqlstore.LoadState(row, pgx.ErrNoRows, func(err error) error { return s.wrap("LoadState", err) })
}

// SaveState implements captchaq.StateStore in one statement.
func (s *states) SaveState(ctx context.Context, name string, value []byte) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if !storable(name) {
		return fmt.Errorf("store %s: SaveState: name %q: PostgreSQL text holds neither NUL bytes nor invalid UTF-8; give a name without them", s.name, name)
	}
	if value == nil {
		value = []byte{}
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO queue_state (name, value) VALUES ($1, $2)
		ON CONFLICT (name) DO UPDATE SET value = excluded.value`, name, value)
	return s.wrap("SaveState", err)
}
