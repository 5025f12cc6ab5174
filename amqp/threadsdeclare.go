package amqp

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// threadsQueueArgs are the token queue's arguments: it never holds more
// than n ready tokens, whoever publishes.
func threadsQueueArgs(n int) amqp091.Table {
	return amqp091.Table{
		"x-queue-type": "classic",
		"x-max-length": int32(n),
		"x-overflow":   "reject-publish",
	}
}

// threadsReturningArgs are the arguments of the queue where a dead
// holder's tokens wait (each with its own expiration) before they go back
// to the token queue.
func threadsReturningArgs(names ThreadsNames) amqp091.Table {
	return amqp091.Table{
		"x-queue-type":              "classic",
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": names.Tokens,
	}
}

// DeclareThreads declares the fleet's thread pool of n threads (the
// plan's), now and after every reconnect, and fills it with n tokens if
// no worker has yet. Every worker on the prefix must give the same n: a
// pool declared with another n is a *ConflictError naming x-max-length.
func (c *Conn) DeclareThreads(ctx context.Context, n int) error {
	return c.declareThreadsAt(ctx, c.Names().PlanThreads(), n, "--threads (the plan's)")
}

// declareThreadsAt declares the thread pool of n threads whose queues
// are names, as DeclareThreads does; same names what every worker must
// give alike, for the conflict's message.
func (c *Conn) declareThreadsAt(ctx context.Context, names ThreadsNames, n int, same string) error {
	if n < 1 {
		return fmt.Errorf("amqp: threads %d: must be at least 1", n)
	}
	return c.declareQueue(ctx, names.Tokens, func(conn *amqp091.Connection) error {
		return declareThreads(conn, c.cfg, names, n, same)
	})
}

// declareThreads declares the token queue and fills it once.
func declareThreads(conn *amqp091.Connection, c Config, names ThreadsNames, n int, same string) error {
	d := &declarer{conn: conn}
	defer d.close()
	d.do("queue", names.Tokens, func(ch *amqp091.Channel) error {
		_, err := ch.QueueDeclare(names.Tokens, true, false, false, false, threadsQueueArgs(n))
		return err
	})
	d.do("queue", names.Returning, func(ch *amqp091.Channel) error {
		_, err := ch.QueueDeclare(names.Returning, true, false, false, false, threadsReturningArgs(names))
		return err
	})
	if err := errors.Join(d.errs...); err != nil {
		if errors.Is(err, ErrTopologyConflict) {
			return fmt.Errorf("%w; every worker on prefix %s must be started with the same %s", err, c.Prefix, same)
		}
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), threadsLockWait)
	defer cancel()
	return fillThreads(ctx, conn, names, n)
}

// fillThreads publishes the pool's tokens unless the marker queue says a
// worker did. It runs under the lock queue (an exclusive queue: one
// connection at a time may declare it, and the broker deletes it when
// that connection dies), so two workers starting together do not both
// fill; the tokens go in one transaction, so a fill is whole or absent.
func fillThreads(ctx context.Context, conn *amqp091.Connection, names ThreadsNames, n int) error {
	unlock, err := lockQueue(ctx, conn, names.Lock, "filling the thread pool")
	if err != nil {
		return err
	}
	defer unlock()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("amqp: open channel: %w", err)
	}
	if _, err := ch.QueueDeclarePassive(names.Filled, true, false, false, false, nil); err == nil {
		_ = ch.Close()
		return nil // filled before
	} else if !isCode(err, amqp091.NotFound) {
		return fmt.Errorf("amqp: inspect queue %s: %w", names.Filled, err)
	}
	// The failed passive declare closed that channel.
	if ch, err = conn.Channel(); err != nil {
		return fmt.Errorf("amqp: open channel: %w", err)
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(names.Tokens, true, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("amqp: inspect queue %s: %w", names.Tokens, err)
	}
	// A fill committed by a worker that died before its marker left its
	// tokens ready (nobody consumes before the marker): top up only.
	if err := ch.Tx(); err != nil {
		return fmt.Errorf("amqp: fill %s: %w", names.Tokens, err)
	}
	for range n - q.Messages {
		err := ch.PublishWithContext(ctx, "", names.Tokens, false, false, amqp091.Publishing{
			DeliveryMode: amqp091.Persistent, Type: "thread",
		})
		if err != nil {
			return fmt.Errorf("amqp: fill %s: %w", names.Tokens, err)
		}
	}
	if err := ch.TxCommit(); err != nil {
		return fmt.Errorf("amqp: fill %s: %w", names.Tokens, err)
	}
	if _, err := ch.QueueDeclare(names.Filled, true, false, false, false, amqp091.Table{"x-queue-type": "classic"}); err != nil {
		return fmt.Errorf("amqp: declare queue %s: %w", names.Filled, err)
	}
	return nil
}

// lockQueue declares the exclusive queue name, waiting while another
// connection holds it (doing what the error then says), and returns the
// function that deletes it.
func lockQueue(ctx context.Context, conn *amqp091.Connection, name, doing string) (unlock func(), err error) {
	for {
		ch, err := conn.Channel()
		if err != nil {
			return nil, fmt.Errorf("amqp: open channel: %w", err)
		}
		_, err = ch.QueueDeclare(name, false, true, true, false, nil)
		if err == nil {
			return func() {
				_, _ = ch.QueueDelete(name, false, false, false)
				_ = ch.Close()
			}, nil
		}
		if !isCode(err, amqp091.ResourceLocked) {
			return nil, fmt.Errorf("amqp: declare lock queue %s: %w", name, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("amqp: another worker holds %s (%s): %w", name, doing, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func isCode(err error, code int) bool {
	var ae *amqp091.Error
	return errors.As(err, &ae) && ae.Code == code
}
