package amqp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/captchaq/captchaq"
)

// ErrUnroutable is returned when the broker returned a mandatory message
// because no queue was bound to take it: the topology is missing a queue.
var ErrUnroutable = errors.New("amqp: message unroutable")

// ErrNacked is returned when the broker refused a message (nack) several
// times on a healthy channel.
var ErrNacked = errors.New("amqp: broker refused the message")

// maxOutstanding bounds concurrent publishes per Publisher, and so the
// returns that can wait to be read.
const maxOutstanding = 512

// Publisher publishes persistent, mandatory messages and waits for the
// broker's confirm. A publish whose channel dies before its confirm is
// published again on the next channel, so a message may arrive twice but is
// never lost: every message id is the task id, and readers dedupe. Safe for
// concurrent use.
type Publisher struct {
	c   *Conn
	sem chan struct{}

	mu       sync.Mutex
	ch       *amqp091.Channel
	gen      uint64
	epoch    uint64 // of ch's connection
	returns  chan amqp091.Return
	returned map[string]amqp091.Return
	// bound are the reply queues bindReply bound (or found gone); a
	// result for one waits for its bind.
	bindMu sync.Mutex
	bound  map[string]bool
}

// NewPublisher returns a Publisher on c. Its channel opens on first use.
func (c *Conn) NewPublisher() *Publisher {
	return &Publisher{c: c, sem: make(chan struct{}, maxOutstanding), returned: map[string]amqp091.Return{}, bound: map[string]bool{}}
}

// Close closes the publisher's channel.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ch != nil {
		_ = p.ch.Close()
		p.ch = nil
	}
	return nil
}

func (p *Publisher) channel(ctx context.Context) (*amqp091.Channel, uint64, error) {
	ch, gen, _, err := p.channelEpoch(ctx)
	return ch, gen, err
}

// channelEpoch is channel with the epoch of its connection.
func (p *Publisher) channelEpoch(ctx context.Context) (*amqp091.Channel, uint64, uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ch != nil && !p.ch.IsClosed() {
		return p.ch, p.gen, p.epoch, nil
	}
	var (
		ch         *amqp091.Channel
		gen, epoch uint64
	)
	for {
		var err error
		ch, gen, epoch, err = p.c.channelEpoch(ctx)
		if err != nil {
			return nil, 0, 0, err
		}
		err = ch.Confirm(false)
		if err == nil {
			break
		}
		_ = ch.Close()
		// A connection that drops between the channel's open and its
		// confirm mode fails the latter (EOF): the next connection
		// serves, as for a publish the drop broke.
		if ctx.Err() != nil || !p.c.dropped(ctx, epoch) {
			return nil, 0, 0, fmt.Errorf("amqp: confirm mode: %w", err)
		}
	}
	p.returns = ch.NotifyReturn(make(chan amqp091.Return, maxOutstanding))
	p.ch, p.gen, p.epoch = ch, gen, epoch
	return ch, gen, epoch, nil
}

// takeReturn reports whether the message with token came back. The broker
// sends a return before the confirm of the same message, and the client
// hands it to our buffered channel before it reads the confirm, so once a
// confirm is seen its return, if any, is already buffered.
func (p *Publisher) takeReturn(token string) (amqp091.Return, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for drained := false; !drained; {
		select {
		case r, ok := <-p.returns:
			if !ok {
				drained = true
				break
			}
			if t, _ := r.Headers[HeaderPublish].(string); t != "" {
				p.returned[t] = r
			}
		default:
			drained = true
		}
	}
	r, ok := p.returned[token]
	delete(p.returned, token)
	return r, ok
}

// Publish publishes msg to exchange with key and returns once the broker
// has confirmed it. msg is sent persistent and mandatory.
func (p *Publisher) Publish(ctx context.Context, exchange, key string, msg amqp091.Publishing) error {
	confirm, err := p.Send(ctx, exchange, key, msg)
	if err != nil {
		return err
	}
	return confirm(ctx)
}

// Confirm waits for the broker's confirm of a message sent with Send.
type Confirm func(ctx context.Context) error

