package amqp

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
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
