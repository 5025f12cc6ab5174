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

// WorkerStore is the captchaq.Store of a Worker: local state lives in a
// captchaq.MemoryStore, and every step the queue makes durable is made
// durable on the broker instead, before the task's message is let go:
//
//   - Checkpoint publishes the task with its captcha id to the worker's
//     checkpoint queue (confirmed), then acks the task's delivery;
//   - Retry after a real attempt parks the task, without captcha id and
//     with its attempts, in the checkpoint queue the same way (network
//     failures and "no free thread" keep the delivery held as it is);
//   - Finish publishes the result (confirmed) to the task's reply-to
//     queue, or the results queue when it has none, and for a failed task
//     its dead letter with the reason in headers (confirmed), then acks
//     everything held for the task.
//
// A task the worker hands back (shutdown, or its delivery's channel died
// before anything was submitted) is not finished: its delivery is nacked
// back to its queue, or a parked copy is published back to the task
// exchange.
//
// Copies parked at the same time may share one message (see parker).
// Such a message is acked once no task in it needs it any more. When one
// of its tasks is finished (or has a newer copy, or was handed back)
// while others still need it, those others are parked again after
// compactDelay, in new messages, and the old one is acked: a lease that
// runs out never brings back a task that was already finished. Safe for
// concurrent use.
type WorkerStore struct {
	mem    *captchaq.MemoryStore
	pub    *Publisher
	parker *parker
	owner  string
	run    string // this run's mark on its checkpoints (HeaderRun)
	log    *slog.Logger
	ctx    context.Context // ends at close
	cancel context.CancelFunc
	bg     sync.WaitGroup // compactions under way

	mu      sync.Mutex
	entries map[string]*entry
	// shared are the held checkpoint messages that carry several tasks,
	// with the copies in each that are still needed.
	shared     map[*Delivery]*sharedMessage
	compacting bool // a compaction is scheduled
	closed     bool
}

// compactDelay is how long a checkpoint message of several tasks may keep
// a copy no longer needed (its task finished, say) before the other tasks
// in it are parked again: long enough for tasks answered by one poll to
// finish together, as short as the gathering of single acks (gatherAcks).
const compactDelay = gatherAcks

// sharedMessage is a held checkpoint message of several tasks.
type sharedMessage struct {
	needed map[copyKey]bool
	// stale is when a copy in it stopped being needed (zero: none has).
	stale      time.Time
	compacting bool // its needed copies are being parked again
}

type copyKey struct {
	id  string
	seq int
}

// heldCopy is a task's copy in a held checkpoint message.
type heldCopy struct {
	copyKey
	d *Delivery
}

// entry is what the worker holds of one unfinished task on the broker.
type entry struct {
	msg TaskMessage // what the broker's newest confirmed copy says
	// deliveries are task-queue deliveries not yet settled.
	deliveries []*Delivery
	// seq numbers the copies parked in the checkpoint queue; confirmed is
	// the newest confirmed one (0: none, the task delivery is the copy).
	seq, confirmed int
	parkedAt       time.Time
	checkpoints    map[int]*Delivery // checkpoint-queue deliveries held, by seq
	handback       bool              // being handed back, not finished
}

var _ captchaq.Store = (*WorkerStore)(nil)

func newWorkerStore(pub *Publisher, owner string, log *slog.Logger) *WorkerStore {
	ctx, cancel := context.WithCancel(context.Background())
	var b [8]byte
	_, _ = rand.Read(b[:])
	run := hex.EncodeToString(b[:])
	return &WorkerStore{
		mem:     captchaq.NewMemoryStore(captchaq.MemoryStoreConfig{}),
		pub:     pub,
		parker:  &parker{pub: pub, owner: owner, run: run, ctx: ctx},
		owner:   owner,
		run:     run,
		log:     log,
		ctx:     ctx,
		cancel:  cancel,
		entries: map[string]*entry{},
		shared:  map[*Delivery]*sharedMessage{},
	}
}

// close stops compaction and the publishes under way, and waits for them.
func (s *WorkerStore) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.bg.Wait()
	s.parker.wg.Wait()
}

