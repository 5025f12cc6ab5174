package amqp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
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

	// Lock order: holdings.mu and unsure.mu are never held together, nor
	// with finished's lock; under either, only leaf locks are taken (the
	// Conn's in Conn.lastHeard and brokerDownAt, a channel's in
	// Delivery.live, the logger's), never another of the store's.
	holdings holdings
	unsure   unsureAcks

	// finished remembers the tasks of finished ids, past what mem keeps.
	finished     *idMemory
	finishedSize int

	hooks storeHooks
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
// but its delivery has not come yet. Callers hold holdings.mu.
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
// holdings.mu.
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
		mem:   captchaq.NewMemoryStore(captchaq.MemoryStoreConfig{}),
		pub:   pub,
		owner: owner,
		run:   hex.EncodeToString(b[:]),
		lease: pub.c.cfg.InflightLease,
		log:   log,
		holdings: holdings{
			entries:     map[string]*entry{},
			claims:      map[string]time.Time{},
			uncommitted: map[string]uncommittedCopy{},
		},
		unsure: unsureAcks{acks: map[string]unsureAck{}},

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
	s.holdings.mu.Lock()
	e, ok := s.holdings.entries[m.Task.ID]
	if !ok {
		suspect := d.Redelivered && m.CaptchaID == ""
		if _, claimed := s.holdings.claims[m.Task.ID]; suspect && claimed {
			s.holdings.mu.Unlock()
			s.log.Info("dropping a redelivered task another worker checkpointed", "id", m.Task.ID)
			s.settle(d)
			return false
		}
		e := &entry{msg: m, deliveries: []*Delivery{d}, checkpoints: map[int]*Delivery{}, parkedAt: time.Now()}
		e.waiting = suspect
		s.holdings.entries[m.Task.ID] = e
		s.holdings.mu.Unlock()
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
		s.holdings.mu.Unlock()
		s.settle(copies...)
		return true
	case e.lost || e.forfeit:
		// Being let go: the copy goes back for the fleet (to this worker
		// too, once the queue has let go: then it is a fresh task).
		s.holdings.mu.Unlock()
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
		s.holdings.mu.Unlock()
		return false
	case e.confirmed == 0:
		e.deliveries = append(e.deliveries, d)
		s.holdings.mu.Unlock()
		return false
	}
	s.holdings.mu.Unlock()
	s.settle(d)
	return false
}

// newestArriving reports whether d, a checkpoint back through
// Names.Adopt, is e's newest confirmed copy, which has not reached this
// worker's checkpoint consumer: the broker sent it on a connection that
// closed before this worker read it, and dead-lettered it. Acking it as
// an older copy would lose the task: the holder waited for would never
// come. Callers hold holdings.mu.
func (s *WorkerStore) newestArriving(e *entry, d *Delivery) bool {
	_, arriving := e.holder()
	return arriving && headerString(d.Headers, HeaderRun) == s.run && headerInt(d.Headers, HeaderSeq) == e.confirmed
}

// letGo marks the tasks whose holder has gone back to the fleet (see
// entry.gone) and returns them: the queue must stop polling them. It
// forgets the uncommitted copies older than the lease.
func (s *WorkerStore) letGo(now time.Time) []string {
	s.holdings.mu.Lock()
	defer s.holdings.mu.Unlock()
	var ids []string
	for id, e := range s.holdings.entries {
		if !e.lost && !e.handback && !e.waiting && e.gone(now, s.lease) {
			e.lost = true
			ids = append(ids, id)
		}
	}
	for id, u := range s.holdings.uncommitted {
		// Unreceived past its lease, a copy expires to the fleet.
		if now.Sub(u.at) > s.lease {
			delete(s.holdings.uncommitted, id)
		}
	}
	return ids
}

