// Package startstop runs captchaq's background goroutines, in two shapes.
//
// # Loops
//
// A loop is a function of a context, run on its own goroutine by a Loop
// between Start and Stop, that returns when its context ends. Every
// background loop of the module is one: the queue's dispatcher and its
// pollers; the amqp Conn's reconnect watcher and each Consumer's channel
// loop; the amqp worker's refresher, beater, stale sweeper, report
// forwarder and thread pool; the amqp gateway's result receiver and
// balance listener; the SQLite store's writer, checkpointer and pruner;
// the server's history sampler; the simulator's timer; the batch
// command's progress reports. A periodic loop's body is Every (run now,
// then every period) or Tick (every period, the first a period after the
// start); a loop that waits on its own timer or channels selects on its
// context's Done.
//
// A loop's run function must not call Start or Stop on its own Loop. Its
// owner stops its loops in one order and only then releases what they
// use. Each owner writes that order down in one place: the root package
// doc ("Loops and shutdown") for a Queue; the amqp package doc ("A
// worker's loops and its shutdown") for a Worker, and Gateway.Shutdown;
// the store/sqlite package doc ("Background loops and Close"); the
// server's Server.Shutdown; the simulator's Server.Close.
//
// # Pools
//
// A Pool is a bounded fan-out, not a loop: its owner hands it functions
// (the poller's chunks of a round, provider.Client's one-by-one polls,
// the gateway's reply handlers), it runs at most n at once, and Wait
// waits for them. Nothing is stopped: each function ends when its work
// or its context does.
//
// Some goroutines are neither, and stay as they are; each is waited for
// by its owner, through a WaitGroup or a done channel:
//   - worker pools with a queue and a drain policy of their own: the
//     server's pingback senders (per client, a bounded backlog, drained
//     until Shutdown's context ends, then abandoned) and the simulator's
//     (one unbounded queue, dropped and cancelled at Close). Their queues
//     differ on purpose, so they share no type; each is a fixed number of
//     goroutines taking from its queue. StreamFunc's intake is the same
//     shape over its caller's channel.
//   - goroutines that end when the channel they drain closes: the amqp
//     acker (one a channel, over its acks), a Consumer's per-queue
//     forwarders, the worker's checkpoint and claim drains, Stream's
//     intake (or when its ctx ends).
//   - one goroutine per unit of work, bounded by what admits the work: the
//     dispatcher's submits (by threads), result writes and probes of a
//     down provider, all on the queue's WaitGroup, which the queue waits
//     for after its loops.
//   - the commands' own goroutines (the signal relay, HTTP servers,
//     loadtest's clients, enqueue's confirmer), which live as long as
//     the command's run.
package startstop

import (
	"context"
	"sync"
	"time"
)

// Loop runs one function on its own goroutine between Start and Stop. It
// is safe for concurrent use, and may be started again after Stop.
type Loop struct {
	run func(ctx context.Context)

	mu      sync.Mutex
	cancel  context.CancelFunc // nil when not running or stopping
	stopped chan struct{}      // closed when the last run returned; nil before the first
}

// New returns a Loop that runs run; run must return once its ctx ends.
func New(run func(ctx context.Context)) *Loop { return &Loop{run: run} }

// Start runs the loop on a new goroutine with a context that ends at Stop
// or when ctx ends, and returns at once. A Loop already running is left
// as it is; one still stopping is waited for first. Start returns
// ctx.Err(), and starts nothing, when ctx has already ended.
func (l *Loop) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped != nil {
		if l.cancel != nil && !closed(l.stopped) {
			return nil // running
		}
		<-l.stopped // stopping: a new run must not overlap the last
	}
	runCtx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	l.cancel, l.stopped = cancel, stopped
	go func() {
		defer close(stopped)
		defer cancel()
		l.run(runCtx)
	}()
	return nil
}

// Stop ends the loop's context and returns once its function has
// returned. Stop on a Loop that is not running returns at once; calls at
// the same time all wait.
func (l *Loop) Stop() {
	l.mu.Lock()
	cancel, stopped := l.cancel, l.stopped
	l.cancel = nil
	l.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	if stopped != nil {
		<-stopped
	}
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Every calls f at once and then every d until ctx ends: the body of a
// periodic loop's run function. A call of f that outlasts d is followed
// by the next at once, not by a backlog.
func Every(ctx context.Context, d time.Duration, f func(context.Context)) {
	periodic(ctx, d, true, f)
}

// Tick is Every without the call at once: it calls f every d, the first
// time d after it is called (as time.Tick's first tick), until ctx ends.
// It is the body of a loop with nothing to do at its start.
func Tick(ctx context.Context, d time.Duration, f func(context.Context)) {
	periodic(ctx, d, false, f)
}

func periodic(ctx context.Context, d time.Duration, now bool, f func(context.Context)) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	if now {
		f(ctx)
	}
	for {
		select {
		case <-tick.C:
			f(ctx)
		case <-ctx.Done():
			return
		}
	}
}

// Pool runs functions on goroutines of their own, at most n at once: the
// shape of a bounded fan-out (see the package doc). It has no Stop: each
// function ends on its own, as its context or its work says, and Wait
// waits for them all. A Pool is for one owner goroutine calling Go, GoCtx
// and Wait.
type Pool struct {
	slots chan struct{}
	wg    sync.WaitGroup
}

// NewPool returns a Pool of n goroutines at most; n must be at least 1.
func NewPool(n int) *Pool { return &Pool{slots: make(chan struct{}, n)} }

// Go waits until fewer than n functions run, then runs f on a new
// goroutine and returns.
func (p *Pool) Go(f func()) {
	p.slots <- struct{}{}
	p.start(f)
}

// GoCtx is Go that gives up once ctx has ended, waiting for a slot or
// not: it then runs nothing and returns false.
func (p *Pool) GoCtx(ctx context.Context, f func()) bool {
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	if ctx.Err() != nil {
		<-p.slots
		return false
	}
	p.start(f)
	return true
}

func (p *Pool) start(f func()) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer func() { <-p.slots }()
		f()
	}()
}

// Wait returns once every function started has returned.
func (p *Pool) Wait() { p.wg.Wait() }
