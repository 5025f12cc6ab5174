package amqp

import (
	"context"
	"errors"

	"github.com/captchaq/captchaq"
)

// Collect takes results from the results queue and calls fn once per task
// id: a result published twice (a confirm lost to a reconnect) is acked and
// skipped. Each result is acked after fn returns, so a result fn did not
// take stays queued. Collect returns the number of results passed to fn,
// once count (if > 0) is reached or ctx ends; ctx ending is not an error.
func (c *Conn) Collect(ctx context.Context, count int, fn func(captchaq.Result) error) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	k, err := c.consume(ctx, []string{c.Names().Results}, 64, ackGathered)
	if err != nil {
		if ctx.Err() != nil {
			return 0, nil
		}
		return 0, err
	}
	defer k.Close()
	seen := map[string]bool{}
	n := 0
	log := c.cfg.Logger
	for d := range k.Deliveries() {
		r, err := DecodeResult(d.Body)
		if err != nil {
			log.Warn("dropping a result that does not decode", "message_id", d.MessageID, "err", err)
			_ = d.Ack()
			continue
		}
		if seen[r.ID] {
			_ = d.Ack()
			continue
		}
		if err := fn(r); err != nil {
			_ = d.Nack(true)
			return n, err
		}
		if err := d.Ack(); err != nil && !errors.Is(err, ErrStaleDelivery) {
			return n, err
		}
		// A stale ack means the result comes again; it is remembered as
		// seen, so it is skipped then.
		seen[r.ID] = true
		n++
		if count > 0 && n >= count {
			return n, nil
		}
	}
	return n, nil
}