// hold registers a task delivery. It returns false when the delivery is a
// copy of a task this worker already holds a confirmed checkpoint of: then
// the copy has been acked and there is nothing to do.
func (s *WorkerStore) hold(d *Delivery, m TaskMessage) (fresh bool) {
	s.mu.Lock()
	e, ok := s.entries[m.Task.ID]
	if !ok {
		s.entries[m.Task.ID] = &entry{msg: m, deliveries: []*Delivery{d}, checkpoints: map[int]*Delivery{}}
		s.mu.Unlock()
		return true
	}
	if e.confirmed == 0 {
		e.deliveries = append(e.deliveries, d)
		s.mu.Unlock()
		return false
	}
	s.mu.Unlock()
	s.settle(d)
	return false
}

// holdCheckpoint takes a delivery from the worker's own checkpoint queue:
// the newest copies are held, older ones and those of tasks no longer held
// are not, and a message that holds nothing needed is acked. A message of
// an earlier run under the same owner name (a worker killed and started
// again with the same --owner) holds tasks nobody holds any more: it is
// rejected, so the queue dead-letters it back to the fleet at once, as
// its lease would.
func (s *WorkerStore) holdCheckpoint(d *Delivery) {
	if headerString(d.Headers, HeaderRun) != s.run {
		if err := d.Nack(false); err != nil && !errors.Is(err, ErrStaleDelivery) && !errors.Is(err, ErrSettled) {
			s.log.Warn("returning an earlier run's checkpoint failed", "err", err)
		}
		return
	}
	ids, seqs, several := batchCopies(d.Headers)
	if !several {
		ids, seqs = []string{d.MessageID}, []int{headerInt(d.Headers, HeaderSeq)}
	}
	needed := map[copyKey]bool{}
	var before []heldCopy
	s.mu.Lock()
	for i, id := range ids {
		e, ok := s.entries[id]
		if !ok || seqs[i] < e.confirmed {
			continue
		}
		k := copyKey{id, seqs[i]}
		if prev := e.checkpoints[k.seq]; prev != nil && prev != d {
			// The same copy, delivered before on a channel that died.
			before = append(before, heldCopy{k, prev})
		}
		e.checkpoints[k.seq] = d
		needed[k] = true
	}
	holds := len(needed) > 0
	if several && holds {
		m := &sharedMessage{needed: needed}
		s.shared[d] = m
		if len(needed) < len(ids) {
			// A task in it finished (or was parked again) while it was
			// on its way.
			m.stale = time.Now()
			s.scheduleCompactionLocked()
		}
	}
	s.mu.Unlock()
	s.releaseCopies(before...)
	if !holds {
		s.settle(d)
	}
}

// releaseCopies lets go of checkpoint copies: a message is acked once no
// copy in it is needed; one that still carries needed copies is compacted
// soon (see WorkerStore).
func (s *WorkerStore) releaseCopies(copies ...heldCopy) {
	var done []*Delivery
	s.mu.Lock()
	for _, c := range copies {
		m, ok := s.shared[c.d]
		if !ok {
			done = append(done, c.d)
			continue
		}
		delete(m.needed, c.copyKey)
		if len(m.needed) == 0 {
			delete(s.shared, c.d)
			done = append(done, c.d)
			continue
		}
		if m.stale.IsZero() {
			m.stale = time.Now()
			s.scheduleCompactionLocked()
		}
	}
	s.mu.Unlock()
	s.settle(done...)
}

func (s *WorkerStore) scheduleCompactionLocked() {
	if s.compacting || s.closed {
		return
	}
	s.compacting = true
	time.AfterFunc(compactDelay, s.compact)
}

// compact parks again, in new messages, the needed copies of every shared
// message that has held a copy no longer needed for compactDelay; once
// they are confirmed the old message is acked (park settles older
// copies).
func (s *WorkerStore) compact() {
	now := time.Now()
	var ids []string
	var msgs []*sharedMessage
	s.mu.Lock()
	s.compacting = false
	later := false
	for d, m := range s.shared {
		if m.stale.IsZero() || m.compacting {
			continue
		}
		if now.Sub(m.stale) < compactDelay {
			later = true
			continue
		}
		m.compacting = true
		msgs = append(msgs, m)
		for k := range m.needed {
			if e := s.entries[k.id]; e != nil && !e.handback && e.checkpoints[k.seq] == d {
				ids = append(ids, k.id)
			}
		}
	}
	if later {
		s.scheduleCompactionLocked()
	}
	if s.closed || len(msgs) == 0 {
		s.mu.Unlock()
		return
	}
	s.bg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.bg.Done()
		if s.repark(s.ctx, ids) == 0 {
			return
		}
		// Some copies were not parked again: try later.
		s.mu.Lock()
		for _, m := range msgs {
			m.compacting, m.stale = false, time.Now()
		}
		s.scheduleCompactionLocked()
		s.mu.Unlock()
	}()
}

