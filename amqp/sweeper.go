package amqp

import (
	"context"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/startstop"
)

// staleSweeper finds tasks whose every delivery came on a channel that has
// since died, before anything was checkpointed: the broker has put them
// back for the fleet, so the queue drops its copy if it has not sent it
// yet (one sent already is checkpointed and polled as usual).
type staleSweeper struct {
	s     *WorkerStore
	q     *captchaq.Queue
	every time.Duration
}

// run sweeps every period, the first time a period after it starts.
func (w *staleSweeper) run(ctx context.Context) { startstop.Tick(ctx, w.every, w.sweepOnce) }

func (w *staleSweeper) sweepOnce(ctx context.Context) {
	for _, id := range w.s.ids() {
		if !w.s.markHandBack(id, true) {
			continue
		}
		if err := w.q.Cancel(ctx, id); err != nil {
			w.s.unmarkHandBack(id)
		}
	}
}
