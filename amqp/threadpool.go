package amqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// Timing of the thread pool (see "Threads: one plan for the fleet" in the
// package doc).
const (
	// threadsLinger is how long a worker keeps threads it no longer needs
	// before it gives them back, so a task that arrives right after
	// another finished reuses its thread without a broker round trip.
	threadsLinger = 200 * time.Millisecond
	// threadsRefresh is how often a worker reads the token queue's depth
	// and consumers, to compute its fair share, while the readings stay
	// the same.
	threadsRefresh = time.Second
	// threadsRefreshSoon is the wait before the next reading after one
	// that changed; it doubles back to threadsRefresh while the readings
	// stay the same (see poolSession.record).
	threadsRefreshSoon = 100 * time.Millisecond
	// threadsTick is the pool loop's clock for lingers and refreshes.
	threadsTick = 50 * time.Millisecond
	// threadsLockWait bounds the wait for another worker's fill.
	threadsLockWait = 30 * time.Second
	// threadsAdoptWindow is how long a dead holder's token waits in
	// ThreadsReturning for the worker that adopts one of its tasks at
	// the provider to take it over (see Returning in the package doc).
	// The broker lets go of a dead worker's checkpoints and tokens in
	// the same moment, and adoption takes milliseconds; the tokens of its
	// tasks not at the provider come back to the fleet after the window.
	threadsAdoptWindow = 3 * time.Second
)

// threadsQueueArgs are the token queue's arguments: it never holds more
// than n ready tokens, whoever publishes.
func threadsQueueArgs(n int) amqp091.Table {
	return amqp091.Table{
		"x-queue-type": "classic",
		"x-max-length": int32(n),
		"x-overflow":   "reject-publish",
	}
}

// threadsReturningArgs are the arguments of the queue where a dead
// holder's tokens wait (each with its own expiration) before they go back
// to the token queue.
func threadsReturningArgs(names ThreadsNames) amqp091.Table {
	return amqp091.Table{
		"x-queue-type":              "classic",
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": names.Tokens,
	}
}

// DeclareThreads declares the fleet's thread pool of n threads (the
// plan's), now and after every reconnect, and fills it with n tokens if
// no worker has yet. Every worker on the prefix must give the same n: a
// pool declared with another n is a *ConflictError naming x-max-length.
func (c *Conn) DeclareThreads(ctx context.Context, n int) error {
	return c.declareThreadsAt(ctx, c.Names().PlanThreads(), n, "--threads (the plan's)")
}

// declareThreadsAt declares the thread pool of n threads whose queues
// are names, as DeclareThreads does; same names what every worker must
// give alike, for the conflict's message.
func (c *Conn) declareThreadsAt(ctx context.Context, names ThreadsNames, n int, same string) error {
	if n < 1 {
		return fmt.Errorf("amqp: threads %d: must be at least 1", n)
	}
	return c.declareQueue(ctx, names.Tokens, func(conn *amqp091.Connection) error {
		return declareThreads(conn, c.cfg, names, n, same)
	})
}

// declareThreads declares the token queue and fills it once.
func declareThreads(conn *amqp091.Connection, c Config, names ThreadsNames, n int, same string) error {
	d := &declarer{conn: conn}
	defer d.close()
	d.do("queue", names.Tokens, func(ch *amqp091.Channel) error {
		_, err := ch.QueueDeclare(names.Tokens, true, false, false, false, threadsQueueArgs(n))
		return err
	})
	d.do("queue", names.Returning, func(ch *amqp091.Channel) error {
		_, err := ch.QueueDeclare(names.Returning, true, false, false, false, threadsReturningArgs(names))
		return err
	})
	if err := errors.Join(d.errs...); err != nil {
		if errors.Is(err, ErrTopologyConflict) {
			return fmt.Errorf("%w; every worker on prefix %s must be started with the same %s", err, c.Prefix, same)
		}
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), threadsLockWait)
	defer cancel()
	return fillThreads(ctx, conn, names, n)
}

