package amqp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/captchaq/captchaq"
)

// WorkerStore is the captchaq.Journal of a Worker (through its
// captchaq.Fleet): the queue's local state lives in a captchaq.MemoryStore,
// its Config.Store, and every step the queue makes durable is made durable
// on the broker, before the task's message is let go (the local record is
// written by the step too, unless the task has left this worker):
//
//   - Checkpoint publishes the task with its captcha id to the worker's
//     checkpoint queue (confirmed), then acks the task's delivery;
//   - Retry after a real attempt parks the task, without captcha id and
//     with its attempts, in the checkpoint queue (network failures and
//     "no free thread" keep the delivery held as it is); this copy, as
//     every copy after a task's first checkpoint, goes out in one
//     transaction with the ack of the checkpoint it replaces (parkWith);
//   - Finish publishes the result to the task's reply-to queue, or the
//     results queue when it has none, and for a failed task its dead
//     letter with the reason in headers, in one transaction with the ack
//     of the checkpoint that holds the task (all or nothing; a task
//     delivery, for a task that failed before its first checkpoint: its
//     answer confirmed, then its ack), then acks everything else held
//     for the task.
//
// A task the worker hands back (shutdown, or its delivery's channel died
// before anything was submitted) is not finished: its delivery is nacked
// back to its queue, or a parked copy is published back to the task
// exchange. Safe for concurrent use.
type WorkerStore struct {
	mem   *captchaq.MemoryStore
	pub   *Publisher
	owner string
	run   string // this run's mark on its checkpoints (HeaderRun)
	lease time.Duration
	log   *slog.Logger

	mu      sync.Mutex
	entries map[string]*entry

	// finished remembers the tasks of finished ids, past what mem keeps.
	finished     *idMemory
	finishedSize int
	// claims are the ids other workers claimed lately, by when heard.
	claims map[string]time.Time
	// uncommitted are the copies whose transaction's outcome is not
	// known, by task id (see parkWith): such a copy that comes to this
	// worker goes to the fleet.
	uncommitted map[string]uncommittedCopy
	// unsure are the task deliveries acked at their task's first
	// checkpoint whose connection has not yet been heard from ackUnsure
	// after the ack, by task id (see unsureAcks).
	unsure map[string]unsureAck
	// afterFirstConfirm, when set (tests), runs between a task's first
	// checkpoint's confirm and the acks of its task deliveries.
	afterFirstConfirm func(id string)
	// afterLetGo, when set (tests), runs once Finish has let go of a task
	// the fleet holds now, before the queue forgets it.
	afterLetGo func(id string)
	// beforeCommit, when set (tests), runs once a transaction's messages
	// are sent on a holder's channel (Finish's answer, parkWith's copy),
	// before its commit.
	beforeCommit func(id string)
}

// unsureAck is the task deliveries acked at a task's first checkpoint,
// and when.
type unsureAck struct {
	deliveries []*Delivery
	at         time.Time
}

// ackUnsure is how long after a task delivery's ack its connection must
// still be heard from for the ack to count as the broker's: an ack is
// never confirmed, and one written just before the connection dies (the
// broker closing it, a reset) may never be read.
const ackUnsure = 3 * time.Second

// redeliveredWait is how long a worker holds a task redelivered without a
// captcha id before its queue takes it: the worker that lost its delivery
// may have submitted it and still be reconnecting to checkpoint it; once
// it has, its claim (Publisher.Claim) makes this worker drop its copy.
const redeliveredWait = 5 * time.Second

// entry is what the worker holds of one unfinished task on the broker.
type entry struct {
	msg TaskMessage // what the broker's newest confirmed copy says
	// deliveries are task-queue deliveries not yet settled.
	deliveries []*Delivery
	// seq numbers the copies parked in the checkpoint queue; confirmed is
	// the newest confirmed one (0: none, the task delivery is the copy).
	seq, confirmed int
	parkedAt       time.Time         // when the newest copy was confirmed, or the delivery received
	checkpoints    map[int]*Delivery // checkpoint-queue deliveries held, by seq
	handback       bool              // being handed back, not finished
	claimed        bool              // another worker checkpointed it: dropped, not finished
	waiting        bool              // a redelivered copy, not yet given to the queue (see redeliveredWait)
	// lost: the copy that held the task for this worker went back to
	// the fleet (its channel closed): the queue lets go of the task and
	// Finish publishes nothing (see "Recovery" in the package doc).
	lost bool
	// forfeit: the provider accepted the task but its first checkpoint
	// could not be confirmed before the connection that held it closed,
	// too long ago for a claim to win (see mayClaim): the fleet has it.
	forfeit bool
	// finishing: the queue's Finish for it began.
	finishing bool
}

