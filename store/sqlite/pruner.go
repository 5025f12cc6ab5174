package sqlite

import (
	"context"
	"log/slog"
	"time"
)

// pruner deletes final tasks older than the retention, at Open and then
// every interval, so a long-running store does not grow without bound.
type pruner struct {
	store     *Store
	retention time.Duration
	interval  time.Duration
	logger    *slog.Logger
	pruned    func(n int, err error)
	cancel    context.CancelFunc
	ctx       context.Context
	done      chan struct{}
}

func newPruner(s *Store, retention, interval time.Duration, logger *slog.Logger, pruned func(int, error)) *pruner {
	ctx, cancel := context.WithCancel(context.Background())
	return &pruner{
		store: s, retention: retention, interval: interval, logger: logger, pruned: pruned,
		ctx: ctx, cancel: cancel, done: make(chan struct{}),
	}
}

func (p *pruner) start() { go p.run() }

// stop ends the loop and waits for a prune under way to return.
func (p *pruner) stop() {
	p.cancel()
	<-p.done
}

func (p *pruner) run() {
	defer close(p.done)
	ticker := time.NewTicker(p.interval)
	defer ticker.Stop()
	for {
		p.pruneOnce()
		select {
		case <-p.ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

func (p *pruner) pruneOnce() {
	cutoff := time.Now().Add(-p.retention)
	n, err := p.store.Prune(p.ctx, cutoff)
	switch {
	case err != nil && p.ctx.Err() == nil:
		p.logger.Error("sqlite store: prune failed", "path", p.store.path, "err", err)
	case n > 0:
		p.logger.Info("sqlite store: pruned final tasks", "path", p.store.path, "count", n, "finished_before", cutoff)
	}
	if p.pruned != nil {
		p.pruned(n, err)
	}
}