// fillThreads publishes the pool's tokens unless the marker queue says a
// worker did. It runs under the lock queue (an exclusive queue: one
// connection at a time may declare it, and the broker deletes it when
// that connection dies), so two workers starting together do not both
// fill; the tokens go in one transaction, so a fill is whole or absent.
func fillThreads(ctx context.Context, conn *amqp091.Connection, names ThreadsNames, n int) error {
	unlock, err := lockQueue(ctx, conn, names.Lock, "filling the thread pool")
	if err != nil {
		return err
	}
	defer unlock()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("amqp: open channel: %w", err)
	}
	if _, err := ch.QueueDeclarePassive(names.Filled, true, false, false, false, nil); err == nil {
		_ = ch.Close()
		return nil // filled before
	} else if !isCode(err, amqp091.NotFound) {
		return fmt.Errorf("amqp: inspect queue %s: %w", names.Filled, err)
	}
	// The failed passive declare closed that channel.
	if ch, err = conn.Channel(); err != nil {
		return fmt.Errorf("amqp: open channel: %w", err)
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(names.Tokens, true, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("amqp: inspect queue %s: %w", names.Tokens, err)
	}
	// A fill committed by a worker that died before its marker left its
	// tokens ready (nobody consumes before the marker): top up only.
	if err := ch.Tx(); err != nil {
		return fmt.Errorf("amqp: fill %s: %w", names.Tokens, err)
	}
	for range n - q.Messages {
		err := ch.PublishWithContext(ctx, "", names.Tokens, false, false, amqp091.Publishing{
			DeliveryMode: amqp091.Persistent, Type: "thread",
		})
		if err != nil {
			return fmt.Errorf("amqp: fill %s: %w", names.Tokens, err)
		}
	}
	if err := ch.TxCommit(); err != nil {
		return fmt.Errorf("amqp: fill %s: %w", names.Tokens, err)
	}
	if _, err := ch.QueueDeclare(names.Filled, true, false, false, false, amqp091.Table{"x-queue-type": "classic"}); err != nil {
		return fmt.Errorf("amqp: declare queue %s: %w", names.Filled, err)
	}
	return nil
}

