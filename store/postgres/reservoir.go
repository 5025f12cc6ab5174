package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/sqlstore"
)

var _ captchaq.ReservoirStore = (*Store)(nil)

// reservoirs keeps the reservoirs' tokens (table reservoir_tokens).
type reservoirs struct{ *db }

// StockToken implements captchaq.ReservoirStore. Texts that PostgreSQL
// cannot hold are stored with U+FFFD in their place, as Finish stores
// them.
func (s *reservoirs) StockToken(ctx context.Context, name string, r captchaq.Result) error {
	if s.closed.Load() {
		return ErrClosed
	}
	args, err := sqlstore.TokenArgs(name, r, encoder)
	if err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO reservoir_tokens (reservoir, `+sqlstore.TokenColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
		ON CONFLICT (reservoir, id) DO NOTHING`, args...)
	return s.wrap("StockToken", err)
}

// TakeToken implements captchaq.ReservoirStore in one statement, its own
// transaction: the subquery locks the token it picks and skips those
// that other takes (the other replicas of a front) hold locked, so takes
// at once neither wait for each other nor get one token twice. A
// process that dies before the commit takes nothing; one that dies
// after it loses the one token it took.
func (s *reservoirs) TakeToken(ctx context.Context, name string, notBefore time.Time) (captchaq.Result, bool, error) {
	if s.closed.Load() {
		return captchaq.Result{}, false, ErrClosed
	}
	r, err := sqlstore.ScanToken(s.pool.QueryRow(ctx, `DELETE FROM reservoir_tokens WHERE reservoir = $1 AND id = (
			SELECT id FROM reservoir_tokens WHERE reservoir = $1 AND expires_at >= $2
			ORDER BY expires_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
		RETURNING `+sqlstore.TokenColumns, clean(name), notBefore.UTC()), decoder)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return captchaq.Result{}, false, nil
	case err != nil:
		return captchaq.Result{}, false, s.wrap("TakeToken", err)
	}
	return r, true, nil
}

// DropTokens implements captchaq.ReservoirStore.
func (s *reservoirs) DropTokens(ctx context.Context, name string, before time.Time) (int, error) {
	if s.closed.Load() {
		return 0, ErrClosed
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM reservoir_tokens WHERE reservoir = $1 AND expires_at < $2`, clean(name), before.UTC())
	if err != nil {
		return 0, s.wrap("DropTokens", err)
	}
	return int(tag.RowsAffected()), nil
}

// TokenCounts implements captchaq.ReservoirStore.
func (s *reservoirs) TokenCounts(ctx context.Context) (map[string]int, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	rows, err := s.pool.Query(ctx, sqlstore.CountTokens)
	return sqlstore.TokenCounts(rows, err, func(err error) error { return s.wrap("TokenCounts", err) })
}
