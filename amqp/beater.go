package amqp

import (
	"context"
	"log/slog"
	"time"

	"github.com/captchaq/captchaq/internal/startstop"
)

// beater publishes the worker's status beat, which Stats reads for the
// age of the oldest task held.
type beater struct {
	s     *WorkerStore
	p     *Publisher
	every time.Duration
	bal   *balanceReader
	pool  *threadPool // nil without SharedThreads
	log   *slog.Logger
}

func (b *beater) run(ctx context.Context) { startstop.Every(ctx, b.every, b.beatOnce) }

func (b *beater) beatOnce(ctx context.Context) {
	beat := b.s.beat(time.Now())
	b.bal.stamp(ctx, &beat)
	if b.pool != nil {
		beat.ThreadsHeld, beat.ThreadsPlan, _ = b.pool.Threads()
	}
	if err := b.p.Beat(ctx, beat); err != nil && ctx.Err() == nil {
		b.log.Debug("status beat not sent", "err", err)
	}
}
