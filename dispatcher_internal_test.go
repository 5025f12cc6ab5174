package captchaq

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/provider"
)

// passCounter is a ThreadPool that holds a fixed number of threads and
// counts Want calls: the dispatcher makes one per pass.
type passCounter struct {
	held   int
	mu     sync.Mutex
	passes int
}

func (p *passCounter) Want(int, int) {
	p.mu.Lock()
	p.passes++
	p.mu.Unlock()
}

func (p *passCounter) Held() int              { return p.held }
func (p *passCounter) Ready() <-chan struct{} { return nil }

func (p *passCounter) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.passes
}

// A retry whose wait has ended while every thread is busy waits for a
// thread to free up: the dispatcher sleeps until then instead of passing
// again every millisecond. The clock is synctest's: the count of passes
// does not depend on the machine's speed.
func TestDispatcherSleepsWhileDueRetryWaitsForThread(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		m := &modelProvider{threads: 1, seed: 1, tasks: map[string]*modelTask{},
			lat: map[provider.Kind][2]time.Duration{provider.KindTurnstile: {10 * time.Second, 10 * time.Second}}}
		pool := &passCounter{held: 1}
		cfg := Config{PollInterval: time.Second, Provider: m, Threads: m.threads}
		q, err := NewFleetQueue(cfg, poolFleet{"": pool})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { q.Close() })
		turnstile := func(id string) Task {
			return Task{ID: id, Method: "turnstile", Params: map[string]string{"sitekey": "0x4AAAAAAAC3DHQFLr1GavRN", "pageurl": "https://a.example/" + id}}
		}
		busy, err := q.Submit(t.Context(), turnstile("busy"))
		if err != nil {
			t.Fatal(err)
		}
		// A retry due in one second; the one thread is busy for ten.
		retry, err := q.Adopt(t.Context(), Record{Task: turnstile("retry"), Status: StatusQueued, Attempts: 1, NotBefore: time.Now().Add(time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		before := pool.count()
		testbound.Advance(5 * time.Second)
		// One pass when the retry's wait ends; none after it while the
		// thread stays busy.
		if n := pool.count() - before; n != 1 {
			t.Fatalf("%d dispatch passes in 5 s while the only thread was busy, want 1", n)
		}
		for _, f := range []*Future{busy, retry} {
			if r, err := f.Wait(testbound.Context(t)); err != nil || r.Status != StatusSolved {
				t.Fatalf("%s: %+v, %v", f.ID(), r, err)
			}
		}
	})
}

// grantingPool is a ThreadPool that holds whatever is wanted, up to n,
// as a fleet's pool with threads to spare does.
type grantingPool struct {
	n     int
	mu    sync.Mutex
	held  int
	ready chan struct{}
}

func (p *grantingPool) Want(busy, waiting int) {
	p.mu.Lock()
	grew := min(busy+waiting, p.n) > p.held
	p.held = max(p.held, min(busy+waiting, p.n))
	p.mu.Unlock()
	if grew {
		select {
		case p.ready <- struct{}{}:
		default:
		}
	}
}

func (p *grantingPool) Held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

func (p *grantingPool) Ready() <-chan struct{} { return p.ready }

// A task waiting for the first provider spills over to a later one with a
// pool at its spill_after, though the later provider's pool holds no
// thread until then: the dispatcher wakes at that time, the pool is asked
// for a thread and the task goes. The clock is synctest's.
func TestSpillToAPooledProviderAtSpillAfter(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		lat := map[provider.Kind][2]time.Duration{provider.KindTurnstile: {20 * time.Second, 20 * time.Second}}
		mainP := &modelProvider{threads: 1, seed: 1, tasks: map[string]*modelTask{}, lat: lat}
		backupP := &modelProvider{threads: 5, seed: 2, tasks: map[string]*modelTask{}, lat: lat}
		q, err := NewFleetQueue(Config{PollInterval: time.Second, Providers: []ProviderConfig{
			{Name: "main", Provider: mainP, Threads: 1, Methods: []string{"turnstile"}},
			{Name: "backup", Provider: backupP, Threads: 5, Methods: []string{"turnstile"}, SpillAfter: 2 * time.Second},
		}}, poolFleet{"main": &passCounter{held: 1}, "backup": &grantingPool{n: 5, ready: make(chan struct{}, 1)}})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		for _, id := range []string{"a", "b"} {
			if _, err := q.Submit(t.Context(), Task{ID: id, Method: "turnstile", Params: map[string]string{"sitekey": "0x4AAAAAAAC3DHQFLr1GavRN", "pageurl": "https://a.example/" + id}}); err != nil {
				t.Fatal(err)
			}
		}
		submits := func(m *modelProvider) int {
			m.mu.Lock()
			defer m.mu.Unlock()
			return m.submits
		}
		synctest.Wait()
		if a, b := submits(mainP), submits(backupP); a != 1 || b != 0 {
			t.Fatalf("at once: %d submits at main, %d at the backup; want 1 and 0", a, b)
		}
		testbound.Advance(3 * time.Second)
		if a, b := submits(mainP), submits(backupP); a != 1 || b != 1 {
			t.Fatalf("after the backup's spill_after: %d submits at main, %d at the backup; want 1 and 1", a, b)
		}
	})
}

// poolFleet is a Fleet that admits every task and shares the named
// providers' threads with the pools it maps them to.
type poolFleet map[string]ThreadPool

func (poolFleet) Admit(string) bool { return true }

func (f poolFleet) Threads(name string) ThreadPool { return f[name] }

func (poolFleet) Journal() Journal { return nil }
