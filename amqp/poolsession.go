package amqp

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// poolSession is one channel's worth of held tokens.
type poolSession struct {
	p          *threadPool
	ch         *amqp091.Channel
	tag        string
	deliveries <-chan amqp091.Delivery // nil while not consuming
	consuming  bool
	qos        int
	tokens     []uint64 // delivery tags of the held tokens
	// parkedUntil holds, for a token taken over from ThreadsReturning,
	// when its window there ends. Until then the token is the adopted
	// task's, or the thread a task of the dead holder that nobody adopted
	// (submitted, not yet checkpointed) still runs on: the queue may not
	// submit on it (Held leaves it out), and given back it goes back to
	// ThreadsReturning for the rest of the window (giveBack).
	parkedUntil map[uint64]time.Time
	limit       int // the target: tokens the queue may use

	refreshed    time.Time
	refreshEvery time.Duration // the wait before the next refresh
	ready        int           // of the token queue at the last refresh
	others       int           // its consumers other than this worker, then
	takenSince   int           // tokens delivered since the last refresh
	surplusSince time.Time     // tokens over target since (zero: none)
	idleSince    time.Time     // target 0 since (zero: not idle)
}

func (p *threadPool) session(ctx context.Context) error {
	ch, gen, err := p.c.channel(ctx)
	if err != nil {
		return err
	}
	s := &poolSession{p: p, ch: ch, tag: fmt.Sprintf("captchaq-threads-%d", gen), limit: p.n, refreshEvery: threadsRefresh,
		parkedUntil: map[uint64]time.Time{}}
	defer func() {
		p.setLive(0)
		p.setHeld(0, p.n)
		_ = ch.Close() // the broker requeues every token, as redelivered
	}()
	closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	// Acks and publishes take effect together at each commit, so a token
	// moved from one queue to another is never lost or doubled.
	if err := ch.Tx(); err != nil {
		return fmt.Errorf("amqp: thread pool transactions: %w", err)
	}
	tick := time.NewTicker(threadsTick)
	defer tick.Stop()
	for {
		if err := s.adjust(time.Now()); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			// A clean stop: tokens of no task at the provider go back
			// at once; those of tasks left to their checkpoints come
			// back redelivered when the channel closes, and wait.
			_, floor := p.demand(len(s.tokens))
			if err := s.giveBack(floor); err != nil {
				p.log.Warn("giving threads back at stop", "err", err)
			}
			return ctx.Err()
		case e := <-closed:
			return closedErr(e)
		case <-p.wake:
		case <-tick.C:
		case d, ok := <-s.deliveries:
			if !ok {
				s.deliveries, s.consuming = nil, false
				continue
			}
			if err := s.receive(d); err != nil {
				return err
			}
			p.setHeld(len(s.tokens), s.limit)
		}
	}
}

// receive holds a delivered token, or parks it if the broker requeued it
// from a holder whose channel died.
func (s *poolSession) receive(d amqp091.Delivery) error {
	s.p.taken.Add(1)
	s.takenSince++
	if !d.Redelivered {
		s.tokens = append(s.tokens, d.DeliveryTag)
		return nil
	}
	return s.park(d.DeliveryTag)
}

// park moves a dead holder's token to ThreadsReturning, from which it
// expires back into the token queue after the window (threadsAdoptWindow), unless the
// worker that adopts one of the holder's tasks at the provider takes it
// over first (takeOver): the task still runs there, on that thread. Only
// a holder's death requeues a token (one given back is acked and
// published again), so a redelivered token is always such a token.
func (s *poolSession) park(tag uint64) error {
	if err := s.ch.Ack(tag, false); err != nil {
		return fmt.Errorf("amqp: park a thread: %w", err)
	}
	if err := s.publishParked(time.Now().Add(s.p.window)); err != nil {
		return fmt.Errorf("amqp: park a thread: %w", err)
	}
	if err := s.ch.TxCommit(); err != nil {
		return fmt.Errorf("amqp: park a thread: %w", err)
	}
	s.p.parked.Add(1)
	return nil
}

// refreshDue says whether to read the token queue now: refreshEvery
// after the last reading, or at once when this worker has taken the
// tokens that reading found ready, since another worker may then be
// hungry with none to take.
func (s *poolSession) refreshDue(now time.Time) bool {
	return now.Sub(s.refreshed) >= s.refreshEvery || (s.ready > 0 && s.takenSince >= s.ready)
}

