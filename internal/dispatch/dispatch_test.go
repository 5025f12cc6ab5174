package dispatch

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/captchaq/captchaq/internal/lane"
	"github.com/captchaq/captchaq/internal/sched"
	"github.com/captchaq/captchaq/internal/testbound"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestConcurrency(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ threads, want int }{
		{1, 1}, {5, 5}, {8, 8}, {20, 8}, {512, 8}, {640, 10}, {5000, 78},
	} {
		if got := Concurrency(c.threads); got != c.want {
			t.Errorf("Concurrency(%d) = %d, want %d", c.threads, got, c.want)
		}
	}
}

// pool is a lane.Pool that holds a fixed number of threads and records
// what it was told.
type pool struct {
	held  int
	ready chan struct{}

	mu    sync.Mutex
	wants [][2]int
}

func (p *pool) Want(busy, waiting int) {
	p.mu.Lock()
	p.wants = append(p.wants, [2]int{busy, waiting})
	p.mu.Unlock()
}
func (p *pool) Held() int              { return p.held }
func (p *pool) Ready() <-chan struct{} { return p.ready }

// waitingOf is a scheduler holding ids in order, each its own value.
func waitingOf(ids ...string) *sched.Scheduler[string] {
	s := sched.New[string](sched.Config{})
	for i, id := range ids {
		s.Push(sched.Item[string]{ID: id, Value: id, Seq: int64(i), Enqueued: t0}, t0)
	}
	return s
}

// anyLane routes every task to every lane, at a price of 1 at lane 0 and
// 2 at the others.
var anyLane = Tasks[string]{
	Route: func(*lane.Lane, string, time.Time) (bool, time.Time) { return true, time.Time{} },
	Price: func(l *lane.Lane, _ string) float64 { return float64(min(l.Index(), 1) + 1) },
}

// launched renders launches as "task@lane:price".
func launched(ls []Launch[string]) string {
	var out []string
	for _, l := range ls {
		out = append(out, fmt.Sprintf("%s@%d:%g", l.Value, l.Lane.Index(), l.Price))
	}
	return strings.Join(out, " ")
}

// soonestOf collects the times Fill or Demands tell.
type soonestOf struct{ times []time.Time }

func (s *soonestOf) tell(t time.Time) {
	if !t.IsZero() {
		s.times = append(s.times, t)
	}
}

// The first lane's threads are taken before a task goes to the next one,
// each taken task counts as a submit in progress at its lane, and what no
// lane has a thread for stays waiting.
func TestFillTakesLanesInOrder(t *testing.T) {
	t.Parallel()
	lanes := []*lane.Lane{lane.New(lane.Config{Index: 0, Threads: 2}), lane.New(lane.Config{Index: 1, Threads: 3})}
	waiting := waitingOf("a", "b", "c", "d", "e", "f")
	var soonest soonestOf
	got := launched(Fill(lanes, waiting, t0, anyLane, soonest.tell))
	if want := "a@0:1 b@0:1 c@1:2 d@1:2 e@1:2"; got != want {
		t.Errorf("Fill launched %q, want %q", got, want)
	}
	if waiting.Len() != 1 || !waiting.Has("f") {
		t.Errorf("waiting after Fill: %d tasks, f among them %v; want f alone", waiting.Len(), waiting.Has("f"))
	}
	for i, want := range []int{2, 3} {
		if got := lanes[i].Ledger.Submits(); got != want {
			t.Errorf("lane %d: %d submits in progress, want %d", i, got, want)
		}
		if got := lanes[i].Limiter.InUse(); got != want {
			t.Errorf("lane %d: %d threads in use, want %d", i, got, want)
		}
	}
	if len(soonest.times) != 0 {
		t.Errorf("Fill told soonest %v; nothing waits for a time", soonest.times)
	}
}

