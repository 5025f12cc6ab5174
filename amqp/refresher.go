package amqp

import (
	"context"
	"time"
)

// refresher republishes checkpoints held for InflightRefresh, so the
// broker's consumer_timeout never closes the channel that holds them.
type refresher struct {
	s     *WorkerStore
	every time.Duration
}

func (r *refresher) run(ctx context.Context) {
	t := time.NewTicker(max(r.every/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.s.refreshDue(ctx, r.every)
		}
	}
}
