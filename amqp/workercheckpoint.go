package amqp

import (
	"context"
	"errors"
	"slices"
	"time"
)

// park publishes m as the task's newest copy in the checkpoint queue and,
// once confirmed, acks every older copy held. lost is true when the task's
// deliveries had all gone back to the fleet before the confirm. With
// epoch not 0 the copy is published only on that connection (errLetGo
// when it closed first).
func (s *WorkerStore) park(ctx context.Context, epoch uint64, id string, update func(*TaskMessage)) (lost bool, err error) {
	var (
		e   *entry
		seq int
		m   TaskMessage
	)
	for tries := 0; ; tries++ {
		var (
			ok     bool
			holder *Delivery
		)
		s.holdings.mu.Lock()
		if e, ok = s.holdings.entries[id]; !ok {
			s.holdings.mu.Unlock()
			return false, nil
		}
		e.seq++
		seq, m = e.seq, e.msg
		update(&m)
		// A copy after the first goes in one transaction with the ack of
		// the delivery that holds the task, so the fleet never has both.
		if d, arriving := e.holder(); epoch == 0 && d != nil && !arriving && d.live() && d.acks.tx {
			holder = d
		}
		s.holdings.mu.Unlock()
		if holder == nil {
			if err := s.pub.park(ctx, epoch, s.owner, s.run, m, seq); err != nil {
				return false, err
			}
			break
		}
		parked, err := s.parkWith(ctx, holder, id, m, seq)
		if errors.Is(err, ErrSettled) && tries < settledTries {
			// Settled meanwhile: the task answered, or moved to a newer
			// copy by another park; decided again.
			if err := sleepCtx(ctx, checkpointArrival); err != nil {
				return false, err
			}
			continue
		}
		if !parked {
			return false, err
		}
		break
	}
	s.holdings.mu.Lock()
	var old, acked []*Delivery
	if seq > e.confirmed {
		if e.confirmed == 0 && len(e.deliveries) > 0 {
			acked = slices.Clone(e.deliveries)
			lost = !slices.ContainsFunc(acked, (*Delivery).live)
		}
		e.confirmed, e.msg, e.parkedAt = seq, m, time.Now()
		old = e.deliveries
		e.deliveries = nil
		for k, d := range e.checkpoints {
			if k < seq {
				old = append(old, d)
				delete(e.checkpoints, k)
			}
		}
	}
	hook := s.hooks.afterFirstConfirm
	s.holdings.mu.Unlock()
	if acked != nil {
		if hook != nil {
			hook(id)
		}
		// The task deliveries' acks go now, and their clock with them
		// (unsureAcks.lost).
		s.unsure.mu.Lock()
		s.unsure.acks[id] = unsureAck{deliveries: acked, at: time.Now()}
		s.unsure.mu.Unlock()
	}
	s.settle(old...)
	return lost, nil
}

// settledTries bounds how often park decides again when the holder it
// chose was settled first (checkpointArrival apart).
const settledTries = 50

// parkWith publishes m as copy seq of task id in one transaction with the
// ack of holder, the delivery that holds the task, and reports whether
// the copy is the broker's now. A holder whose channel closed first leaves
// the task to the fleet (the sweeper lets go of it). When the channel
// closes before the broker answers the commit, the broker holds either the
// holder (it goes back to the fleet) or the copy: a copy that reaches this
// worker then goes to the fleet too (holdCheckpoint), never held here
// beside an adopter's. ErrSettled: the holder was settled first.
func (s *WorkerStore) parkWith(ctx context.Context, holder *Delivery, id string, m TaskMessage, seq int) (bool, error) {
	o, err := s.pub.parked(s.owner, s.run, m, seq)
	if err == nil {
		o, err = o.stamped()
	}
	if err != nil {
		return false, err
	}
	var hook func()
	if s.hooks.beforeCommit != nil {
		hook = func() { s.hooks.beforeCommit(id) }
	}
	err = holder.ackWith(ctx, []outbound{o}, hook)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, errUncommitted):
		s.holdings.mu.Lock()
		s.holdings.uncommitted[id] = uncommittedCopy{seq: seq, at: time.Now()}
		s.holdings.mu.Unlock()
		s.log.Info("a checkpoint's copy may or may not be on the broker (its channel closed before the commit's answer); the task goes to the fleet either way", "id", id)
		return false, nil
	case errors.Is(err, ErrStaleDelivery):
		return false, nil // the holder's channel closed first: the fleet has the task
	}
	return false, err
}

// uncommittedCopy is a task's copy whose transaction's outcome is not
// known (parkWith), and when that was found.
type uncommittedCopy struct {
	seq int
	at  time.Time
}