// holder is the delivery that holds e for this worker: the checkpoint of
// the newest confirmed copy, or with none confirmed a task delivery (a
// live one if any). arriving is true when the newest copy is confirmed
// but its delivery has not come yet. Callers hold s.mu.
func (e *entry) holder() (d *Delivery, arriving bool) {
	if e.confirmed > 0 {
		d = e.checkpoints[e.confirmed]
		return d, d == nil
	}
	for _, t := range e.deliveries {
		if d == nil || t.live() {
			d = t
		}
	}
	return d, false
}

// gone reports whether e's holder has gone back to the fleet: its
// channel closed (the broker dead-letters a checkpoint to Names.Adopt, and
// requeues a task delivery), or its newest copy, published while the
// checkpoint consumer was away, may have outlived its lease unreceived.
// A task delivery without a captcha id whose channel closed is the stale
// sweeper's to hand back, not gone: nothing was submitted. Callers hold
// s.mu.
func (e *entry) gone(now time.Time, lease time.Duration) bool {
	d, arriving := e.holder()
	switch {
	case e.forfeit:
		return true
	case arriving:
		return now.Sub(e.parkedAt) > lease*9/10
	case d == nil || d.live():
		return false
	}
	return e.confirmed > 0 || e.msg.CaptchaID != ""
}

var _ captchaq.Journal = (*WorkerStore)(nil)

func newWorkerStore(pub *Publisher, owner string, log *slog.Logger) *WorkerStore {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &WorkerStore{
		mem:     captchaq.NewMemoryStore(captchaq.MemoryStoreConfig{}),
		pub:     pub,
		owner:   owner,
		run:     hex.EncodeToString(b[:]),
		lease:   pub.c.cfg.InflightLease,
		log:     log,
		entries: map[string]*entry{},
		claims:  map[string]time.Time{},
		unsure:  map[string]unsureAck{},

		uncommitted: map[string]uncommittedCopy{},

		finished:     newIDMemory(idMemoryDefault),
		finishedSize: idMemoryDefault,
	}
}

// receive registers a task delivery. It returns false when the delivery is a
// copy of a task this worker already holds a confirmed checkpoint of: then
// the copy has been acked and there is nothing to do.
//
// A redelivered copy without a captcha id may be of a task another worker
// submitted and then lost its connection: it is held waiting (see
// endWait), and a copy of a task claimed lately is dropped (acked). A
// checkpoint of a task held waiting (adopted through Names.Adopt) takes
// its place: it is fresh, and the copy is acked.
func (s *WorkerStore) receive(d *Delivery, m TaskMessage) (fresh bool) {
	s.mu.Lock()
	e, ok := s.entries[m.Task.ID]
	if !ok {
		suspect := d.Redelivered && m.CaptchaID == ""
		if _, claimed := s.claims[m.Task.ID]; suspect && claimed {
			s.mu.Unlock()
			s.log.Info("dropping a redelivered task another worker checkpointed", "id", m.Task.ID)
			s.settle(d)
			return false
		}
		e := &entry{msg: m, deliveries: []*Delivery{d}, checkpoints: map[int]*Delivery{}, parkedAt: time.Now()}
		e.waiting = suspect
		s.entries[m.Task.ID] = e
		s.mu.Unlock()
		return true
	}
	switch {
	case e.waiting && m.CaptchaID != "":
		// A checkpoint (through Names.Adopt) of a task held waiting as a
		// redelivered copy: the checkpoint carries the task, so the copy
		// is acked and the checkpoint adopted; a claim drops only copies
		// without a captcha id.
		copies := e.deliveries
		e.deliveries, e.msg, e.waiting, e.parkedAt = []*Delivery{d}, m, false, time.Now()
		s.mu.Unlock()
		s.settle(copies...)
		return true
	case e.lost || e.forfeit:
		// Being let go: the copy goes back for the fleet (to this worker
		// too, once the queue has let go: then it is a fresh task).
		s.mu.Unlock()
		if err := d.Nack(true); err != nil && !errors.Is(err, ErrStaleDelivery) && !errors.Is(err, ErrSettled) {
			s.log.Warn("returning a copy of a task being let go failed", "id", m.Task.ID, "err", err)
		}
		return false
	case m.CaptchaID != "" && (e.gone(time.Now(), s.lease) || s.newestArriving(e, d)):
		// This worker's own checkpoint, back through Names.Adopt after
		// its channel closed (before its delivery reached this worker,
		// too): it holds the task again, and the queue polls on as if
		// nothing happened.
		e.deliveries, e.confirmed, e.msg, e.parkedAt = []*Delivery{d}, 0, m, time.Now()
		clear(e.checkpoints)
		s.mu.Unlock()
		return false
	case e.confirmed == 0:
		e.deliveries = append(e.deliveries, d)
		s.mu.Unlock()
		return false
	}
	s.mu.Unlock()
	s.settle(d)
	return false
}