// repark parks the tasks ids again as they are, together (they leave in
// one message unless there are too many), and returns how many failed.
func (s *WorkerStore) repark(ctx context.Context, ids []string) (failed int) {
	slices.Sort(ids)
	var es []*entry
	var cs []parkedCopy
	for _, id := range slices.Compact(ids) {
		if e, c, ok := s.nextCopy(id, func(*TaskMessage) {}); ok {
			es, cs = append(es, e), append(cs, c)
		}
	}
	for i, err := range s.parker.parkAll(ctx, cs) {
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("parking a checkpoint again failed", "id", cs[i].m.Task.ID, "err", err)
			}
			failed++
			continue
		}
		s.parked(es[i], cs[i])
	}
	return failed
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
// once confirmed, acks every older copy held.
func (s *WorkerStore) park(ctx context.Context, id string, update func(*TaskMessage)) error {
	e, c, ok := s.nextCopy(id, update)
	if !ok {
		return nil
	}
	if err := s.parker.park(ctx, c); err != nil {
		return err
	}
	s.parked(e, c)
	return nil
}

// nextCopy numbers the next copy of task id; ok is false when the task is
// not held.
func (s *WorkerStore) nextCopy(id string, update func(*TaskMessage)) (*entry, parkedCopy, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[id]
	if !ok {
		return nil, parkedCopy{}, false
	}
	e.seq++
	c := parkedCopy{m: e.msg, seq: e.seq}
	update(&c.m)
	return e, c, true
}

// parked records that copy c of e is confirmed: it is now the broker's
// copy of the task, and every older one is let go.
func (s *WorkerStore) parked(e *entry, c parkedCopy) {
	s.mu.Lock()
	var tasks []*Delivery
	var old []heldCopy
	if c.seq > e.confirmed {
		e.confirmed, e.msg, e.parkedAt = c.seq, c.m, time.Now()
		tasks = e.deliveries
		e.deliveries = nil
		old = e.takeCopies(func(k int) bool { return k < c.seq })
	}
	s.mu.Unlock()
	s.settle(tasks...)
	s.releaseCopies(old...)
}

// takeCopies removes from e the checkpoint copies whose number which
// selects and returns them. Callers hold s.mu.
func (e *entry) takeCopies(which func(seq int) bool) []heldCopy {
	var out []heldCopy
	for k, d := range e.checkpoints {
		if which(k) {
			out = append(out, heldCopy{copyKey{e.msg.Task.ID, k}, d})
			delete(e.checkpoints, k)
		}
	}
	return out
}

// Enqueue implements captchaq.Store.
func (s *WorkerStore) Enqueue(ctx context.Context, tasks []captchaq.Task, now time.Time) ([]captchaq.Record, []bool, error) {
	return s.mem.Enqueue(ctx, tasks, now)
}

// Checkpoint implements captchaq.Store: the captcha id is on the broker
// before the task's delivery is acked.
func (s *WorkerStore) Checkpoint(ctx context.Context, id, captchaID string, attempt int, at time.Time) error {
	if err := s.mem.Checkpoint(ctx, id, captchaID, attempt, at); err != nil {
		return err
	}
	return s.park(ctx, id, func(m *TaskMessage) {
		m.CaptchaID, m.Attempts, m.Submitted = captchaID, attempt, at
	})
}

// Retry implements captchaq.Store. The queue keeps the task and retries it
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
	return s.park(ctx, id, func(m *TaskMessage) {
		m.CaptchaID, m.Submitted, m.Attempts = "", time.Time{}, attempts
		m.LastError, m.LastErrorCode = errText, errCode
	})
}

