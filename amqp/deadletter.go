package amqp

import (
	"context"
	"fmt"
	"slices"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/captchaq/captchaq"
)

// DeadLetter is one message of the dead-letter queue.
type DeadLetter struct {
	Task TaskMessage
	// Reason is HeaderReason when the queue put it there (permanent,
	// exhausted, invalid), or the broker's x-death reason (expired,
	// rejected, maxlen).
	Reason string
	// ErrorCode is the last error's code; EXPIRED for a task whose TTL ran
	// out in a task queue.
	ErrorCode string
	// From is the queue the broker dead-lettered it from, if it did.
	From string
	// Body is set, and Task empty, when the body is not a task.
	Body []byte
	// DeadAt is the message timestamp (when it was last published).
	DeadAt time.Time
}

func readDeadLetter(m amqp091.Delivery) DeadLetter {
	dl := DeadLetter{DeadAt: m.Timestamp, Reason: headerString(m.Headers, HeaderReason)}
	t, err := DecodeTask(m.Body, m.Headers)
	if err != nil {
		dl.Body = m.Body
		dl.Reason = cmpOr(dl.Reason, ReasonInvalid)
	} else {
		t.ReplyTo = m.ReplyTo
		dl.Task = t
		dl.ErrorCode = t.LastErrorCode
	}
	if d, ok := LastDeath(m.Headers); ok && dl.Reason == "" {
		dl.Reason, dl.From = d.Reason, d.Queue
		if d.Reason == "expired" && dl.ErrorCode == "" {
			dl.ErrorCode = "EXPIRED"
		}
	}
	return dl
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// matches tells whether f selects dl. On the fleet f.ErrorCode also names
// a dead letter's reason (permanent, exhausted, invalid, expired), so
// `dlq replay --reason` selects by either.
func matches(f captchaq.DeadLetterFilter, dl DeadLetter) bool {
	switch {
	case f.All:
		return true
	case len(f.IDs) > 0:
		return dl.Task.Task.ID != "" && slices.Contains(f.IDs, dl.Task.Task.ID)
	case f.ErrorCode != "":
		return dl.ErrorCode == f.ErrorCode || dl.Reason == f.ErrorCode
	}
	return false
}

// drainFailed takes every message of the dead-letter queue without acking,
// on a channel of its own, and calls fn with each. Closing the channel puts
// back whatever fn did not ack, in its order.
func (c *Conn) drainFailed(ctx context.Context, fn func(ch *amqp091.Channel, m amqp091.Delivery) error) error {
	ch, _, err := c.channel(ctx)
	if err != nil {
		return err
	}
	defer ch.Close()
	q := c.Names().Failed
	for ctx.Err() == nil {
		m, ok, err := ch.Get(q, false)
		if err != nil {
			return fmt.Errorf("amqp: read %s: %w", q, err)
		}
		if !ok {
			return nil
		}
		if err := fn(ch, m); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// DeadLetters calls fn for every dead letter, oldest first, and leaves them
// all in place.
func (c *Conn) DeadLetters(ctx context.Context, fn func(DeadLetter) error) error {
	return c.drainFailed(ctx, func(_ *amqp091.Channel, m amqp091.Delivery) error {
		return fn(readDeadLetter(m))
	})
}

// Replay publishes the dead letters that match f back to the task exchange
// with their attempts and errors reset, each confirmed before it leaves the
// dead-letter queue, and returns how many it moved. A task keeps its
// reply-to, so its result goes back to the gateway that accepted it.
func (c *Conn) Replay(ctx context.Context, f captchaq.DeadLetterFilter) (int, error) {
	p := c.NewPublisher()
	defer p.Close()
	n := 0
	err := c.drainFailed(ctx, func(ch *amqp091.Channel, m amqp091.Delivery) error {
		dl := readDeadLetter(m)
		if dl.Body != nil || !matches(f, dl) {
			return nil
		}
		t := TaskMessage{Task: dl.Task.Task, Accepted: time.Now(), ReplyTo: dl.Task.ReplyTo}
		if err := p.PublishTask(ctx, t); err != nil {
			return fmt.Errorf("amqp: replay %q: %w", t.Task.ID, err)
		}
		if err := ch.Ack(m.DeliveryTag, false); err != nil {
			// Published but still a dead letter: a second replay would
			// publish it again, which the task id makes harmless.
			return fmt.Errorf("amqp: replay %q: ack: %w", t.Task.ID, err)
		}
		n++
		return nil
	})
	return n, err
}