// newestArriving reports whether d, a checkpoint back through
// Names.Adopt, is e's newest confirmed copy, which has not reached this
// worker's checkpoint consumer: the broker sent it on a connection that
// closed before this worker read it, and dead-lettered it. Acking it as
// an older copy would lose the task: the holder waited for would never
// come. Callers hold s.mu.
func (s *WorkerStore) newestArriving(e *entry, d *Delivery) bool {
	_, arriving := e.holder()
	return arriving && headerString(d.Headers, HeaderRun) == s.run && headerInt(d.Headers, HeaderSeq) == e.confirmed
}

// letGo marks the tasks whose holder has gone back to the fleet (see
// entry.gone) and returns them: the queue must stop polling them. It
// forgets the uncommitted copies older than the lease.
func (s *WorkerStore) letGo(now time.Time) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id, e := range s.entries {
		if !e.lost && !e.handback && !e.waiting && e.gone(now, s.lease) {
			e.lost = true
			ids = append(ids, id)
		}
	}
	for id, u := range s.uncommitted {
		// Unreceived past its lease, a copy expires to the fleet.
		if now.Sub(u.at) > s.lease {
			delete(s.uncommitted, id)
		}
	}
	return ids
}

// unmarkLost undoes letGo for a task the queue could not let go of now
// (its submit was being answered): the next sweep decides again.
func (s *WorkerStore) unmarkLost(id string) {
	s.mu.Lock()
	if e, ok := s.entries[id]; ok {
		e.lost = false
	}
	s.mu.Unlock()
}

// conflict returns an *captchaq.IDConflictError when t's id names another
// task this worker holds or has finished: the finished ones from mem (its
// last captchaq.MaxFinishedDefault results), then from the fingerprints
// of its last idMemoryDefault finished ids.
func (s *WorkerStore) conflict(ctx context.Context, t captchaq.Task) error {
	s.mu.Lock()
	e, ok := s.entries[t.ID]
	var held captchaq.Task
	if ok {
		held = e.msg.Task
	}
	s.mu.Unlock()
	if ok {
		return captchaq.Record{Task: held}.Conflict(t)
	}
	if rec, err := s.mem.Get(ctx, t.ID); err == nil {
		return rec.Conflict(t)
	}
	return s.finished.conflict(t)
}

// holdCheckpoint takes a delivery from the worker's own checkpoint queue:
// the newest copies are held, older ones and those of tasks no longer held
// are acked. A copy of an earlier run under the same owner name (a worker
// killed and started again with the same --owner) is of a task nobody
// holds any more: it is rejected, so the queue dead-letters it back to the
// fleet at once, as its lease would.
func (s *WorkerStore) holdCheckpoint(d *Delivery) {
	if headerString(d.Headers, HeaderRun) != s.run {
		if err := d.Nack(false); err != nil && !errors.Is(err, ErrStaleDelivery) && !errors.Is(err, ErrSettled) {
			s.log.Warn("returning an earlier run's checkpoint failed", "id", d.MessageID, "err", err)
		}
		return
	}
	seq := headerInt(d.Headers, HeaderSeq)
	s.mu.Lock()
	if u, ok := s.uncommitted[d.MessageID]; ok && u.seq == seq {
		// Its transaction applied after all, and the holder it replaced
		// is acked: this copy is the fleet's only one, to be adopted.
		delete(s.uncommitted, d.MessageID)
		s.mu.Unlock()
		s.log.Info("a checkpoint's copy whose commit went unanswered came back; it goes to the fleet", "id", d.MessageID)
		if err := d.Nack(false); err != nil && !errors.Is(err, ErrStaleDelivery) && !errors.Is(err, ErrSettled) {
			s.log.Warn("sending a copy to the fleet failed; it goes when the channel closes", "id", d.MessageID, "err", err)
		}
		return
	}
	e, ok := s.entries[d.MessageID]
	if !ok || seq < e.confirmed {
		s.mu.Unlock()
		s.settle(d)
		return
	}
	e.checkpoints[seq] = d
	s.mu.Unlock()
}