// Finish implements captchaq.Store: the result (and for a failure the dead
// letter) is confirmed on the broker before anything held is acked.
func (s *WorkerStore) Finish(ctx context.Context, r captchaq.Result) error {
	s.mu.Lock()
	e, ok := s.entries[r.ID]
	s.mu.Unlock()
	if ok && e.handback {
		return s.handBack(ctx, r.ID)
	}
	replyTo := ""
	if ok {
		replyTo = e.msg.ReplyTo
	}
	if err := s.pub.Reply(ctx, replyTo, r); err != nil {
		return err
	}
	if r.Status == captchaq.StatusFailed {
		m := TaskMessage{Task: captchaq.Task{ID: r.ID, Method: r.Method}}
		if ok {
			m = e.msg
		}
		m.CaptchaID, m.Attempts = "", r.Attempts
		m.LastError, m.LastErrorCode = r.Error, r.ErrorCode
		if err := s.pub.DeadLetter(ctx, m, deadReason(r)); err != nil {
			return err
		}
	}
	if err := s.mem.Finish(ctx, r); err != nil && !errors.Is(err, captchaq.ErrNotFound) {
		s.log.Warn("local finish failed", "id", r.ID, "err", err)
	}
	s.release(r.ID)
	return nil
}

// release forgets a finished task and acks everything held for it.
func (s *WorkerStore) release(id string) {
	s.mu.Lock()
	e, ok := s.entries[id]
	delete(s.entries, id)
	var tasks []*Delivery
	var copies []heldCopy
	if ok {
		tasks, copies = e.deliveries, e.takeCopies(func(int) bool { return true })
	}
	s.mu.Unlock()
	s.settle(tasks...)
	s.releaseCopies(copies...)
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
	var tasks []*Delivery
	if ok {
		confirmed, m, tasks = e.confirmed, e.msg, e.deliveries
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
	for _, d := range tasks {
		if err := d.Nack(true); err != nil && !errors.Is(err, ErrStaleDelivery) && !errors.Is(err, ErrSettled) {
			s.log.Warn("nack failed", "id", id, "err", err)
		}
	}
	s.mu.Lock()
	parked := e.takeCopies(func(int) bool { return true })
	s.mu.Unlock()
	s.releaseCopies(parked...)
	return nil
}

// refreshDue republishes every parked copy held longer than age, so the
// broker's consumer_timeout never closes the channel under it.
func (s *WorkerStore) refreshDue(ctx context.Context, age time.Duration) int {
	s.mu.Lock()
	var due []string
	now := time.Now()
	for id, e := range s.entries {
		if e.confirmed > 0 && !e.handback && now.Sub(e.parkedAt) >= age {
			due = append(due, id)
		}
	}
	s.mu.Unlock()
	return len(due) - s.repark(ctx, due)
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
		if e.confirmed > 0 && !e.handback {
			b.Parked++
		}
		if a := e.msg.Accepted; !a.IsZero() && (b.OldestHeld.IsZero() || a.Before(b.OldestHeld)) {
			b.OldestHeld = a
		}
	}
	return b
}

// Pending implements captchaq.Store.
func (s *WorkerStore) Pending(ctx context.Context, fn func(captchaq.Record) error) error {
	return s.mem.Pending(ctx, fn)
}

// Get implements captchaq.Store.
func (s *WorkerStore) Get(ctx context.Context, id string) (captchaq.Record, error) {
	return s.mem.Get(ctx, id)
}

// Results implements captchaq.Store.
func (s *WorkerStore) Results(ctx context.Context, fn func(captchaq.Result) error) error {
	return s.mem.Results(ctx, fn)
}

// DeadLetters implements captchaq.Store for the local ones; the fleet's
// are in the dead-letter queue (Conn.DeadLetters).
func (s *WorkerStore) DeadLetters(ctx context.Context, f captchaq.DeadLetterFilter, fn func(captchaq.Record) error) error {
	return s.mem.DeadLetters(ctx, f, fn)
}

// Replay is refused: dead letters are replayed from the dead-letter queue
// (Conn.Replay), where every worker's end up.
func (s *WorkerStore) Replay(context.Context, captchaq.DeadLetterFilter, time.Time) (int, error) {
	return 0, errors.New("amqp: replay dead letters from the broker (captchaq dlq --amqp ... replay)")
}

// Prune implements captchaq.Store.
func (s *WorkerStore) Prune(ctx context.Context, finishedBefore time.Time) (int, error) {
	return s.mem.Prune(ctx, finishedBefore)
}

// Close implements captchaq.Store.
func (s *WorkerStore) Close() error { return s.mem.Close() }
