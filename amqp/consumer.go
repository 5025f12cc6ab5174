package amqp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/captchaq/captchaq/internal/startstop"
)

// ErrStaleDelivery is returned by Ack and Nack of a delivery whose channel
// has closed. Nothing is sent: a delivery tag means something else on any
// other channel. The broker has put the message back and will deliver it
// again.
var ErrStaleDelivery = errors.New("amqp: delivery is from a closed channel; the broker will deliver it again")

// ErrSettled is returned by a second Ack or Nack of one delivery.
var ErrSettled = errors.New("amqp: delivery already acked or nacked")

// Consumer takes messages from some queues with manual acks and a small
// prefetch, and opens a new channel (a new generation) whenever its channel
// or the connection dies or the broker cancels it.
type Consumer struct {
	c        *Conn
	queues   []string
	prefetch int
	acking   acking
	out      chan *Delivery
	gen      atomic.Uint64   // generation of the open channel; 0 while none
	loop     *startstop.Loop // run, from consume until Close or its ctx ends
	restarts atomic.Int64

	mu      sync.Mutex
	stopped bool
	cur     *amqp091.Channel // the open channel, nil between sessions
	tags    []string         // its consumer tags
}

// Delivery is one message. Ack and Nack go to the channel it came from,
// and only while that channel lives.
type Delivery struct {
	Queue       string
	Exchange    string
	RoutingKey  string
	MessageID   string
	Type        string // "task" or "result" for messages of this package
	ReplyTo     string
	Priority    uint8
	Redelivered bool
	Timestamp   time.Time
	Headers     amqp091.Table
	Body        []byte
	// Generation is the channel generation the delivery came on.
	Generation uint64

	consumer *Consumer
	ch       *amqp091.Channel
	acks     *acker
	tag      uint64
	epoch    uint64 // of the connection it came on (Conn.connectionEpoch)
	sess     *session
	settled  atomic.Bool
}

// session is one channel generation of a Consumer, as its deliveries see
// it: endedAt says when the channel closed (the broker has put back every
// delivery not settled).
type session struct {
	endedAt atomic.Int64 // unix nanoseconds; 0 while the channel lives
}

func (s *session) close() { s.endedAt.CompareAndSwap(0, time.Now().UnixNano()) }