// lockQueue declares the exclusive queue name, waiting while another
// connection holds it (doing what the error then says), and returns the
// function that deletes it.
func lockQueue(ctx context.Context, conn *amqp091.Connection, name, doing string) (unlock func(), err error) {
	for {
		ch, err := conn.Channel()
		if err != nil {
			return nil, fmt.Errorf("amqp: open channel: %w", err)
		}
		_, err = ch.QueueDeclare(name, false, true, true, false, nil)
		if err == nil {
			return func() {
				_, _ = ch.QueueDelete(name, false, false, false)
				_ = ch.Close()
			}, nil
		}
		if !isCode(err, amqp091.ResourceLocked) {
			return nil, fmt.Errorf("amqp: declare lock queue %s: %w", name, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("amqp: another worker holds %s (%s): %w", name, doing, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func isCode(err error, code int) bool {
	var ae *amqp091.Error
	return errors.As(err, &ae) && ae.Code == code
}

// threadPool is a worker's share of the fleet's threads: the unacked
// tokens it holds on its own channel. It implements captchaq.ThreadPool.
type threadPool struct {
	c     *Conn
	n     int
	names ThreadsNames // its queues
	log   *slog.Logger
	// window is how long a dead holder's token waits for a takeover
	// (threadsAdoptWindow).
	window time.Duration
	ready  chan struct{} // Held grew
	wake   chan struct{} // demand changed
	// taken counts token deliveries, returned the tokens given back,
	// parked the tokens of a dead holder sent to wait in ThreadsReturning,
	// tookOver those taken from there for an adopted task: the broker's
	// work for the pool (see the package doc).
	taken, returned, parked, tookOver atomic.Int64

	mu            sync.Mutex
	busy, waiting int
	pinned        int // what Held returned since the last Want, -1 if not read: give nothing back below it
	held          int // tokens held
	live          int // of them, tokens taken over whose parked window has not ended: not the queue's to use
	limit         int // tokens the queue may use: the target (a fair share may be below held)
	fleetInUse    int // plan minus ready tokens at the last refresh; -1 unknown
	takeovers     int // adopted tasks at the provider whose token to look for in ThreadsReturning
}

func newThreadPool(c *Conn, names ThreadsNames, n int, log *slog.Logger) *threadPool {
	return &threadPool{c: c, n: n, names: names, log: log, window: threadsAdoptWindow, ready: make(chan struct{}, 1), wake: make(chan struct{}, 1),
		pinned: -1, limit: n, fleetInUse: -1}
}

// Want implements captchaq.ThreadPool.
func (p *threadPool) Want(busy, waiting int) {
	p.mu.Lock()
	changed := busy != p.busy || waiting != p.waiting
	p.busy, p.waiting, p.pinned = busy, waiting, -1
	p.mu.Unlock()
	if changed {
		wakeUp(p.wake)
	}
}

// Held implements captchaq.ThreadPool.
func (p *threadPool) Held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := max(min(p.held-p.live, p.limit), 0)
	p.pinned = max(p.pinned, h)
	return h
}

// takeOver says that the worker adopts a dead holder's task at the
// provider: its next token comes from ThreadsReturning, where the dead
// holder's tokens wait, if one is there (see Returning).
//
// The adopted task is busy from now on: the queue counts it among its
// threads in use as it adopts it, but tells the pool (Want) only at its
// next dispatch, and a pool that went by the last Want would give back
// the token its task holds at the provider, for another worker to submit
// on (seen as 7 solves at once on a 6-thread plan). The next Want brings
// the count back to the queue's own.
func (p *threadPool) takeOver() {
	p.mu.Lock()
	p.takeovers++
	p.busy++
	p.mu.Unlock()
	wakeUp(p.wake)
}

// takeovers returns and clears the pending takeovers.
func (p *threadPool) pendingTakeovers() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.takeovers
	p.takeovers = 0
	return n
}

// Ready implements captchaq.ThreadPool.
func (p *threadPool) Ready() <-chan struct{} { return p.ready }

// Threads reports the worker's held tokens, the plan, and the fleet's
// threads in use (plan minus ready tokens, as of the last refresh; -1
// before the first).
func (p *threadPool) Threads() (held, plan, fleetInUse int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held, p.n, p.fleetInUse
}

func wakeUp(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// setHeld records the tokens held and the queue's limit on them.
func (p *threadPool) setHeld(n, limit int) {
	p.mu.Lock()
	grew := min(n-p.live, limit) > min(p.held-p.live, p.limit)
	p.held, p.limit = n, limit
	p.mu.Unlock()
	if grew {
		wakeUp(p.ready)
	}
}

// setLive records how many held tokens are taken over and still within
// their parked window (see poolSession.parkedUntil).
func (p *threadPool) setLive(n int) {
	p.mu.Lock()
	grew := n < p.live
	p.live = n
	p.mu.Unlock()
	if grew {
		wakeUp(p.ready)
	}
}

// release lowers what Held returns to keep, before the tokens beyond it
// go back, unless the queue may use more already: the busy threads of the
// last Want, and what Held returned since. It returns the tokens to keep.
// Read and lowered under one lock, no Held between a demand and a give
// back hands out a token that goes back (TestGiveBackKeepsWhatHeldHandedOut).
func (p *threadPool) release(keep, held int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	keep = max(keep, min(max(p.busy, p.pinned), held))
	p.held = min(p.held, keep)
	return keep
}

// demand is the last Want, and the least number of tokens the pool may
// keep: the busy ones, and at least what Held returned since.
func (p *threadPool) demand(held int) (want, floor int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.busy + p.waiting, min(max(p.busy, p.pinned), held)
}

// run holds tokens until ctx ends, on one channel at a time; when a
// channel dies, the broker has requeued its tokens, and run opens another.
// Closing the channel at the end returns every token at once.
func (p *threadPool) run(ctx context.Context) {
	backoff := p.c.cfg.ReconnectMin
	for {
		started := time.Now()
		err := p.session(ctx)
		if ctx.Err() != nil {
			return
		}
		p.log.Warn("thread pool channel ended; its threads went back to the fleet", "err", err)
		if time.Since(started) > time.Minute {
			backoff = p.c.cfg.ReconnectMin
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(jitter(backoff)):
		}
		backoff = min(backoff*2, p.c.cfg.ReconnectMax)
	}
}

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