// A lane takes no more submits at once than Concurrency allows, whatever
// its threads, and the count it stops at is the one in progress: ended
// submits make room for the next Fill.
func TestFillStopsAtConcurrency(t *testing.T) {
	t.Parallel()
	l := lane.New(lane.Config{Threads: 20})
	lanes := []*lane.Lane{l}
	waiting := waitingOf("a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l")
	first := Fill(lanes, waiting, t0, anyLane, func(time.Time) {})
	if len(first) != 8 || waiting.Len() != 4 {
		t.Fatalf("first Fill launched %d with %d left waiting, want 8 (Concurrency(20)) and 4", len(first), waiting.Len())
	}
	l.Ledger.EndSubmit(first[0].Price)
	l.Ledger.EndSubmit(first[1].Price)
	if got := launched(Fill(lanes, waiting, t0, anyLane, func(time.Time) {})); got != "i@0:1 j@0:1" {
		t.Errorf("second Fill, two submits ended, launched %q, want %q", got, "i@0:1 j@0:1")
	}
	if got := l.Limiter.InUse(); got != 10 {
		t.Errorf("%d threads in use, want 10 (a thread stays taken when its submit ends)", got)
	}
}

// A lane whose submits are held takes nothing and tells when the hold
// ends; the next lane takes the tasks meanwhile.
func TestFillSkipsAHeldLane(t *testing.T) {
	t.Parallel()
	lanes := []*lane.Lane{lane.New(lane.Config{Index: 0, Threads: 5}), lane.New(lane.Config{Index: 1, Threads: 1})}
	until := t0.Add(3 * time.Second)
	lanes[0].Health.HoldSubmits(until)
	waiting := waitingOf("a", "b")
	var soonest soonestOf
	if got := launched(Fill(lanes, waiting, t0, anyLane, soonest.tell)); got != "a@1:2" {
		t.Errorf("Fill launched %q, want %q", got, "a@1:2")
	}
	if !slices.Equal(soonest.times, []time.Time{until}) {
		t.Errorf("Fill told soonest %v, want the hold's end %v", soonest.times, until)
	}
	if lanes[0].Limiter.InUse() != 0 {
		t.Errorf("the held lane has %d threads in use, want 0", lanes[0].Limiter.InUse())
	}
}

// A task no lane may take yet stays waiting, the thread taken to try is
// given back, and the task's retry time is told.
func TestFillGivesBackTheThreadOfARefusal(t *testing.T) {
	t.Parallel()
	l := lane.New(lane.Config{Threads: 4})
	retry := t0.Add(time.Minute)
	later := Tasks[string]{
		Route: func(*lane.Lane, string, time.Time) (bool, time.Time) { return false, retry },
		Price: anyLane.Price,
	}
	waiting := waitingOf("a")
	var soonest soonestOf
	if got := Fill([]*lane.Lane{l}, waiting, t0, later, soonest.tell); len(got) != 0 {
		t.Errorf("Fill launched %q, want nothing", launched(got))
	}
	if l.Limiter.InUse() != 0 || l.Ledger.Submits() != 0 || waiting.Len() != 1 {
		t.Errorf("after a refusal: %d threads in use, %d submits, %d waiting; want 0, 0, 1", l.Limiter.InUse(), l.Ledger.Submits(), waiting.Len())
	}
	if !slices.Equal(soonest.times, []time.Time{retry}) {
		t.Errorf("Fill told soonest %v, want the retry %v", soonest.times, retry)
	}
}

// A lane whose threads are shared takes no more than its pool holds.
func TestFillStopsAtThePoolsThreads(t *testing.T) {
	t.Parallel()
	l := lane.New(lane.Config{Threads: 10, Pool: &pool{held: 2}})
	waiting := waitingOf("a", "b", "c")
	if got := launched(Fill([]*lane.Lane{l}, waiting, t0, anyLane, func(time.Time) {})); got != "a@0:1 b@0:1" {
		t.Errorf("Fill launched %q, want the pool's 2 threads' worth %q", got, "a@0:1 b@0:1")
	}
}

