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
	w     *Worker // its shared threads (nil: none)
	log   *slog.Logger
}

func (b *beater) run(ctx context.Context) { startstop.Every(ctx, b.every, b.beatOnce) }

func (b *beater) beatOnce(ctx context.Context) {
	beat := b.s.beat(time.Now())
	b.bal.stamp(ctx, &beat)
	if b.w != nil {
		beat.ThreadsHeld, beat.ThreadsPlan, _, _ = b.w.Threads()
		for _, pt := range b.w.ProviderThreads() {
			beat.Providers = append(beat.Providers, ProviderThreadsBeat{Provider: pt.Provider, Held: pt.Held, Plan: pt.Plan})
		}
	}
	if err := b.p.Beat(ctx, beat); err != nil && ctx.Err() == nil {
		b.log.Debug("status beat not sent", "err", err)
	}
	b.bal.keep(ctx, b.p, beat)
}