// Send publishes msg as Publish does but returns once it is sent; the
// Confirm it returns waits for the broker's confirm, and publishes msg
// again if its channel died first. Messages sent one after another reach
// the broker in that order (one sent again comes after the others), so a
// producer can keep many unconfirmed without reordering them, where
// Publish waits a round trip for each. The Confirm of every message sent
// must be called: until then the message holds one of the Publisher's
// maxOutstanding places.
func (p *Publisher) Send(ctx context.Context, exchange, key string, msg amqp091.Publishing) (Confirm, error) {
	return p.send(ctx, 0, exchange, key, msg)
}

// errLetGo is returned by publishIn when the connection it was bound to
// closed: what it held there is the fleet's now (see "Recovery" in the
// package doc).
var errLetGo = errors.New("amqp: the connection that held the task closed; the fleet has it now")

// publishIn publishes msg as Publish does, but only on a channel of the
// connection of epoch (Conn.connectionEpoch), and never again on another:
// a message confirmed on it reached the broker while that connection's
// deliveries were still held. It returns errLetGo when that connection
// closed before the confirm.
func (p *Publisher) publishIn(ctx context.Context, epoch uint64, exchange, key string, msg amqp091.Publishing) error {
	confirm, err := p.send(ctx, epoch, exchange, key, msg)
	if err != nil {
		return err
	}
	return confirm(ctx)
}

// send is Send bound to a connection epoch when it is not 0 (publishIn).
func (p *Publisher) send(ctx context.Context, epoch uint64, exchange, key string, msg amqp091.Publishing) (Confirm, error) {
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	out, err := outbound{exchange: exchange, key: key, msg: msg}.stamped()
	if err != nil {
		// Refused before anything is sent: no channel would take it.
		<-p.sem
		return nil, err
	}
	o := &outgoing{p: p, exchange: exchange, key: key, token: out.token, msg: out.msg, epoch: epoch}
	if err := o.send(ctx); err != nil {
		<-p.sem
		return nil, err
	}
	return func(ctx context.Context) error {
		defer func() { <-p.sem }()
		return o.confirm(ctx)
	}, nil
}

// stamped is o ready to publish: persistent, and marked with a fresh
// publish token (HeaderPublish) that tells its return, and a delivery of
// it again, from any other message.
func (o outbound) stamped() (outbound, error) {
	var tok [8]byte
	_, _ = rand.Read(tok[:])
	h := make(amqp091.Table, len(o.msg.Headers)+1)
	for k, v := range o.msg.Headers {
		h[k] = v
	}
	o.token = hex.EncodeToString(tok[:])
	h[HeaderPublish] = o.token
	o.msg.Headers = h
	o.msg.DeliveryMode = amqp091.Persistent
	if err := h.Validate(); err != nil {
		return outbound{}, fmt.Errorf("amqp: publish to %q/%q: headers: %w", o.exchange, o.key, err)
	}
	return o, nil
}

// outgoing is a message on its way: sent on ch, its confirm dc pending.
type outgoing struct {
	p             *Publisher
	exchange, key string
	token         string
	msg           amqp091.Publishing
	ch            *amqp091.Channel
	dc            *amqp091.DeferredConfirmation
	epoch         uint64 // not 0: only on a channel of this connection, once
}