// admit reports whether a task may be submitted: the broker's copy of it
// is still this worker's, as a confirmed checkpoint or a task delivery on
// a live channel. A task whose deliveries all came on channels that died
// is back in its queue for the fleet; submitting it would solve it twice
// (the stale sweeper hands it back).
func (s *WorkerStore) admit(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[id]
	if !ok || e.handback {
		return false
	}
	if e.confirmed > 0 {
		return true
	}
	for _, d := range e.deliveries {
		if d.live() {
			return true
		}
	}
	return false
}

// waits reports whether id is held waiting, not yet given to the queue.
func (s *WorkerStore) waits(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[id]
	return ok && e.waiting
}

// endWait ends the wait of id; false when a claim dropped it meanwhile.
func (s *WorkerStore) endWait(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[id]
	if !ok || !e.waiting {
		return false
	}
	e.waiting = false
	return true
}

// claimed records another worker's claim on id: a checkpoint of the task
// exists, so a copy without a captcha id is one too many. A copy held
// waiting is dropped (acked) at once; an adopted checkpoint is the
// claimed one and is kept. It returns true when the queue has a copy not
// checkpointed: that one is marked so that its coming Finish (the caller
// cancels it) acks it and reports nothing.
func (s *WorkerStore) claimed(id string) bool {
	s.mu.Lock()
	now := time.Now()
	for k, at := range s.claims {
		if now.Sub(at) > 2*redeliveredWait {
			delete(s.claims, k)
		}
	}
	s.claims[id] = now
	e, ok := s.entries[id]
	switch {
	case ok && e.waiting:
		delete(s.entries, id)
		tasks, parked := e.takeHeld()
		s.mu.Unlock()
		s.log.Info("dropping a redelivered task another worker checkpointed", "id", id)
		s.settle(append(tasks, parked...)...)
		return false
	case !ok || e.handback || e.confirmed > 0 || e.msg.CaptchaID != "":
		// Nothing held, or the task's checkpoint itself (adopted): the
		// claimer's checkpoint is this one, so it is polled on.
		s.mu.Unlock()
		return false
	}
	e.handback, e.claimed = true, true
	s.mu.Unlock()
	return true
}

func (s *WorkerStore) unmarkClaimed(id string) {
	s.mu.Lock()
	if e, ok := s.entries[id]; ok && e.claimed {
		e.handback, e.claimed = false, false
	}
	s.mu.Unlock()
}

// drop forgets an entry whose task never reached the queue.
func (s *WorkerStore) drop(id string) {
	s.mu.Lock()
	delete(s.entries, id)
	s.mu.Unlock()
}

func (s *WorkerStore) settle(ds ...*Delivery) { ackAll(s.log, ds...) }