// Checkpoint implements captchaq.Journal: the captcha id is on the broker
// before the task's delivery is acked.
func (s *WorkerStore) Checkpoint(ctx context.Context, id, captchaID string, attempt int, at time.Time) error {
	if err := s.mem.Checkpoint(ctx, id, captchaID, attempt, at); err != nil {
		return err
	}
	s.holdings.mu.Lock()
	e, ok := s.holdings.entries[id]
	adopted := ok && e.confirmed == 0 && e.msg.CaptchaID == captchaID
	s.holdings.mu.Unlock()
	if adopted {
		// Adopted from Names.Adopt: the delivery held carries this
		// captcha id already, and holds the task as a checkpoint does
		// (its channel closing sends it back to the fleet at once).
		return nil
	}
	update := func(m *TaskMessage) {
		m.CaptchaID, m.Attempts, m.Submitted = captchaID, attempt, at
	}
	// The first checkpoint is confirmed on the connection of the task
	// delivery that holds the task (a copy the broker gave this worker
	// again while the submit was out holds it too); when that connection
	// closed first, the task is claimed or forfeited (firstCheckpoint).
	for {
		epoch, take := s.firstCheckpoint(id)
		if !take {
			return nil
		}
		lost, err := s.park(ctx, epoch, id, update)
		if epoch != 0 && errors.Is(err, errLetGo) {
			continue // decided again: the holder's connection closed
		}
		return s.claimIfLost(ctx, id, lost, err)
	}
}

// firstCheckpoint says where task id's checkpoint is to be confirmed.
// For a task's first checkpoint that is the connection of its holder
// (the task delivery held; epoch). When that delivery's connection has
// closed (the broker gave the task back to the fleet), the task is taken
// only while a claim can still reach a worker that received it again
// before it submits (mayClaim; epoch 0: on any connection, and claimed);
// otherwise it is forfeited (take false): no checkpoint, no polls, no
// answer, and the fleet solves it again. A checkpoint after the first
// (epoch 0) goes on any connection.
func (s *WorkerStore) firstCheckpoint(id string) (epoch uint64, take bool) {
	s.holdings.mu.Lock()
	defer s.holdings.mu.Unlock()
	e, ok := s.holdings.entries[id]
	if !ok || e.confirmed > 0 {
		return 0, true
	}
	d, _ := e.holder()
	switch {
	case d == nil:
		return 0, true
	case d.live():
		return d.epoch, true
	case s.mayClaim(d, time.Now()):
		return 0, true
	}
	s.log.Warn("the provider accepted a task whose delivery went back to the fleet too long ago to claim it; letting the fleet have it (it may be solved twice)",
		"id", id, "silent_before", d.sess.ended().Sub(s.pub.c.lastHeard(d.epoch)).Round(time.Millisecond))
	e.forfeit = true
	return 0, false
}

// claimEach claims the tasks ids (Publisher.Claim), waiting for the
// broker up to claimGiveUp; a claim that fails is logged with failed.
// A claim heard after another worker's redeliveredWait still cancels its
// copy if not yet submitted.
func (s *WorkerStore) claimEach(ctx context.Context, ids []string, failed string) {
	ctx, cancel := context.WithTimeout(ctx, claimGiveUp)
	defer cancel()
	for _, id := range ids {
		if err := s.pub.Claim(ctx, id); err != nil {
			s.log.Warn(failed, "id", id, "err", err)
		}
	}
}

// claimIfLost claims task id when its deliveries had all gone back to the
// fleet before its checkpoint was confirmed (park's lost).
func (s *WorkerStore) claimIfLost(ctx context.Context, id string, lost bool, err error) error {
	if lost {
		// Another worker may hold the copy the broker gave back: it
		// waits before submitting, and drops it on this claim.
		if err := s.pub.Claim(ctx, id); err != nil {
			s.log.Warn("claiming a task whose delivery was lost failed; another worker may solve it again", "id", id, "err", err)
		}
	}
	return err
}

// claimWindow is how soon after the connection that held a task closed
// a worker still claims it (Publisher.Claim) once the provider accepted
// it: a worker that received the task again waits redeliveredWait from
// the broker's close, and the claim has to reach it before that.
const claimWindow = redeliveredWait - time.Second

// mayClaim reports whether a claim on a task held by d, whose connection
// closed before the task's first checkpoint was confirmed, can still
// reach a worker that received the task again before it submits it. The
// broker let go of d no earlier than the later of when its connection
// was last heard from and, for a connection that closed (a close, a
// reset, the broker going down) rather than fell silent, when the
// client saw it end. A connection that went silent (a partition, the
// process stopped) for longer than Config.Heartbeat before its end may
// have been given up by the broker at any time after it was last heard;
// and what a process read right after a stall (Conn's stallClock) may
// have waited in its socket through it, so the stall's start counts.
func (s *WorkerStore) mayClaim(d *Delivery, now time.Time) bool {
	if d == nil {
		return false
	}
	c := s.pub.c
	since := c.lastHeard(d.epoch)
	if ended := d.sess.ended(); !ended.IsZero() && ended.Sub(since) <= c.cfg.Heartbeat {
		since = ended
	}
	if down := c.brokerDownAt(d.epoch); down.After(since) {
		// A broker restart: nobody can have received a copy before the
		// broker listened again.
		since = down
	}
	since = c.awake.before(since, now, c.cfg.Heartbeat)
	return now.Sub(since) < claimWindow
}
