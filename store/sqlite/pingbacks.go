package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/captchaq/captchaq"
)

var _ captchaq.PingbackLedger = (*Store)(nil)

// pingbackFree selects a final task that owes a pingback no lease holds
// at ?2, the statement's now.
const pingbackFree = `status IN ('solved', 'failed') AND pingback_owed IS NOT NULL
	AND (pingback_lease IS NULL OR pingback_lease <= ?2)`

// TakePingback implements captchaq.PingbackLedger, at this process's
// clock: a read, and a write only for a task that owes a pingback.
func (s *Store) TakePingback(ctx context.Context, id string, lease time.Duration) (captchaq.Record, bool, error) {
	if s.closed.Load() {
		return captchaq.Record{}, false, ErrClosed
	}
	// A read first: most results owe no pingback, and need no write.
	var owed bool
	err := s.db.QueryRowContext(ctx, `SELECT pingback_owed IS NOT NULL FROM tasks WHERE id = ?`, id).Scan(&owed)
	if errors.Is(err, sql.ErrNoRows) || err == nil && !owed {
		return captchaq.Record{}, false, nil
	}
	if err != nil {
		return captchaq.Record{}, false, s.wrap("TakePingback", err)
	}
	var rec captchaq.Record
	var ok bool
	err = s.w.do(ctx, func(ctx context.Context, st *statements) error {
		rec, ok = captchaq.Record{}, false
		now := time.Now()
		res, err := st.takePingback.ExecContext(ctx, id, timeText(now), timeText(now.Add(lease)))
		if err := affected(id)(res, err); err != nil {
			if errors.Is(err, captchaq.ErrNotFound) {
				return nil // none owed, or leased
			}
			return err
		}
		rec, err = scanRecord(st.getByID.QueryRowContext(ctx, id))
		ok = err == nil
		return err
	})
	return rec, ok, s.wrap("TakePingback", err)
}

// ClaimPingbacks implements captchaq.PingbackLedger, at this process's
// clock, in one write transaction.
func (s *Store) ClaimPingbacks(ctx context.Context, grace, lease time.Duration, max int) ([]captchaq.Record, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	var recs []captchaq.Record
	err := s.w.do(ctx, func(ctx context.Context, st *statements) error {
		recs = nil
		now := time.Now()
		rows, err := st.owedPingbacks.QueryContext(ctx, timeText(now.Add(-grace)), timeText(now), max)
		if err != nil {
			return err
		}
		var ids []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			ids = append(ids, id)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		for _, id := range ids {
			if _, err := st.leasePingback.ExecContext(ctx, id, timeText(now.Add(lease))); err != nil {
				return err
			}
			rec, err := scanRecord(st.getByID.QueryRowContext(ctx, id))
			if err != nil {
				return err
			}
			recs = append(recs, rec)
		}
		return nil
	})
	return recs, s.wrap("ClaimPingbacks", err)
}

// PingbackDone implements captchaq.PingbackLedger.
func (s *Store) PingbackDone(ctx context.Context, id string) error {
	if s.closed.Load() {
		return ErrClosed
	}
	err := s.w.do(ctx, func(ctx context.Context, st *statements) error {
		_, err := st.pingbackDone.ExecContext(ctx, id)
		return err
	})
	return s.wrap("PingbackDone", err)
}
