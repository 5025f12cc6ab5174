package amqp

import (
	"context"
	"errors"
	"time"

	"github.com/captchaq/captchaq"
)

// Retry implements captchaq.Journal. The queue keeps the task and retries it
// itself; the broker's copy is replaced only when it has become wrong (it
// names a captcha id that failed, or fewer attempts), so a crash neither
// polls a dead id nor forgets an attempt.
func (s *WorkerStore) Retry(ctx context.Context, id string, attempts int, notBefore time.Time, errText, errCode string) error {
	if err := s.mem.Retry(ctx, id, attempts, notBefore, errText, errCode); err != nil {
		return err
	}
	s.holdings.mu.Lock()
	e, ok := s.holdings.entries[id]
	stale := ok && (e.msg.CaptchaID != "" || e.msg.Attempts != attempts)
	s.holdings.mu.Unlock()
	if !stale {
		return nil
	}
	_, err := s.park(ctx, 0, id, func(m *TaskMessage) {
		m.CaptchaID, m.Submitted, m.Attempts = "", time.Time{}, attempts
		m.LastError, m.LastErrorCode = errText, errCode
	})
	return err
}

// Finish implements captchaq.Journal: the result (and for a failure the
// dead letter) is published on the channel of the delivery that holds the
// task, in one transaction with that delivery's ack (deliver), and only
// while that delivery is live: a task whose holder went back to the fleet
// is someone else's to answer, so its result is dropped, never delivered
// twice; one whose channel closes before the commit is answered by this
// worker or by the fleet, never by both.
func (s *WorkerStore) Finish(ctx context.Context, r captchaq.Result) error {
	s.holdings.mu.Lock()
	e, ok := s.holdings.entries[r.ID]
	claimed, handback := ok && e.claimed, ok && e.handback
	m := TaskMessage{Task: captchaq.Task{ID: r.ID, Method: r.Method}}
	if ok {
		e.finishing, m = true, e.msg
	}
	s.holdings.mu.Unlock()
	if claimed {
		s.release(r.ID) // another worker's checkpoint carries the task
		return nil
	}
	if handback {
		return s.handBack(ctx, r.ID)
	}
	replyTo, reply := "", r
	if ok {
		// A replay's result goes under the task's own id (Conn.Replay).
		replyTo, reply.ID = m.ReplyTo, m.ownID()
	}
	out, err := s.answer(ctx, replyTo, reply, m, r)
	if err != nil {
		return err
	}
	for tries := 0; ; tries++ {
		var holder *Delivery
		if ok {
			d, err := s.holderOf(ctx, r.ID)
			if err != nil {
				return err
			}
			if d == nil {
				s.letGoOf(r.ID)
				return nil
			}
			holder = d
		}
		err := s.deliver(ctx, holder, r.ID, out)
		switch {
		case errors.Is(err, ErrSettled) && tries < settledTries:
			// A newer copy took the task over (park acked this one):
			// the answer goes with that copy's ack.
			if err := sleepCtx(ctx, checkpointArrival); err != nil {
				return err
			}
			continue
		case errors.Is(err, ErrStaleDelivery), errors.Is(err, errUncommitted):
			s.log.Info("letting go of a task whose channel closed before its result was committed", "id", r.ID)
			s.release(r.ID)
			return nil
		case err != nil:
			if ok && errors.Is(err, ErrUnroutable) {
				s.release(r.ID) // its holder's ack was committed
			}
			return err
		}
		break
	}
	if ok {
		s.finished.add(m.Task, s.finishedSize)
	}
	if err := s.mem.Finish(ctx, r); err != nil && !errors.Is(err, captchaq.ErrNotFound) {
		s.log.Warn("local finish failed", "id", r.ID, "err", err)
	}
	s.release(r.ID)
	return nil
}

// letGoOf forgets task id, which the fleet holds now: its result is
// someone else's to deliver.
func (s *WorkerStore) letGoOf(id string) {
	s.log.Info("letting go of a task the fleet holds now; its result is someone else's to deliver", "id", id)
	if n := s.holdings.liveHeld(id); n > 0 {
		// No path should get here: the copy acked below is the
		// fleet's only one, and nobody answers the task.
		s.log.Warn("letting go of a task while holding a live copy of it; the copy is acked", "id", id, "live", n)
	}
	s.release(id)
	if s.hooks.afterLetGo != nil {
		s.hooks.afterLetGo(id)
	}
}

