package captchaq_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/sim"
)

// fixedPool is a ThreadPool whose held threads the test sets. Its ready
// channel holds one signal, as the real pools' do: set does not wait, so
// an unbuffered channel lost the signal whenever the dispatcher was busy
// at that moment (TestProviderThreadPools: "0 of 6 results after 60 s"
// in a fresh-clone CI run beside two busy loops).
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
			captchaq.Config{Threads: 10}, testFleet{pools: map[string]captchaq.ThreadPool{"": pool}})
		b.start(t)
		fs := submitAll(t, b.q, task("p0", 5), task("p1", 5), task("p2", 5), task("p3", 5), task("p4", 5), task("p5", 5))
		testbound.Until(t, "the pool told of six waiting tasks", func() bool {
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
		testbound.Until(t, "the pool told the queue is idle", func() bool {
			busy, waiting := pool.demand()
			return busy == 0 && waiting == 0
		})
	})
}

// TestProviderThreadPools: with several providers each has its own
// ThreadPool; a provider submits only on the threads its pool holds, and
// its pool hears only of the tasks routing would give it (the hCaptcha
// tasks, which only the backup solves, are no demand on the main pool).
// Main's solves take 200 ms: its first Turnstile submit goes alone (a type
// not yet taken there), and the second must find it still solving.
func TestProviderThreadPools(t *testing.T) {
	t.Parallel()
	mainPool := &fixedPool{ready: make(chan struct{}, 1)}
	backupPool := &fixedPool{ready: make(chan struct{}, 1)}
	p := setupFleetLanes(t, sim.Config{Threads: 5, Latency: fastLatency(200 * time.Millisecond)}, sim.Config{Threads: 5, PricePer1000: 2.99},
		captchaq.ProviderConfig{Threads: 5},
		captchaq.ProviderConfig{Threads: 5, SpillAfter: time.Hour},
		testFleet{pools: map[string]captchaq.ThreadPool{"main": mainPool, "backup": backupPool}})
	for i := range 3 {
		for _, tk := range []captchaq.Task{task(fmt.Sprintf("t%d", i), 0), hcaptchaTask(fmt.Sprintf("h%d", i))} {
			if _, err := p.q.Submit(context.Background(), tk); err != nil {
				t.Fatal(err)
			}
		}
	}
	testbound.Until(t, "each pool told of its own waiting tasks", func() bool {
		mb, mw := mainPool.demand()
		bb, bw := backupPool.demand()
		return mb == 0 && mw == 3 && bb == 0 && bw == 3
	})
	if n := p.main.Stats().Calls.Submit + p.backup.Stats().Calls.Submit; n != 0 {
		t.Fatalf("%d submits while no pool held a thread, want 0", n)
	}
	backupPool.set(1)
	mainPool.set(2)
	rs := p.collect(t, 6)
	for id, r := range rs {
		want := "main"
		if strings.HasPrefix(id, "h") {
			want = "backup"
		}
		if r.Status != captchaq.StatusSolved || r.Provider != want {
			t.Errorf("%s: %s at %q, want solved at %q", id, r.Status, r.Provider, want)
		}
	}
	if peak := p.main.Stats().PeakThreadsInUse; peak != 2 {
		t.Errorf("main's peak threads %d, want its pool's 2", peak)
	}
	if peak := p.backup.Stats().PeakThreadsInUse; peak != 1 {
		t.Errorf("backup's peak threads %d, want its pool's 1", peak)
	}
}