// ended is when the session ended; the zero time while it lives.
func (s *session) ended() time.Time {
	if n := s.endedAt.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// Consume starts consuming queues with prefetch (0: Config.Prefetch; <0:
// unlimited). It returns once the first channel consumes, so a missing
// queue is reported at once. Deliveries stop when ctx ends or Close is
// called; unacked ones go back to their queues.
func (c *Conn) Consume(ctx context.Context, queues []string, prefetch int) (*Consumer, error) {
	return c.consume(ctx, queues, prefetch, ackAtOnce)
}

// acking is how a consumer sends its acks: gathered for delay, or in
// transaction mode (tx).
type acking struct {
	delay time.Duration
	tx    bool
}

var (
	// ackAtOnce sends each ack as soon as the acker is free.
	ackAtOnce = acking{}
	// ackGathered lets acks gather for gatherAcks.
	ackGathered = acking{delay: gatherAcks}
	// ackInTx puts the channel in transaction mode, for the deliveries
	// that hold a worker's tasks at the provider (checkpoint and adopt
	// queues): a task's result is published on its holder's channel and
	// the holder acked in one transaction (Delivery.ackWith), so the
	// broker takes both or neither, and every other ack is committed as
	// it goes.
	ackInTx = acking{tx: true}
)

// gatherAcks is how long a consumer of messages whose redelivery costs
// nothing (results and claims: readers dedupe them) lets acks gather
// before it sends them: under load most then travel in one multiple ack.
// The deliveries that hold tasks are not held back: a task redelivered
// after a broker failure would be submitted again, and a checkpoint's
// ack goes with its task's answer, in its transaction (ackInTx; before
// it, acks gathered for 2 ms let a SIGKILL right after a poll round's
// results were confirmed answer 9 tasks twice in one fresh-clone CI
// run).
const gatherAcks = 2 * time.Millisecond

// consume is Consume with acks sent as acking says.
func (c *Conn) consume(ctx context.Context, queues []string, prefetch int, acking acking) (*Consumer, error) {
	if len(queues) == 0 {
		return nil, errors.New("amqp: consume: no queue given")
	}
	switch {
	case prefetch == 0:
		prefetch = c.cfg.Prefetch
	case prefetch < 0:
		prefetch = 0
	}
	k := &Consumer{c: c, queues: queues, prefetch: prefetch, acking: acking, out: make(chan *Delivery)}
	first := make(chan error, 1)
	k.loop = startstop.New(func(ctx context.Context) { k.run(ctx, first) })
	if err := k.loop.Start(ctx); err != nil {
		return nil, err
	}
	select {
	case err := <-first:
		if err != nil {
			k.loop.Stop()
			return nil, err
		}
		return k, nil
	case <-ctx.Done():
		k.loop.Stop()
		return nil, ctx.Err()
	}
}

// Deliveries is closed once the consumer stops.
func (k *Consumer) Deliveries() <-chan *Delivery { return k.out }

// Generation is the generation of the consumer's open channel, 0 while it
// has none.
func (k *Consumer) Generation() uint64 { return k.gen.Load() }

// Restarts counts channels opened after the first.
func (k *Consumer) Restarts() int64 { return k.restarts.Load() }

// Close stops consuming and waits for the loop to end.
func (k *Consumer) Close() error {
	k.loop.Stop()
	return nil
}

// run opens channels and consumes on them until ctx ends or Stop; first
// gets the first channel's outcome.
func (k *Consumer) run(ctx context.Context, first chan<- error) {
	defer close(k.out)
	log := k.c.cfg.Logger.With("queues", k.queues)
	backoff := k.c.cfg.ReconnectMin
	for n := 0; ; n++ {
		err := k.session(ctx, first)
		first = nil
		if ctx.Err() != nil || k.isStopped() {
			return
		}
		log.Warn("consumer channel ended", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(jitter(backoff)):
		}
		backoff = min(backoff*2, k.c.cfg.ReconnectMax)
		k.restarts.Add(1)
	}
}

// session runs one channel generation until it ends.
func (k *Consumer) session(ctx context.Context, first chan<- error) (err error) {
	report := func(err error) error {
		if first != nil {
			first <- err
		}
		return err
	}
	ch, gen, epoch, err := k.c.channelEpoch(ctx)
	if err != nil {
		return report(err)
	}
	acks, err := newAcker(ch, k.acking.delay, k.acking.tx)
	if err != nil {
		_ = ch.Close()
		return report(err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	sess := &session{}
	defer func() {
		// Stale before closed, so no Ack races onto a dying channel; the
		// acks already settled go out first; closing ends the
		// forwarders' delivery streams.
		k.gen.Store(0)
		sess.close()
		acks.close()
		close(stop)
		_ = ch.Close()
		wg.Wait()
	}()
	closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	canceled := ch.NotifyCancel(make(chan string, len(k.queues)))
	if err := ch.Qos(k.prefetch, 0, false); err != nil {
		return report(fmt.Errorf("amqp: qos: %w", err))
	}
	merged := make(chan *Delivery)
	k.mu.Lock()
	if k.stopped {
		k.mu.Unlock()
		return report(errors.New("amqp: consumer stopped"))
	}
	k.cur, k.tags = ch, nil
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		k.cur, k.tags = nil, nil
		k.mu.Unlock()
	}()
	for i, q := range k.queues {
		tag := fmt.Sprintf("captchaq-%d-%d", gen, i)
		k.mu.Lock()
		k.tags = append(k.tags, tag)
		k.mu.Unlock()
		ds, err := ch.Consume(q, tag, false, false, false, false, nil)
		if err != nil {
			return report(fmt.Errorf("amqp: consume %q: %w", q, err))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range ds {
				del := &Delivery{
					Queue: q, Exchange: d.Exchange, RoutingKey: d.RoutingKey, MessageID: d.MessageId,
					Type: d.Type, ReplyTo: d.ReplyTo, Priority: d.Priority, Redelivered: d.Redelivered, Timestamp: d.Timestamp,
					Headers: d.Headers, Body: d.Body, Generation: gen,
					consumer: k, ch: ch, acks: acks, tag: d.DeliveryTag, epoch: epoch, sess: sess,
				}
				select {
				case merged <- del:
				case <-stop:
					return
				}
			}
		}()
	}
	k.gen.Store(gen)
	report(nil)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e := <-closed:
			return closedErr(e)
		case tag := <-canceled:
			return fmt.Errorf("amqp: the broker cancelled consumer %s (queue deleted?)", tag)
		case d := <-merged:
			select {
			case k.out <- d:
			case <-ctx.Done():
				return ctx.Err()
			case e := <-closed:
				return fmt.Errorf("amqp: channel closed: %v", e)
			}
		}
	}
}

