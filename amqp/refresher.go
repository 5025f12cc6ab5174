package amqp

import (
	"context"
	"time"

	"github.com/captchaq/captchaq/internal/startstop"
)

// refresher republishes checkpoints held for InflightRefresh, so the
// broker's consumer_timeout never closes the channel that holds them.
type refresher struct {
	s     *WorkerStore
	every time.Duration
}

// run checks every quarter of InflightRefresh (at least every 10ms),
// the first time a quarter after it starts: nothing is due before then.
func (r *refresher) run(ctx context.Context) {
	startstop.Tick(ctx, max(r.every/4, 10*time.Millisecond), func(ctx context.Context) { r.s.refreshDue(ctx, r.every) })
}