// ackAll acks each delivery; one from a closed channel comes again, and
// whoever reads it dedupes, so only other failures are logged.
func ackAll(log *slog.Logger, ds ...*Delivery) {
	for _, d := range ds {
		if err := d.Ack(); err != nil && !errors.Is(err, ErrStaleDelivery) && !errors.Is(err, ErrSettled) {
			log.Warn("ack failed", "id", d.MessageID, "err", err)
		}
	}
}

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
		s.mu.Lock()
		if e, ok = s.entries[id]; !ok {
			s.mu.Unlock()
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
		s.mu.Unlock()
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
	s.mu.Lock()
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
	hook := s.afterFirstConfirm
	s.mu.Unlock()
	if acked != nil {
		if hook != nil {
			hook(id)
		}
		// The task deliveries' acks go now, and their clock with them
		// (unsureAcks).
		s.mu.Lock()
		s.unsure[id] = unsureAck{deliveries: acked, at: time.Now()}
		s.mu.Unlock()
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
	if s.beforeCommit != nil {
		hook = func() { s.beforeCommit(id) }
	}
	err = holder.ackWith(ctx, []outbound{o}, hook)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, errUncommitted):
		s.mu.Lock()
		s.uncommitted[id] = uncommittedCopy{seq: seq, at: time.Now()}
		s.mu.Unlock()
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
	s.mu.Lock()
	e, ok := s.entries[id]
	adopted := ok && e.confirmed == 0 && e.msg.CaptchaID == captchaID
	s.mu.Unlock()
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
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[id]
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

// unsureAcks returns the tasks whose task delivery's ack, sent when their
// first checkpoint was confirmed, may have died with its connection: the
// connection ended before it was heard from ackUnsure after the ack. The
// broker then gives the task back to the fleet while this worker's
// checkpoint carries it on, so the caller claims it: a worker that
// received the copy again drops it instead of solving it a second time,
// even when this worker has answered the task by then. An ack whose
// connection was heard from past ackUnsure is forgotten.
func (s *WorkerStore) unsureAcks() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id, u := range s.unsure {
		sure, lost := true, false
		for _, d := range u.deliveries {
			switch {
			case s.pub.c.lastHeard(d.epoch).Sub(u.at) > ackUnsure:
			case !d.sess.ended().IsZero():
				lost = true
			default:
				sure = false
			}
		}
		if lost {
			ids = append(ids, id)
		}
		if lost || sure {
			delete(s.unsure, id)
		}
	}
	return ids
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

// Retry implements captchaq.Journal. The queue keeps the task and retries it
// itself; the broker's copy is replaced only when it has become wrong (it
// names a captcha id that failed, or fewer attempts), so a crash neither
// polls a dead id nor forgets an attempt.
func (s *WorkerStore) Retry(ctx context.Context, id string, attempts int, notBefore time.Time, errText, errCode string) error {
	if err := s.mem.Retry(ctx, id, attempts, notBefore, errText, errCode); err != nil {
		return err
	}
	s.mu.Lock()
	e, ok := s.entries[id]
	stale := ok && (e.msg.CaptchaID != "" || e.msg.Attempts != attempts)
	s.mu.Unlock()
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
	s.mu.Lock()
	e, ok := s.entries[r.ID]
	claimed, handback := ok && e.claimed, ok && e.handback
	m := TaskMessage{Task: captchaq.Task{ID: r.ID, Method: r.Method}}
	if ok {
		e.finishing, m = true, e.msg
	}
	s.mu.Unlock()
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
	if n := s.liveHeld(id); n > 0 {
		// No path should get here: the copy acked below is the
		// fleet's only one, and nobody answers the task.
		s.log.Warn("letting go of a task while holding a live copy of it; the copy is acked", "id", id, "live", n)
	}
	s.release(id)
	if s.afterLetGo != nil {
		s.afterLetGo(id)
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
	if err := s.pub.c.waitUnblocked(ctx); err != nil {
		return err
	}
	var hook func()
	if s.beforeCommit != nil {
		hook = func() { s.beforeCommit(id) }
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
		s.mu.Lock()
		e, ok := s.entries[id]
		if !ok {
			s.mu.Unlock()
			return nil, nil
		}
		d, arriving := e.holder()
		if e.lost || e.gone(time.Now(), s.lease) || d == nil && !arriving {
			e.lost = true
			s.mu.Unlock()
			return nil, nil
		}
		s.mu.Unlock()
		if !arriving {
			return d, nil
		}
		if err := sleepCtx(ctx, checkpointArrival); err != nil {
			return nil, err
		}
	}
}

// liveHeld counts the live deliveries held for task id.
func (s *WorkerStore) liveHeld(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[id]
	if !ok {
		return 0
	}
	n := 0
	for _, d := range e.deliveries {
		if d.live() {
			n++
		}
	}
	for _, d := range e.checkpoints {
		if d.live() {
			n++
		}
	}
	return n
}

// held returns the entry of task id, nil when none is held.
func (s *WorkerStore) held(id string) *entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.entries[id]
}

// orphaned reports whether e, the entry of task id when the queue took
// it, is still held with no Finish of its own begun, after the queue's
// task of that id finished: the queue took the delivery as one more
// waiter of a task it was finishing (the entry before e was let go of
// and forgotten, and the queue not yet), and no Finish for e will come.
func (s *WorkerStore) orphaned(id string, e *entry) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return e != nil && s.entries[id] == e && !e.finishing && !e.handback
}

