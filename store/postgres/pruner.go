package postgres

import (
	"context"
	"log/slog"
	"time"

	"github.com/captchaq/captchaq/internal/startstop"
)

// pruner deletes final tasks older than the retention, at Open and then
// every interval, so a long-running store does not grow without bound.
type pruner struct {
	*startstop.Loop
	store     *Store
	retention time.Duration
	interval  time.Duration
	logger    *slog.Logger
	pruned    func(n int, err error)
}

// newPruner returns the loop; Stop interrupts a prune under way and waits
// for it to return.
func newPruner(s *Store, retention, interval time.Duration, logger *slog.Logger, pruned func(int, error)) *pruner {
	p := &pruner{store: s, retention: retention, interval: interval, logger: logger, pruned: pruned}
	p.Loop = startstop.New(p.run)
	return p
}

func (p *pruner) run(ctx context.Context) { startstop.Every(ctx, p.interval, p.pruneOnce) }

func (p *pruner) pruneOnce(ctx context.Context) {
	cutoff := time.Now().Add(-p.retention)
	n, err := p.store.Prune(ctx, cutoff)
	switch {
	case err != nil && ctx.Err() == nil:
		p.logger.Error("postgres store: prune failed", "store", p.store.name, "err", err)
	case n > 0:
		p.logger.Info("postgres store: pruned final tasks", "store", p.store.name, "count", n, "finished_before", cutoff)
	}
	if p.pruned != nil {
		p.pruned(n, err)
	}
}
