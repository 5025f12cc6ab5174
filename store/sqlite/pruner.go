package sqlite

import (
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