// sleepCtx waits for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// answer is what Finish publishes for r, task m's result under reply's id:
// the result, to replyTo's reply queue or the results queue, and for a
// failed task its dead letter.
func (s *WorkerStore) answer(ctx context.Context, replyTo string, reply captchaq.Result, m TaskMessage, r captchaq.Result) ([]outbound, error) {
	o, err := s.pub.reply(ctx, replyTo, reply)
	if err != nil {
		return nil, err
	}
	out := []outbound{o}
	if r.Status == captchaq.StatusFailed {
		m.CaptchaID, m.Attempts = "", r.Attempts
		m.LastError, m.LastErrorCode = r.Error, r.ErrorCode
		o, err := s.pub.deadLetter(m, deadReason(r))
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	for i := range out {
		if out[i], err = out[i].stamped(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// deliver publishes out, a task's answer: with the checkpoint (or
// adopted checkpoint) that holds the task, in one transaction with its
// ack (Delivery.ackWith), so the broker takes the answer only with the
// ack and a task is answered whenever the connection dies (once, but for
// the copies of "Windows that stay" in the package doc); with a
// task delivery (no captcha id yet), confirmed on its connection, before
// Finish acks it; with no holder (a task this worker does not hold),
// confirmed.
func (s *WorkerStore) deliver(ctx context.Context, holder *Delivery, id string, out []outbound) error {
	if holder == nil || !holder.acks.tx {
		// No holder: confirmed on any connection. A task delivery (a
		// task that failed before its first checkpoint): confirmed on
		// its connection, then acked by Finish (release).
		var epoch uint64
		if holder != nil {
			epoch = holder.epoch
		}
		for _, o := range out {
			if err := s.pub.publishIn(ctx, epoch, o.exchange, o.key, o.msg); err != nil {
				if errors.Is(err, errLetGo) {
					return ErrStaleDelivery
				}
				return err
			}
		}
		return nil
	}
	if err := s.pub.c.blocked.wait(ctx); err != nil {
		return err
	}
	var hook func()
	if s.hooks.beforeCommit != nil {
		hook = func() { s.hooks.beforeCommit(id) }
	}
	return holder.ackWith(ctx, out, hook)
}

// checkpointArrival is how often Finish looks again for a checkpoint
// delivery confirmed but not yet received.
const checkpointArrival = 10 * time.Millisecond

// holderOf returns the live delivery that holds task id for this worker,
// waiting for the newest checkpoint's delivery when it is confirmed but
// not yet received; nil when the task has gone back to the fleet (see
// entry.gone), which marks it lost.
func (s *WorkerStore) holderOf(ctx context.Context, id string) (*Delivery, error) {
	for {
		s.holdings.mu.Lock()
		e, ok := s.holdings.entries[id]
		if !ok {
			s.holdings.mu.Unlock()
			return nil, nil
		}
		d, arriving := e.holder()
		if e.lost || e.gone(time.Now(), s.lease) || d == nil && !arriving {
			e.lost = true
			s.holdings.mu.Unlock()
			return nil, nil
		}
		s.holdings.mu.Unlock()
		if !arriving {
			return d, nil
		}
		if err := sleepCtx(ctx, checkpointArrival); err != nil {
			return nil, err
		}
	}
}

// returnOrphan settles e, an orphaned entry of task id (see orphaned): a
// copy of a task this worker answered is acked; any other goes back to
// the fleet, to be answered (adopted again, it is polled if its captcha
// id is known here or on the copy, solved otherwise).
func (s *WorkerStore) returnOrphan(ctx context.Context, id string, e *entry) {
	if s.dropAnswered(ctx, id) {
		return
	}
	s.holdings.mu.Lock()
	if s.holdings.entries[id] != e || e.finishing || e.handback {
		s.holdings.mu.Unlock()
		return
	}
	e.handback = true
	s.holdings.mu.Unlock()
	s.log.Info("returning a copy of a task the queue was letting go of as the copy came", "id", id)
	if err := s.handBack(ctx, id); err != nil {
		s.log.Warn("returning a copy of a task failed; it goes back when the channel closes", "id", id, "err", err)
	}
}

// dropAnswered acks what is held of task id when this worker answered
// it (its result is on the broker already: a copy is stale), and
// reports whether it did.
func (s *WorkerStore) dropAnswered(ctx context.Context, id string) bool {
	rec, err := s.mem.Get(ctx, id)
	if err != nil || !rec.Status.Final() {
		return false
	}
	s.log.Info("dropping a copy of a task this worker answered", "id", id, "status", rec.Status)
	s.release(id)
	return true
}

// release forgets a finished task and acks everything held for it.
func (s *WorkerStore) release(id string) {
	s.holdings.mu.Lock()
	e, ok := s.holdings.entries[id]
	delete(s.holdings.entries, id)
	var tasks, parked []*Delivery
	if ok {
		tasks, parked = e.takeHeld()
	}
	s.holdings.mu.Unlock()
	s.settle(append(tasks, parked...)...)
}

// takeHeld returns the task deliveries and the checkpoint deliveries held
// for e and forgets them. A park confirmed late still changes e, so
// callers hold holdings.mu even once e is out of the map.
func (e *entry) takeHeld() (tasks, parked []*Delivery) {
	tasks, e.deliveries = e.deliveries, nil
	for k, d := range e.checkpoints {
		parked = append(parked, d)
		delete(e.checkpoints, k)
	}
	return tasks, parked
}

func deadReason(r captchaq.Result) string {
	switch r.ErrorCode {
	case captchaq.CodeExpired:
		return ReasonExpired
	case "ERROR_CAPTCHA_UNSOLVABLE":
		return ReasonExhausted
	}
	return ReasonPermanent
}

// handBack returns a task that was not submitted to the broker: task
// deliveries are nacked back to their queue; a parked copy is published
// back to the task exchange (through a delay tier when it waits for a
// retry) and then acked.
func (s *WorkerStore) handBack(ctx context.Context, id string) error {
	s.holdings.mu.Lock()
	e, ok := s.holdings.entries[id]
	delete(s.holdings.entries, id)
	var confirmed int
	var m TaskMessage
	if ok {
		confirmed, m = e.confirmed, e.msg
	}
	s.holdings.mu.Unlock()
	if !ok {
		return nil
	}
	if confirmed > 0 {
		var err error
		if m.Attempts > 0 {
			_, err = s.pub.Retry(ctx, m)
		} else {
			err = s.pub.PublishTask(ctx, m)
		}
		if err != nil {
			// The parked copy stays held until the channel closes; its
			// lease then returns it to the task exchange.
			return err
		}
	}
	s.holdings.mu.Lock()
	tasks, parked := e.takeHeld()
	s.holdings.mu.Unlock()
	for _, d := range tasks {
		if err := d.Nack(true); err != nil && !errors.Is(err, ErrStaleDelivery) && !errors.Is(err, ErrSettled) {
			s.log.Warn("nack failed", "id", id, "err", err)
		}
	}
	s.settle(parked...)
	return nil
}