// send publishes o on the publisher's channel, on the next one if that
// one dies meanwhile.
func (o *outgoing) send(ctx context.Context) error {
	for {
		if err := o.p.c.blocked.wait(ctx); err != nil {
			return err
		}
		ch, _, epoch, err := o.p.channelEpoch(ctx)
		if err != nil {
			return err
		}
		if o.epoch != 0 && epoch != o.epoch {
			return errLetGo
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, o.exchange, o.key, true, false, o.msg)
		if err == nil {
			o.ch, o.dc = ch, dc
			return nil
		}
		if o.epoch != 0 {
			return errLetGo
		}
		if ctx.Err() != nil {
			return fmt.Errorf("amqp: publish to %q/%q: %w", o.exchange, o.key, err)
		}
		// Headers are valid (see Send), so the channel or its connection
		// failed.
		if !ch.IsClosed() {
			// The write failed under a connection the broker dropped;
			// the client marks it closed a moment later.
			select {
			case <-time.After(jitter(o.p.c.cfg.ReconnectMin)):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		// Publish again on the next channel.
	}
}

// confirm waits for o's confirm, sending it again while its channel dies
// before the confirm or the broker refuses it (at most 3 times).
func (o *outgoing) confirm(ctx context.Context) error {
	nacks := 0
	for {
		ack, err := o.dc.WaitContext(ctx)
		if err != nil {
			return fmt.Errorf("amqp: waiting for the confirm of %q: %w", o.msg.MessageId, err)
		}
		if r, ok := o.p.takeReturn(o.token); ok {
			return fmt.Errorf("%w: exchange %q, routing key %q: %s (%d); declare the topology (or check --prefix)",
				ErrUnroutable, r.Exchange, r.RoutingKey, r.ReplyText, r.ReplyCode)
		}
		if ack {
			return nil
		}
		if o.epoch != 0 && o.ch.IsClosed() {
			return errLetGo
		}
		if !o.ch.IsClosed() {
			// Refused on a healthy channel.
			nacks++
			if nacks >= 3 {
				return fmt.Errorf("%w: %q (nacked %d times)", ErrNacked, o.msg.MessageId, nacks)
			}
			select {
			case <-time.After(time.Duration(nacks) * 100 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if err := o.send(ctx); err != nil {
			return err
		}
	}
}

// PublishTask publishes a task to the task exchange under its kind.
func (p *Publisher) PublishTask(ctx context.Context, m TaskMessage) error {
	confirm, err := p.SendTask(ctx, m)
	if err != nil {
		return err
	}
	return confirm(ctx)
}

// SendTask is PublishTask with Send: it returns once the task is sent.
func (p *Publisher) SendTask(ctx context.Context, m TaskMessage) (Confirm, error) {
	if m.Accepted.IsZero() {
		m.Accepted = time.Now()
	}
	msg, err := m.publishing(p.c.cfg.MaxPriority)
	if err != nil {
		return nil, err
	}
	return p.Send(ctx, p.c.Names().Types, KindOf(m.Task), msg)
}

// PublishResult publishes a result to the results queue.
func (p *Publisher) PublishResult(ctx context.Context, r captchaq.Result) error {
	msg, err := resultPublishing(r)
	if err != nil {
		return err
	}
	return p.Publish(ctx, "", p.c.Names().Results, msg)
}

// Reply publishes a task's result to replyTo when it names a gateway's
// reply queue under this prefix (Names.ReplyQueue), and otherwise to the
// results queue, as PublishResult does. A reply queue that is gone (its
// gateway retired and the queue deleted) has the broker route the result
// to the results queue (Names.RepliesUnrouted), so it is not lost.
func (p *Publisher) Reply(ctx context.Context, replyTo string, r captchaq.Result) error {
	out, err := p.reply(ctx, replyTo, r)
	if err != nil {
		return err
	}
	return p.Publish(ctx, out.exchange, out.key, out.msg)
}

// reply is the message of Reply.
func (p *Publisher) reply(ctx context.Context, replyTo string, r captchaq.Result) (outbound, error) {
	msg, err := resultPublishing(r)
	if err != nil {
		return outbound{}, err
	}
	n := p.c.Names()
	if n.isReplyQueue(replyTo) {
		p.bindReply(ctx, replyTo)
		return outbound{exchange: n.ReplyExchange, key: replyTo, msg: msg}, nil
	}
	return outbound{key: n.Results, msg: msg}, nil
}

// bindReply binds reply queue q to Names.ReplyExchange under its name,
// once for each queue: a gateway of a version before that exchange
// declared its queue without the binding, and its results would
// otherwise all go to the results queue. A queue that is gone fails the
// bind (its results go to the results queue, as the exchange's alternate
// routes them); any other failure is tried again at the next result.
func (p *Publisher) bindReply(ctx context.Context, q string) {
	p.bindMu.Lock()
	defer p.bindMu.Unlock()
	if p.bound[q] {
		return
	}
	ch, _, err := p.c.channel(ctx)
	if err != nil {
		return
	}
	defer ch.Close()
	err = ch.QueueBind(q, q, p.c.Names().ReplyExchange, false, nil)
	if err == nil || isCode(err, amqp091.NotFound) {
		p.bound[q] = true
	}
}

// Checkpoint publishes a task that the provider has accepted, with its
// captcha id, to owner's checkpoint queue (see Conn.DeclareInflight). Once
// it is confirmed the original task delivery may be acked: if owner dies,
// the broker dead-letters the checkpoint to Names.Adopt, still carrying
// the captcha id, so whoever takes it polls instead of paying for a
// second solve.
func (p *Publisher) Checkpoint(ctx context.Context, owner string, m TaskMessage) error {
	if m.CaptchaID == "" {
		return fmt.Errorf("amqp: checkpoint of %q without a captcha id", m.Task.ID)
	}
	return p.park(ctx, 0, owner, "", m, 0)
}

// park publishes m to owner's checkpoint queue with sequence number seq
// (HeaderSeq), so the holder can tell a newer copy from an older one, and
// run (HeaderRun), so it can tell its own copies from those of an earlier
// run under the same owner name. m may carry no captcha id: a task that
// waits to be retried is parked too. With epoch not 0 it is published
// only on that connection (publishIn).
func (p *Publisher) park(ctx context.Context, epoch uint64, owner, run string, m TaskMessage, seq int) error {
	o, err := p.parked(owner, run, m, seq)
	if err != nil {
		return err
	}
	return p.publishIn(ctx, epoch, o.exchange, o.key, o.msg)
}

// parked is the message of park.
func (p *Publisher) parked(owner, run string, m TaskMessage, seq int) (outbound, error) {
	msg, err := m.publishing(p.c.cfg.MaxPriority)
	if err != nil {
		return outbound{}, err
	}
	msg.Headers[HeaderOwner] = owner
	if run != "" {
		msg.Headers[HeaderRun] = run
	}
	if seq > 0 {
		msg.Headers[HeaderSeq] = int32(seq)
	}
	msg.Expiration = strconv.FormatInt(p.c.cfg.InflightLease.Milliseconds(), 10)
	return outbound{key: p.c.Names().InflightQueue(owner), msg: msg}, nil
}

// Claim tells every worker that this one holds a confirmed checkpoint of
// task id, though the task's delivery went back to the fleet (see
// redeliveredWait).
func (p *Publisher) Claim(ctx context.Context, id string) error {
	return p.Publish(ctx, p.c.Names().Claims, "", amqp091.Publishing{MessageId: id, Type: "claim", Timestamp: time.Now()})
}

// Retry publishes a task that failed transiently to the delay tier of its
// attempt count; after the tier's delay it goes back to the task exchange.
// It returns the delay. Transient failures never reach the dead letters.
func (p *Publisher) Retry(ctx context.Context, m TaskMessage) (time.Duration, error) {
	tiers := p.c.cfg.RetryDelays
	d := tiers[min(max(m.Attempts-1, 0), len(tiers)-1)]
	m.CaptchaID = ""
	msg, err := m.publishing(p.c.cfg.MaxPriority)
	if err != nil {
		return 0, err
	}
	msg.Headers[HeaderDelay] = strconv.FormatInt(d.Milliseconds(), 10)
	return d, p.Publish(ctx, p.c.Names().Delay, KindOf(m.Task), msg)
}

// DeadLetter publishes a task that failed for good to the dead letters with
// reason (ReasonPermanent, ReasonExhausted) and its last error in headers.
func (p *Publisher) DeadLetter(ctx context.Context, m TaskMessage, reason string) error {
	out, err := p.deadLetter(m, reason)
	if err != nil {
		return err
	}
	return p.Publish(ctx, out.exchange, out.key, out.msg)
}

// deadLetter is the message of DeadLetter.
func (p *Publisher) deadLetter(m TaskMessage, reason string) (outbound, error) {
	msg, err := m.publishing(p.c.cfg.MaxPriority)
	if err != nil {
		return outbound{}, err
	}
	msg.Headers[HeaderReason] = reason
	return outbound{exchange: p.c.Names().DLX, key: FailedRoutingKey, msg: msg}, nil
}
