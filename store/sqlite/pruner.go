package sqlite

import (
	"context"
	"log/slog"
	"time"

	"github.com/captchaq/captchaq/internal/sqlstore"
)

// newPruner returns the store's prune loop (internal/sqlstore), which
// deletes final tasks older than retention at Start and then every
// interval; Stop interrupts a prune under way and waits for it.
func newPruner(s *Store, retention, interval time.Duration, logger *slog.Logger, pruned func(int, error)) *sqlstore.Pruner {
	return sqlstore.NewPruner(sqlstore.PrunerConfig{Prune: s.Prune, Retention: retention, Interval: interval,
		Logger: logger, Name: "sqlite store", Store: slog.String("path", s.path), Pruned: pruned})
}

// Prune implements captchaq.Store.
func (s *Store) Prune(ctx context.Context, finishedBefore time.Time) (int, error) {
	if s.closed.Load() {
		return 0, ErrClosed
	}
	var n int64
	err := s.w.do(ctx, func(ctx context.Context, st *statements) error {
		res, err := st.prune.ExecContext(ctx, timeText(finishedBefore))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), s.wrap("Prune", err)
}
