package amqp

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// acker sends the acks of one channel with as few frames as it can. A
// channel numbers its deliveries 1, 2, 3, ... with no gap, so once every
// tag up to n is settled here, one basic.ack(n, multiple) covers them all.
// A tag settled out of order is acked on its own, so a delivery held for a
// long time (a checkpoint while its task is polled) never holds back the
// acks of the others. An ack only ever goes out on the channel its
// delivery came from, and only after its holder settled it. Acks are not
// held back on purpose: an ack lost to a broker failure brings the task
// back to the fleet, so the loop sends at once, and acks gather only while
// it is busy sending the previous ones, unless the consumer's messages
// cost nothing when redelivered (see gatherAcks).
//
// On a channel in transaction mode (tx: the deliveries that hold a
// worker's tasks, see ackInTx) every send of acks is committed, and
// commit adds a task's answer to the next one: its messages and the ack
// of the delivery that holds it, applied by the broker together or not
// at all. Answers gather while a commit is on its way, as acks do, so
// a busy channel commits many answers at once (a group commit).
type acker struct {
	ch      *amqp091.Channel
	delay   time.Duration // lets acks gather before a flush
	tx      bool
	returns chan amqp091.Return // tx: the mandatory messages the broker returned
	wake    chan struct{}
	done    chan struct{}

	qmu     sync.Mutex // guards the queue; never held while sending
	ready   []uint64   // settled here, not yet sent
	answers []*answer  // tx: waiting for the next commit
	closed  bool

	smu  sync.Mutex      // guards the broker's side; held while sending
	base uint64          // every tag up to base is settled at the broker
	sent map[uint64]bool // above base, settled at the broker on their own
	err  error           // the channel failed; the broker redelivers
}

// answer is one task's answer on its way in a transaction: its
// messages, the tag of the delivery that holds the task, and where the
// outcome goes.
type answer struct {
	out  []outbound
	tag  uint64
	hook func() // tests: runs once the messages are sent, before the commit
	done chan error
}

// outbound is a message to publish inside a transaction (see commit).
type outbound struct {
	exchange, key string
	token         string // its HeaderPublish
	msg           amqp091.Publishing
}

// newAcker starts the acker of ch. With tx it puts ch in transaction
// mode first.
func newAcker(ch *amqp091.Channel, delay time.Duration, tx bool) (*acker, error) {
	a := &acker{ch: ch, delay: delay, tx: tx, wake: make(chan struct{}, 1), done: make(chan struct{}), sent: map[uint64]bool{}}
	if tx {
		if err := ch.Tx(); err != nil {
			return nil, fmt.Errorf("amqp: transaction mode: %w", err)
		}
		a.returns = ch.NotifyReturn(make(chan amqp091.Return, maxReturns))
	}
	go a.run()
	return a, nil
}

// maxReturns bounds the returns that can wait to be read: a channel's
// unacked deliveries are bounded by its prefetch (a worker's threads or
// Prefetch), and each answer is two messages at most; a return beyond
// this would hold up the client's reader, so the buffer is generous.
const maxReturns = 1024

// errUncommitted is returned by commit when the channel failed before the
// broker answered the commit: it applied the transaction's publishes and
// acks, none, or (a broker stopped in the middle of it) some. Either way
// the task is answered: by this worker's result, or by whoever adopts the
// checkpoint the broker takes back, with the same answer when both did
// (see "Windows that stay" in the package doc).
var errUncommitted = errors.New("amqp: the channel closed before the broker answered the commit")

// ack queues tag for acking; false once the acker has closed (the channel
// is gone and the broker will deliver the message again).
func (a *acker) ack(tag uint64) bool {
	a.qmu.Lock()
	defer a.qmu.Unlock()
	if a.closed {
		return false
	}
	a.ready = append(a.ready, tag)
	a.wakeLocked()
	return true
}

// wakeLocked asks the loop for a flush. Callers hold a.qmu.
func (a *acker) wakeLocked() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// nack sends a nack for tag now, after the acks and answers queued before
// it.
func (a *acker) nack(tag uint64, requeue bool) error {
	a.smu.Lock()
	defer a.smu.Unlock()
	a.qmu.Lock()
	closed := a.closed
	a.qmu.Unlock()
	if closed {
		return ErrStaleDelivery
	}
	if err := a.flushLocked(false); err != nil {
		return err
	}
	if err := a.ch.Nack(tag, false, requeue); err != nil {
		a.err = err
		return err
	}
	a.settledLocked(tag)
	if a.tx {
		if err := a.ch.TxCommit(); err != nil {
			a.err = err
			return err
		}
	}
	return nil
}

// commit publishes out (persistent, mandatory) and acks tag in one
// transaction, the next one the loop commits, and returns its outcome:
// nil once committed; ErrStaleDelivery when the channel had failed
// before the commit was sent (nothing applied); errUncommitted when it
// failed after (all or nothing applied); ErrUnroutable when the broker
// returned one of out (the rest, the ack included, applied). hook, when
// not nil (tests), runs once the messages are sent, before the commit.
// The channel is in transaction mode (Delivery.ackWith checks).
func (a *acker) commit(tag uint64, out []outbound, hook func()) error {
	x := &answer{out: out, tag: tag, hook: hook, done: make(chan error, 1)}
	a.qmu.Lock()
	if a.closed {
		a.qmu.Unlock()
		return ErrStaleDelivery
	}
	a.answers = append(a.answers, x)
	a.wakeLocked()
	a.qmu.Unlock()
	return <-x.done
}

