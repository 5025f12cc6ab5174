package captchaq_test

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/sim"
)

// fixedPool is a ThreadPool whose held threads the test sets.
type fixedPool struct {
	mu            sync.Mutex
	held          int
	busy, waiting int
	ready         chan struct{}
}

func (p *fixedPool) Want(busy, waiting int) {
	p.mu.Lock()
	p.busy, p.waiting = busy, waiting
	p.mu.Unlock()
}

func (p *fixedPool) Held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

func (p *fixedPool) Ready() <-chan struct{} { return p.ready }

func (p *fixedPool) set(held int) {
	p.mu.Lock()
	p.held = held
	p.mu.Unlock()
	// A wake, as the queue's own: it never blocks (a send the dispatcher
	// never took would hang the test), and one pending wake is enough.
	select {
	case p.ready <- struct{}{}:
	default:
	}
}

func (p *fixedPool) demand() (busy, waiting int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.busy, p.waiting
}

// TestThreadPoolBoundsSubmits: with a ThreadPool the queue submits only on
// the threads the pool holds for it, tells the pool its demand, and goes
// on when the pool holds more. The clock is synctest's: both threads the
// pool gives are taken before the first solve ends, however slow the
// machine.
func TestThreadPoolBoundsSubmits(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		pool := &fixedPool{ready: make(chan struct{}, 1)}
		b := setupInProcess(t, sim.Config{Threads: 10, Latency: fastLatency(50 * time.Millisecond)},
			captchaq.Config{Threads: 10, ThreadPool: pool})
		b.start(t)
		fs := submitAll(t, b.q, task("p0", 5), task("p1", 5), task("p2", 5), task("p3", 5), task("p4", 5), task("p5", 5))
		eventually(t, "the pool told of six waiting tasks", func() bool {
			busy, waiting := pool.demand()
			return busy == 0 && waiting == 6
		})
		if n := b.srv.Stats().Calls.Submit; n != 0 {
			t.Fatalf("%d submits while the pool held no thread, want 0", n)
		}
		pool.set(2)
		rs := waitAll(t, fs)
		if st := statuses(rs); st[captchaq.StatusSolved] != 6 {
			t.Fatalf("statuses %v, want 6 solved", st)
		}
		if peak := b.srv.Stats().PeakThreadsInUse; peak != 2 {
			t.Errorf("peak threads in use at the provider %d, want the pool's 2", peak)
		}
		eventually(t, "the pool told the queue is idle", func() bool {
			busy, waiting := pool.demand()
			return busy == 0 && waiting == 0
		})
	})
}
