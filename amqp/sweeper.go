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
// yet (one sent already is checkpointed and polled as usual). It also
// finds the tasks at the provider whose holder went back to the fleet
// (entry.gone: the broker dead-lettered their checkpoint for another
// worker to adopt), and has the queue let go of them: no more polls, and
// their result is not this worker's to deliver.
type staleSweeper struct {
	s     *WorkerStore
	q     *captchaq.Queue
	every time.Duration
}

// run sweeps every period, the first time a period after it starts.
func (w *staleSweeper) run(ctx context.Context) { startstop.Tick(ctx, w.every, w.sweepOnce) }

func (w *staleSweeper) sweepOnce(ctx context.Context) {
	for _, id := range w.s.letGo(time.Now()) {
		if err := w.q.Abandon(ctx, id); err != nil {
			w.s.holdings.unmarkLost(id)
		}
	}
	if ids := w.s.unsure.lost(w.s.pub.c); len(ids) > 0 {
		// On their own: a claim waits for the broker to be back.
		go w.s.claimEach(context.WithoutCancel(ctx), ids, "claiming a task whose ack may have been lost failed; another worker may solve it again")
	}
	for _, id := range w.s.holdings.ids() {
		if !w.s.holdings.markHandBack(id, true) {
			continue
		}
		if err := w.q.Cancel(ctx, id); err != nil {
			w.s.holdings.unmarkHandBack(id)
		}
	}
}

// claimGiveUp bounds how long a claim waits for the broker.
const claimGiveUp = 30 * time.Second