// returnOrphan settles e, an orphaned entry of task id (see orphaned): a
// copy of a task this worker answered is acked; any other goes back to
// the fleet, to be answered (adopted again, it is polled if its captcha
// id is known here or on the copy, solved otherwise).
func (s *WorkerStore) returnOrphan(ctx context.Context, id string, e *entry) {
	if s.dropAnswered(ctx, id) {
		return
	}
	s.mu.Lock()
	if s.entries[id] != e || e.finishing || e.handback {
		s.mu.Unlock()
		return
	}
	e.handback = true
	s.mu.Unlock()
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
	s.mu.Lock()
	e, ok := s.entries[id]
	delete(s.entries, id)
	var tasks, parked []*Delivery
	if ok {
		tasks, parked = e.takeHeld()
	}
	s.mu.Unlock()
	s.settle(append(tasks, parked...)...)
}

// takeHeld returns the task deliveries and the checkpoint deliveries held
// for e and forgets them. A park confirmed late still changes e, so
// callers hold s.mu even once e is out of the map.
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

// markHandBack flags a task so that its coming Finish hands it back
// instead. It returns false for a task that already has a confirmed
// checkpoint or none held.
func (s *WorkerStore) markHandBack(id string, onlyStale bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[id]
	if !ok || e.handback {
		return false
	}
	if onlyStale {
		if e.confirmed > 0 || len(e.deliveries) == 0 {
			return false
		}
		for _, d := range e.deliveries {
			if d.live() {
				return false
			}
		}
	} else if e.msg.CaptchaID != "" {
		return false
	}
	e.handback = true
	return true
}

func (s *WorkerStore) unmarkHandBack(id string) {
	s.mu.Lock()
	if e, ok := s.entries[id]; ok {
		e.handback = false
	}
	s.mu.Unlock()
}

// handBack returns a task that was not submitted to the broker: task
// deliveries are nacked back to their queue; a parked copy is published
// back to the task exchange (through a delay tier when it waits for a
// retry) and then acked.
func (s *WorkerStore) handBack(ctx context.Context, id string) error {
	s.mu.Lock()
	e, ok := s.entries[id]
	delete(s.entries, id)
	var confirmed int
	var m TaskMessage
	if ok {
		confirmed, m = e.confirmed, e.msg
	}
	s.mu.Unlock()
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
	s.mu.Lock()
	tasks, parked := e.takeHeld()
	s.mu.Unlock()
	for _, d := range tasks {
		if err := d.Nack(true); err != nil && !errors.Is(err, ErrStaleDelivery) && !errors.Is(err, ErrSettled) {
			s.log.Warn("nack failed", "id", id, "err", err)
		}
	}
	s.settle(parked...)
	return nil
}

// refreshDue republishes every parked or adopted copy held longer than
// age, so the broker's consumer_timeout never closes the channel under it.
func (s *WorkerStore) refreshDue(ctx context.Context, age time.Duration) int {
	s.mu.Lock()
	var due []string
	now := time.Now()
	for id, e := range s.entries {
		// An adopted task is held by its delivery from Names.Adopt until
		// then: the refresh moves it to this worker's checkpoint queue.
		held := e.confirmed > 0 || e.msg.CaptchaID != "" && len(e.deliveries) > 0
		if held && !e.handback && !e.lost && now.Sub(e.parkedAt) >= age {
			due = append(due, id)
		}
	}
	s.mu.Unlock()
	n := 0
	for _, id := range due {
		if _, err := s.park(ctx, 0, id, func(*TaskMessage) {}); err != nil {
			s.log.Warn("refreshing a checkpoint failed", "id", id, "err", err)
			continue
		}
		n++
	}
	return n
}

// ids lists the tasks held.
func (s *WorkerStore) ids() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Keys(s.entries))
}

// beat is the worker's status.
func (s *WorkerStore) beat(now time.Time) StatusBeat {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := StatusBeat{Owner: s.owner, Held: len(s.entries), At: now}
	for _, e := range s.entries {
		if a := e.msg.Accepted; !a.IsZero() && (b.OldestHeld.IsZero() || a.Before(b.OldestHeld)) {
			b.OldestHeld = a
		}
	}
	return b
}
