package amqp

import (
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
type acker struct {
	ch    *amqp091.Channel
	delay time.Duration // lets acks gather before a flush
	wake  chan struct{}
	done  chan struct{}

	qmu    sync.Mutex // guards the queue; never held while sending
	ready  []uint64   // settled here, not yet sent
	closed bool

	smu  sync.Mutex      // guards the broker's side; held while sending
	base uint64          // every tag up to base is settled at the broker
	sent map[uint64]bool // above base, settled at the broker on their own
	err  error           // the channel failed; the broker redelivers
}

func newAcker(ch *amqp091.Channel, delay time.Duration) *acker {
	a := &acker{ch: ch, delay: delay, wake: make(chan struct{}, 1), done: make(chan struct{}), sent: map[uint64]bool{}}
	go a.run()
	return a
}

// ack queues tag for acking; false once the acker has closed (the channel
// is gone and the broker will deliver the message again).
func (a *acker) ack(tag uint64) bool {
	a.qmu.Lock()
	defer a.qmu.Unlock()
	if a.closed {
		return false
	}
	a.ready = append(a.ready, tag)
	select {
	case a.wake <- struct{}{}:
	default:
	}
	return true
}

// nack sends a nack for tag now, after the acks queued before it.
func (a *acker) nack(tag uint64, requeue bool) error {
	a.smu.Lock()
	defer a.smu.Unlock()
	a.qmu.Lock()
	closed := a.closed
	a.qmu.Unlock()
	if closed {
		return ErrStaleDelivery
	}
	a.flushLocked(false)
	if err := a.ch.Nack(tag, false, requeue); err != nil {
		return err
	}
	a.settledLocked(tag)
	return nil
}

func (a *acker) run() {
	defer close(a.done)
	for range a.wake {
		if a.delay > 0 {
			time.Sleep(a.delay)
		}
		a.smu.Lock()
		a.flushLocked(false)
		a.smu.Unlock()
	}
}

// close sends what is queued and stops; later acks are refused.
func (a *acker) close() {
	a.smu.Lock()
	a.flushLocked(true)
	a.smu.Unlock()
	<-a.done
}

// flushLocked sends the queued acks: one multiple ack for the longest run
// of settled tags above base, single acks for the rest. With last it also
// closes the queue. Callers hold a.smu.
func (a *acker) flushLocked(last bool) {
	a.qmu.Lock()
	ready := a.ready
	a.ready = nil
	if last && !a.closed {
		a.closed = true
		close(a.wake)
	}
	a.qmu.Unlock()
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
