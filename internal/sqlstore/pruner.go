package sqlstore

import (
	"context"
	"log/slog"
	"time"

	"github.com/captchaq/captchaq/internal/startstop"
)

// PrunerConfig configures a Pruner. Every field but Pruned is required.
type PrunerConfig struct {
	// Prune deletes the final tasks that finished before its time, and
	// returns how many it deleted: the store's Prune.
	Prune func(ctx context.Context, finishedBefore time.Time) (int, error)
	// Retention is how long a final task is kept after it finished.
	Retention time.Duration
	// Interval is the time between two prunes.
	Interval time.Duration
	// Logger receives a line for each prune that deleted tasks and for
	// each that failed.
	Logger *slog.Logger
	// Name starts each log line ("sqlite store"); Store says which store
	// (its path, or its database without a password).
	Name  string
	Store slog.Attr
	// Pruned, when set, is told of each prune (tests).
	Pruned func(n int, err error)
}

// Pruner deletes final tasks older than the retention, at Start and then
// every interval, so a long-running store does not grow without bound.
// Stop interrupts a prune under way and waits for it to return.
type Pruner struct {
	*startstop.Loop
	c PrunerConfig
}

// NewPruner returns the loop, not started.
func NewPruner(c PrunerConfig) *Pruner {
	p := &Pruner{c: c}
	p.Loop = startstop.New(p.run)
	return p
}

func (p *Pruner) run(ctx context.Context) { startstop.Every(ctx, p.c.Interval, p.pruneOnce) }

func (p *Pruner) pruneOnce(ctx context.Context) {
	cutoff := time.Now().Add(-p.c.Retention)
	n, err := p.c.Prune(ctx, cutoff)
	switch {
	case err != nil && ctx.Err() == nil:
		p.c.Logger.Error(p.c.Name+": prune failed", p.c.Store, "err", err)
	case n > 0:
		p.c.Logger.Info(p.c.Name+": pruned final tasks", p.c.Store, "count", n, "finished_before", cutoff)
	}
	if p.c.Pruned != nil {
		p.c.Pruned(n, err)
	}
}
