package postgres

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
		Logger: logger, Name: "postgres store", Store: slog.String("store", s.name), Pruned: pruned})
}

// Prune implements captchaq.Store.
func (s *Store) Prune(ctx context.Context, finishedBefore time.Time) (int, error) {
	if s.closed.Load() {
		return 0, ErrClosed
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM tasks WHERE status IN ('solved', 'failed') AND finished_at < $1`, finishedBefore.UTC())
	if err != nil {
		return 0, s.wrap("Prune", err)
	}
	return int(tag.RowsAffected()), nil
}