// closedErr is why a channel closed: the broker's error, or none for a
// close asked by this side.
func closedErr(e *amqp091.Error) error {
	if e == nil {
		return errors.New("amqp: channel closed")
	}
	return e
}

// Stop asks the broker to send no more deliveries but keeps the channel
// open, so deliveries already held can still be acked or nacked; the
// consumer does not open another channel. Close ends it for good.
func (k *Consumer) Stop() error {
	k.mu.Lock()
	k.stopped = true
	ch, tags := k.cur, k.tags
	k.mu.Unlock()
	var errs []error
	for _, tag := range tags {
		if err := ch.Cancel(tag, false); err != nil && !ch.IsClosed() {
			errs = append(errs, fmt.Errorf("amqp: cancel consumer %s: %w", tag, err))
		}
	}
	return errors.Join(errs...)
}

func (k *Consumer) isStopped() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.stopped
}

// live reports whether the delivery's channel is still the consumer's open
// one.
func (d *Delivery) live() bool {
	return d.consumer.gen.Load() == d.Generation && !d.ch.IsClosed()
}

// Ack acknowledges the delivery on its own channel. The ack goes out at
// once or together with others settled meanwhile (one multiple ack; see
// acker). ErrStaleDelivery means the channel died first and the broker
// will deliver the message again.
func (d *Delivery) Ack() error {
	if !d.live() {
		return ErrStaleDelivery
	}
	if !d.settled.CompareAndSwap(false, true) {
		return ErrSettled
	}
	if !d.acks.ack(d.tag) {
		return ErrStaleDelivery
	}
	return nil
}

// Nack rejects the delivery on its own channel: requeue puts it back,
// otherwise the queue dead-letters it.
func (d *Delivery) Nack(requeue bool) error {
	if !d.live() {
		return ErrStaleDelivery
	}
	if !d.settled.CompareAndSwap(false, true) {
		return ErrSettled
	}
	if err := d.acks.nack(d.tag, requeue); err != nil {
		return fmt.Errorf("%w: %v", ErrStaleDelivery, err)
	}
	return nil
}

// ackWith publishes out on the delivery's own channel and acks the
// delivery, in one transaction (its consumer acks in transaction mode,
// ackInTx): the broker applies both or neither. hook, when not nil
// (tests), runs between the publishes and the commit. See acker.commit
// for the errors.
func (d *Delivery) ackWith(ctx context.Context, out []outbound, hook func()) error {
	if !d.acks.tx {
		return errNotInTx
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if !d.live() {
		return ErrStaleDelivery
	}
	if !d.settled.CompareAndSwap(false, true) {
		return ErrSettled
	}
	return d.acks.commit(d.tag, out, hook)
}

// errNotInTx is returned by ackWith for a delivery whose consumer does not
// ack in transactions.
var errNotInTx = errors.New("amqp: the delivery's channel is not in transaction mode")

// Task decodes the delivery as a task message.
func (d *Delivery) Task() (TaskMessage, error) {
	m, err := DecodeTask(d.Body, d.Headers)
	m.ReplyTo = d.ReplyTo
	return m, err
}