// record keeps a reading of the token queue (ready tokens, consumers) and
// sets the wait before the next: threadsRefreshSoon if the other hungry
// workers changed or the ready tokens ran out or came back, else twice
// the last wait, up to threadsRefresh.
func (s *poolSession) record(ready, consumers int, now time.Time) {
	others := consumers
	if s.consuming {
		others--
	}
	if others != s.others || (ready == 0) != (s.ready == 0) {
		s.refreshEvery = threadsRefreshSoon
	} else {
		s.refreshEvery = min(2*s.refreshEvery, threadsRefresh)
	}
	s.ready, s.others, s.takenSince, s.refreshed = ready, others, 0, now
}

// adjust brings the held tokens toward the target: the demand, at most
// the plan, and at most a fair share (the plan over the workers that
// consume tokens) while no token is ready and others hold some.
func (s *poolSession) adjust(now time.Time) error {
	p := s.p
	s.expireParked(now)
	if s.refreshDue(now) {
		q, err := s.ch.QueueDeclarePassive(p.names.Tokens, true, false, false, false, nil)
		if err != nil {
			return fmt.Errorf("amqp: inspect queue %s: %w", p.names.Tokens, err)
		}
		s.record(q.Messages, q.Consumers, now)
		p.mu.Lock()
		p.fleetInUse = max(p.n-q.Messages, 0)
		p.mu.Unlock()
	}
	want, floor := p.demand(len(s.tokens))
	want = min(want, p.n)
	// Other workers that want more tokens, as the last reading counted
	// them (whether this worker consumed then, not now).
	hungry := s.others
	target := want
	if s.ready == 0 && hungry > 0 {
		target = min(want, (p.n+hungry)/(hungry+1)) // ceil(n / (hungry+1))
	}
	if target != s.limit {
		s.limit = target
		p.setHeld(len(s.tokens), target)
	}
	keep := max(target, floor)
	if len(s.tokens) > keep {
		if s.surplusSince.IsZero() {
			s.surplusSince = now
		}
		// Over a fair share, at once: another worker waits for it. Over
		// the demand, after the linger.
		if want > keep || now.Sub(s.surplusSince) >= threadsLinger {
			if err := s.giveBack(keep); err != nil {
				return err
			}
		}
	} else {
		s.surplusSince = time.Time{}
	}
	if n := p.pendingTakeovers(); n > 0 {
		if err := s.takeOver(n); err != nil {
			return err
		}
	}
	switch {
	case want > len(s.tokens):
		// Hungry: consume, so the others see it, and take tokens up to
		// the target and one more: a token nobody else takes at once
		// goes to a hungry worker instead of waiting for a refresh.
		if err := s.setQos(min(want, target+1)); err != nil {
			return err
		}
		if !s.consuming {
			ds, err := s.ch.Consume(p.names.Tokens, s.tag, false, false, false, false, nil)
			if err != nil {
				return fmt.Errorf("amqp: consume %s: %w", p.names.Tokens, err)
			}
			s.deliveries, s.consuming = ds, true
		}
	case s.consuming:
		// Satisfied: only hungry workers consume, so the consumer count
		// says who needs tokens given back, and a worker with no work
		// holds none.
		return s.cancel()
	}
	return nil
}

// expireParked forgets the parked windows that ended by now: those
// tokens are the queue's to use from now on.
func (s *poolSession) expireParked(now time.Time) {
	n := len(s.parkedUntil)
	for tag, until := range s.parkedUntil {
		if !until.After(now) {
			delete(s.parkedUntil, tag)
		}
	}
	if len(s.parkedUntil) != n {
		s.p.setLive(len(s.parkedUntil))
	}
}

// takeOver takes up to n of a dead holder's tokens from ThreadsReturning
// for the tasks at the provider this worker adopted from it; a token not
// there (already back in the token queue, or the holder had none) is
// taken from the token queue as usual.
func (s *poolSession) takeOver(n int) error {
	for range n {
		d, ok, err := s.ch.Get(s.p.names.Returning, false)
		if err != nil {
			return fmt.Errorf("amqp: take over a thread: %w", err)
		}
		if !ok {
			return nil
		}
		s.tokens = append(s.tokens, d.DeliveryTag)
		if ms, ok := d.Headers[parkedUntilHeader].(int64); ok {
			s.parkedUntil[d.DeliveryTag] = time.UnixMilli(ms)
			s.p.setLive(len(s.parkedUntil))
		}
		s.p.tookOver.Add(1)
	}
	s.p.setHeld(len(s.tokens), s.limit)
	return nil
}