// conflict returns an *captchaq.IDConflictError when t's id names another
// task this worker holds or has finished: the finished ones from mem (its
// last captchaq.MaxFinishedDefault results), then from the fingerprints
// of its last idMemoryDefault finished ids.
func (s *WorkerStore) conflict(ctx context.Context, t captchaq.Task) error {
	s.holdings.mu.Lock()
	e, ok := s.holdings.entries[t.ID]
	var held captchaq.Task
	if ok {
		held = e.msg.Task
	}
	s.holdings.mu.Unlock()
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
	s.holdings.mu.Lock()
	if u, ok := s.holdings.uncommitted[d.MessageID]; ok && u.seq == seq {
		// Its transaction applied after all, and the holder it replaced
		// is acked: this copy is the fleet's only one, to be adopted.
		delete(s.holdings.uncommitted, d.MessageID)
		s.holdings.mu.Unlock()
		s.log.Info("a checkpoint's copy whose commit went unanswered came back; it goes to the fleet", "id", d.MessageID)
		if err := d.Nack(false); err != nil && !errors.Is(err, ErrStaleDelivery) && !errors.Is(err, ErrSettled) {
			s.log.Warn("sending a copy to the fleet failed; it goes when the channel closes", "id", d.MessageID, "err", err)
		}
		return
	}
	e, ok := s.holdings.entries[d.MessageID]
	if !ok || seq < e.confirmed {
		s.holdings.mu.Unlock()
		s.settle(d)
		return
	}
	e.checkpoints[seq] = d
	s.holdings.mu.Unlock()
}

// claimed records another worker's claim on id: a checkpoint of the task
// exists, so a copy without a captcha id is one too many. A copy held
// waiting is dropped (acked) at once; an adopted checkpoint is the
// claimed one and is kept. It returns true when the queue has a copy not
// checkpointed: that one is marked so that its coming Finish (the caller
// cancels it) acks it and reports nothing.
func (s *WorkerStore) claimed(id string) bool {
	s.holdings.mu.Lock()
	now := time.Now()
	for k, at := range s.holdings.claims {
		if now.Sub(at) > 2*redeliveredWait {
			delete(s.holdings.claims, k)
		}
	}
	s.holdings.claims[id] = now
	e, ok := s.holdings.entries[id]
	switch {
	case ok && e.waiting:
		delete(s.holdings.entries, id)
		tasks, parked := e.takeHeld()
		s.holdings.mu.Unlock()
		s.log.Info("dropping a redelivered task another worker checkpointed", "id", id)
		s.settle(append(tasks, parked...)...)
		return false
	case !ok || e.handback || e.confirmed > 0 || e.msg.CaptchaID != "":
		// Nothing held, or the task's checkpoint itself (adopted): the
		// claimer's checkpoint is this one, so it is polled on.
		s.holdings.mu.Unlock()
		return false
	}
	e.handback, e.claimed = true, true
	s.holdings.mu.Unlock()
	return true
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

// refreshDue republishes every parked or adopted copy held longer than
// age, so the broker's consumer_timeout never closes the channel under it.
func (s *WorkerStore) refreshDue(ctx context.Context, age time.Duration) int {
	s.holdings.mu.Lock()
	var due []string
	now := time.Now()
	for id, e := range s.holdings.entries {
		// An adopted task is held by its delivery from Names.Adopt until
		// then: the refresh moves it to this worker's checkpoint queue.
		held := e.confirmed > 0 || e.msg.CaptchaID != "" && len(e.deliveries) > 0
		if held && !e.handback && !e.lost && now.Sub(e.parkedAt) >= age {
			due = append(due, id)
		}
	}
	s.holdings.mu.Unlock()
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

// beat is the worker's status.
func (s *WorkerStore) beat(now time.Time) StatusBeat {
	s.holdings.mu.Lock()
	defer s.holdings.mu.Unlock()
	b := StatusBeat{Owner: s.owner, Held: len(s.holdings.entries), At: now}
	for _, e := range s.holdings.entries {
		if a := e.msg.Accepted; !a.IsZero() && (b.OldestHeld.IsZero() || a.Before(b.OldestHeld)) {
			b.OldestHeld = a
		}
	}
	return b
}