// Each pool hears its lane's threads in use and the waiting tasks it could
// take: with one lane every waiting task, with several those routed to it,
// and none while the lane is held.
func TestDemands(t *testing.T) {
	t.Parallel()
	t.Run("one lane", func(t *testing.T) {
		p := &pool{held: 1}
		l := lane.New(lane.Config{Threads: 5, Pool: p})
		waiting := waitingOf("a", "b", "c")
		Fill([]*lane.Lane{l}, waiting, t0, anyLane, func(time.Time) {})
		got := Demands([]*lane.Lane{l}, waiting, t0, anyLane, func(time.Time) {})
		if len(got) != 1 || got[0].Pool != p || got[0].Busy != 1 || got[0].Waiting != 2 {
			t.Errorf("Demands = %+v, want the pool busy 1 waiting 2", got)
		}
	})
	t.Run("several lanes", func(t *testing.T) {
		first, second := &pool{held: 0}, &pool{held: 0}
		lanes := []*lane.Lane{
			lane.New(lane.Config{Index: 0, Threads: 5, Pool: first}),
			lane.New(lane.Config{Index: 1, Threads: 5}),
			lane.New(lane.Config{Index: 2, Threads: 5, Pool: second}),
		}
		retry := t0.Add(time.Second)
		// Lane 2 takes the tasks of "x…"; the others, the rest, later.
		byName := Tasks[string]{
			Route: func(l *lane.Lane, v string, _ time.Time) (bool, time.Time) {
				if l.Index() == 2 {
					return strings.HasPrefix(v, "x"), time.Time{}
				}
				return !strings.HasPrefix(v, "x"), retry
			},
			Price: anyLane.Price,
		}
		waiting := waitingOf("a", "x1", "x2")
		var soonest soonestOf
		got := Demands(lanes, waiting, t0, byName, soonest.tell)
		want := []Demand{{Pool: first, Waiting: 1}, {Pool: second, Waiting: 2}}
		if !slices.Equal(got, want) {
			t.Errorf("Demands = %+v, want %+v", got, want)
		}
		if len(soonest.times) != 3 {
			t.Errorf("Demands told soonest %d times, want 3 (the first lane's retry for each task)", len(soonest.times))
		}
		lanes[2].Health.HoldSubmits(t0.Add(time.Hour))
		if got := Demands(lanes, waiting, t0, byName, func(time.Time) {}); got[1].Waiting != 0 {
			t.Errorf("a held lane's pool hears %d waiting, want 0", got[1].Waiting)
		}
	})
}

// passes counts a Loop's passes and returns what next says.
type passes struct {
	mu   sync.Mutex
	n    int
	next func(n int) time.Time
}

func (p *passes) pass() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	return p.next(p.n)
}

func (p *passes) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// A Loop passes once at its start, then on a wake, when the last pass
// said the next is due, and when a lane's pool gets threads; it waits
// otherwise, and ends with its context. The clock is synctest's.
func TestLoop(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		p := &passes{next: func(n int) time.Time {
			if n == 2 {
				return time.Now().Add(10 * time.Second)
			}
			return time.Time{}
		}}
		ready := make(chan struct{})
		lanes := []*lane.Lane{lane.New(lane.Config{Threads: 1}), lane.New(lane.Config{Index: 1, Threads: 1, Pool: &pool{ready: ready}})}
		d := New(lanes, time.Now, p.pass)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { d.Run(ctx); close(done) }()

		step := func(what string, want int) {
			t.Helper()
			synctest.Wait()
			if got := p.count(); got != want {
				t.Fatalf("%s: %d passes, want %d", what, got, want)
			}
		}
		step("started", 1)
		testbound.Advance(time.Hour + time.Second)
		step("an hour with nothing due", 2) // the idle timer's pass, which said the next is due 10 s later
		d.Wake()
		step("woken", 3) // within those 10 s: a wake does not wait for what is due
		testbound.Advance(10 * time.Second)
		step("10 s on", 3) // the pass it woke said nothing is due
		ready <- struct{}{}
		step("the pool got threads", 4)
		cancel()
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Fatal("Run did not return when its context ended")
		}
	})
}

// A pass that says the next is due runs again then, without a wake.
func TestLoopPassesWhenDue(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		p := &passes{next: func(n int) time.Time {
			if n == 1 {
				return start.Add(5 * time.Second)
			}
			return time.Time{}
		}}
		d := New(nil, time.Now, p.pass)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go d.Run(ctx)
		testbound.Advance(5*time.Second - time.Millisecond)
		if got := p.count(); got != 1 {
			t.Fatalf("just before due: %d passes, want 1", got)
		}
		testbound.Advance(time.Millisecond)
		if got := p.count(); got != 2 {
			t.Fatalf("when due: %d passes, want 2", got)
		}
	})
}