// cancel stops consuming tokens. Tokens the broker sent before it
// confirmed the cancel are held, like the others.
func (s *poolSession) cancel() error {
	if !s.consuming {
		return nil
	}
	if err := s.ch.Cancel(s.tag, false); err != nil {
		return fmt.Errorf("amqp: cancel %s: %w", s.tag, err)
	}
	// The client buffers what came before the cancel-ok, then closes.
	for d := range s.deliveries {
		if err := s.receive(d); err != nil {
			return err
		}
	}
	s.p.setHeld(len(s.tokens), s.limit)
	s.deliveries, s.consuming = nil, false
	return nil
}

// publish sends a token to the token queue, within the channel's
// transaction.
func (s *poolSession) publish() error {
	return s.ch.PublishWithContext(context.Background(), "", s.p.names.Tokens, false, false, amqp091.Publishing{
		DeliveryMode: amqp091.Persistent, Type: "thread",
	})
}

// parkedUntilHeader carries, on a parked token, when its window in
// ThreadsReturning ends.
const parkedUntilHeader = "x-captchaq-parked-until"

// publishParked sends a token to ThreadsReturning, to expire back into the
// token queue at until, within the channel's transaction.
func (s *poolSession) publishParked(until time.Time) error {
	ms := max(time.Until(until).Milliseconds(), 1)
	return s.ch.PublishWithContext(context.Background(), "", s.p.names.Returning, false, false, amqp091.Publishing{
		DeliveryMode: amqp091.Persistent, Type: "thread", Expiration: strconv.FormatInt(ms, 10),
		Headers: amqp091.Table{parkedUntilHeader: until.UnixMilli()},
	})
}

// setQos sets the channel's prefetch: tokens beyond it are not delivered.
func (s *poolSession) setQos(n int) error {
	n = max(n, 1)
	if n == s.qos {
		return nil
	}
	if err := s.ch.Qos(n, 0, true); err != nil {
		return fmt.Errorf("amqp: qos: %w", err)
	}
	s.qos = n
	return nil
}

// giveBack returns the tokens beyond keep to the token queue, after
// lowering the prefetch so the broker does not hand them straight back.
// Each is acked and published again, not requeued: the broker marks a
// requeued token redelivered, which would park it (see park).
func (s *poolSession) giveBack(keep int) error {
	if keep == 0 {
		// No prefetch of 0 exists: stop consuming instead.
		if err := s.cancel(); err != nil {
			return err
		}
	} else if err := s.setQos(keep); err != nil {
		return err
	}
	// The demand keep came from may be older than a Held since: the
	// queue may have started submits on tokens read as held then.
	if keep = s.p.release(keep, len(s.tokens)); len(s.tokens) <= keep {
		return nil
	}
	// Tokens taken over and still in their window go first (to
	// ThreadsReturning, for the rest of it): the tokens kept are the
	// ones the queue may use.
	s.expireParked(time.Now())
	slices.SortStableFunc(s.tokens, func(a, b uint64) int {
		_, la := s.parkedUntil[a]
		_, lb := s.parkedUntil[b]
		switch {
		case la && !lb:
			return 1
		case lb && !la:
			return -1
		}
		return 0
	})
	for _, tag := range s.tokens[keep:] {
		if err := s.ch.Ack(tag, false); err != nil {
			return fmt.Errorf("amqp: give back a thread: %w", err)
		}
		publish := s.publish
		if until, ok := s.parkedUntil[tag]; ok {
			delete(s.parkedUntil, tag)
			publish = func() error { return s.publishParked(until) }
		}
		if err := publish(); err != nil {
			return fmt.Errorf("amqp: give back a thread: %w", err)
		}
	}
	if err := s.ch.TxCommit(); err != nil {
		return fmt.Errorf("amqp: give back threads: %w", err)
	}
	s.p.setLive(len(s.parkedUntil))
	s.p.returned.Add(int64(len(s.tokens) - keep))
	s.tokens = s.tokens[:keep]
	s.p.setHeld(keep, s.limit)
	s.surplusSince = time.Time{}
	return nil
}
