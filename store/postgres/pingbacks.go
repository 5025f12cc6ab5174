package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/captchaq/captchaq"
)

var _ captchaq.PingbackLedger = (*Store)(nil)

// pingbacks keeps the ledger of the pingbacks the tasks owe.
type pingbacks struct{ *db }

// pingbackFree selects a final task that owes a pingback no lease holds,
// at the database's clock.
const pingbackFree = `status IN ('solved', 'failed') AND pingback_owed IS NOT NULL
	AND (pingback_lease IS NULL OR pingback_lease <= now())`

// TakePingback implements captchaq.PingbackLedger in one statement.
func (s *pingbacks) TakePingback(ctx context.Context, id string, lease time.Duration) (captchaq.Record, bool, error) {
	if s.closed.Load() {
		return captchaq.Record{}, false, ErrClosed
	}
	if !storable(id) {
		return captchaq.Record{}, false, nil
	}
	rec, err := scanRecord(s.pool.QueryRow(ctx, `UPDATE tasks SET pingback_lease = now() + $2 * interval '1 microsecond'
		WHERE id = $1 AND `+pingbackFree+` RETURNING `+recordColumns, id, lease.Microseconds()))
	if err == nil {
		return rec, true, nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return captchaq.Record{}, false, nil
	}
	return captchaq.Record{}, false, s.wrap("TakePingback", err)
}

// ClaimPingbacks implements captchaq.PingbackLedger in one statement:
// the rows another claimer has locked are skipped, and the lease is
// checked again on the row the UPDATE locks.
func (s *pingbacks) ClaimPingbacks(ctx context.Context, grace, lease time.Duration, max int) ([]captchaq.Record, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	var recs []captchaq.Record
	err := s.each(ctx, "ClaimPingbacks", func(r captchaq.Record) error {
		recs = append(recs, r)
		return nil
	}, `WITH picked AS MATERIALIZED (
			SELECT id AS picked_id FROM tasks WHERE pingback_owed <= now() - $1 * interval '1 microsecond'
				AND `+pingbackFree+` ORDER BY pingback_owed LIMIT $3 FOR UPDATE SKIP LOCKED),
		claimed AS (
			UPDATE tasks SET pingback_lease = now() + $2 * interval '1 microsecond'
			FROM picked WHERE id = picked_id AND `+pingbackFree+`
			RETURNING id AS claimed_id, pingback_owed AS owed)
		SELECT `+recordColumns+` FROM tasks JOIN claimed ON id = claimed_id ORDER BY owed, seq`,
		grace.Microseconds(), lease.Microseconds(), max)
	return recs, err
}

// PingbackDone implements captchaq.PingbackLedger.
func (s *pingbacks) PingbackDone(ctx context.Context, id string) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if !storable(id) {
		return nil
	}
	_, err := s.pool.Exec(ctx, `UPDATE tasks SET pingback_owed = NULL, pingback_lease = NULL WHERE id = $1`, id)
	return s.wrap("PingbackDone", err)
}