func (a *acker) run() {
	defer close(a.done)
	for range a.wake {
		if a.delay > 0 {
			time.Sleep(a.delay)
		}
		a.smu.Lock()
		_ = a.flushLocked(false)
		a.smu.Unlock()
	}
}

// close sends what is queued and stops; later acks are refused.
func (a *acker) close() {
	a.smu.Lock()
	_ = a.flushLocked(true)
	a.smu.Unlock()
	<-a.done
}

// flushLocked sends what is queued: the answers' messages, then the acks
// (theirs too), then, on a channel in transaction mode, the commit, and
// tells each answer its outcome. With last it also closes the queue. The
// error is the channel's failure, if any. Callers hold a.smu.
func (a *acker) flushLocked(last bool) error {
	a.qmu.Lock()
	ready, batch := a.ready, a.answers
	a.ready, a.answers = nil, nil
	if last && !a.closed {
		a.closed = true
		close(a.wake)
	}
	a.qmu.Unlock()
	if a.err != nil {
		tell(batch, ErrStaleDelivery)
		return a.err
	}
	if len(ready) == 0 && len(batch) == 0 {
		return nil
	}
	// Nothing stops halfway from here but a broken channel: a message
	// left uncommitted on a live one would go out with the next acks.
	for _, x := range batch {
		for _, o := range x.out {
			if err := a.ch.Publish(o.exchange, o.key, true, false, o.msg); err != nil {
				// Headers were checked (outbound.stamped): the channel
				// is broken, and nothing is committed.
				a.err = err
				tell(batch, fmt.Errorf("%w: %v", ErrStaleDelivery, err))
				return err
			}
		}
		ready = append(ready, x.tag)
		if x.hook != nil {
			x.hook()
		}
	}
	if a.sendLocked(ready); a.err != nil {
		tell(batch, fmt.Errorf("%w: %v", ErrStaleDelivery, a.err))
		return a.err
	}
	if !a.tx {
		return nil
	}
	if err := a.ch.TxCommit(); err != nil {
		a.err = err
		tell(batch, fmt.Errorf("%w: %v", errUncommitted, err))
		return err
	}
	a.tellCommitted(batch)
	return nil
}

// tell gives every answer of batch err.
func tell(batch []*answer, err error) {
	for _, x := range batch {
		x.done <- err
	}
}

// tellCommitted gives every answer of a committed batch its outcome: nil,
// or ErrUnroutable for a message the broker returned. The broker sends a
// message's return before the commit's answer, and the client hands it
// to a.returns before it reads the answer, so every return is there.
// Callers hold a.smu.
func (a *acker) tellCommitted(batch []*answer) {
	returned := map[string]amqp091.Return{}
	for drained := false; !drained; {
		select {
		case r := <-a.returns:
			if t, _ := r.Headers[HeaderPublish].(string); t != "" {
				returned[t] = r
			}
		default:
			drained = true
		}
	}
	for _, x := range batch {
		var errs []error
		for _, o := range x.out {
			if r, ok := returned[o.token]; ok {
				errs = append(errs, fmt.Errorf("%w: exchange %q, routing key %q: %s (%d); declare the topology (or check --prefix)",
					ErrUnroutable, r.Exchange, r.RoutingKey, r.ReplyText, r.ReplyCode))
			}
		}
		x.done <- errors.Join(errs...)
	}
}

// sendLocked sends acks for the tags ready: one multiple ack for the
// longest run of settled tags above base, single acks for the rest. A
// failure is a.err. Callers hold a.smu.
func (a *acker) sendLocked(ready []uint64) {
	if len(ready) == 0 || a.err != nil {
		return
	}
	queued := make(map[uint64]bool, len(ready))
	for _, t := range ready {
		queued[t] = true
	}
	// The run: consecutive tags from base+1, each queued or already sent.
	// Its last queued tag is still outstanding at the broker, so acking it
	// with multiple is valid, and covers only tags settled here.
	var top uint64
	for t := a.base + 1; queued[t] || a.sent[t]; t++ {
		if queued[t] {
			top = t
		}
	}
	if top > 0 {
		if err := a.ch.Ack(top, true); err != nil {
			a.err = err
			return
		}
		for t := a.base + 1; t <= top; t++ {
			delete(queued, t)
			delete(a.sent, t)
		}
		a.base = top
	}
	rest := make([]uint64, 0, len(queued))
	for t := range queued {
		rest = append(rest, t)
	}
	slices.Sort(rest)
	for _, t := range rest {
		if err := a.ch.Ack(t, false); err != nil {
			a.err = err
			return
		}
		a.settledLocked(t)
	}
	a.settledLocked(a.base) // drops sent marks the base has reached
}

// settledLocked records a tag settled at the broker on its own. Callers
// hold a.smu.
func (a *acker) settledLocked(tag uint64) {
	if tag > a.base {
		a.sent[tag] = true
	}
	for a.sent[a.base+1] {
		a.base++
		delete(a.sent, a.base)
	}
}
