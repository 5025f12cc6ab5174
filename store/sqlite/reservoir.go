package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/sqlstore"
)

var _ captchaq.ReservoirStore = (*Store)(nil)

// The writer's statements of reservoir tokens. takeToken deletes and
// returns the token expiring first at or after ?2 in one statement, on
// the reservoir_tokens_expiry index.
const (
	stockToken = `INSERT INTO reservoir_tokens (reservoir, ` + sqlstore.TokenColumns + `)
		VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)
		ON CONFLICT (reservoir, id) DO NOTHING`
	takeToken = `DELETE FROM reservoir_tokens WHERE reservoir = ?1 AND id = (
			SELECT id FROM reservoir_tokens WHERE reservoir = ?1 AND expires_at >= ?2
			ORDER BY expires_at, id LIMIT 1)
		RETURNING ` + sqlstore.TokenColumns
	dropTokens = `DELETE FROM reservoir_tokens WHERE reservoir = ?1 AND expires_at < ?2`
)

// StockToken implements captchaq.ReservoirStore.
func (s *Store) StockToken(ctx context.Context, name string, r captchaq.Result) error {
	if s.closed.Load() {
		return ErrClosed
	}
	args, err := sqlstore.TokenArgs(name, r, encoder)
	if err != nil {
		return err
	}
	err = s.w.do(ctx, func(ctx context.Context, st *statements) error {
		_, err := st.stockToken.ExecContext(ctx, args...)
		return err
	})
	return s.wrap("StockToken", err)
}

// TakeToken implements captchaq.ReservoirStore in one statement of the
// writer, which is the only one: two takes never see one token.
func (s *Store) TakeToken(ctx context.Context, name string, notBefore time.Time) (captchaq.Result, bool, error) {
	if s.closed.Load() {
		return captchaq.Result{}, false, ErrClosed
	}
	var r captchaq.Result
	var ok bool
	err := s.w.do(ctx, func(ctx context.Context, st *statements) error {
		var err error
		r, err = sqlstore.ScanToken(st.takeToken.QueryRowContext(ctx, name, timeText(notBefore)), decoder)
		ok = err == nil
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		return err
	})
	if err != nil || !ok {
		return captchaq.Result{}, false, s.wrap("TakeToken", err)
	}
	return r, true, nil
}

// DropTokens implements captchaq.ReservoirStore.
func (s *Store) DropTokens(ctx context.Context, name string, before time.Time) (int, error) {
	if s.closed.Load() {
		return 0, ErrClosed
	}
	var n int64
	err := s.w.do(ctx, func(ctx context.Context, st *statements) error {
		res, err := st.dropTokens.ExecContext(ctx, name, timeText(before))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), s.wrap("DropTokens", err)
}

// TokenCounts implements captchaq.ReservoirStore, with a read.
func (s *Store) TokenCounts(ctx context.Context) (map[string]int, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	rows, err := s.db.QueryContext(ctx, sqlstore.CountTokens)
	return sqlstore.TokenCounts(rows, err, func(err error) error { return s.wrap("TokenCounts", err) })
}
