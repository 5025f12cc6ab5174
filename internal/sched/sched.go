// Package sched orders waiting tasks: lower priority number first, FIFO
// (by burst, then sequence number) within a priority, longest expected
// first among the items of one burst, aging so that no task starves,
// weighted fair share among tenants within a level, delayed items held
// until their NotBefore, and items past their deadline reported as expired
// instead of handed out.
//
// A Scheduler is not safe for concurrent use; its owner holds the lock.
package sched

import (
	"container/heap"
	"time"
)

// Item is one waiting entry. ID must be unique among waiting items.
type Item[T any] struct {
	ID       string
	Value    T
	Priority int   // lower first
	Seq      int64 // FIFO order within a priority and tenant
	// Burst groups items that arrived together (numbered in arrival
	// order; the owner decides what together means). Within a priority
	// and tenant items go by Burst, then longest Expected first, then Seq:
	// a burst ends sooner when its long items start first, and an item
	// is never passed by one of a later burst.
	Burst     int64
	Expected  time.Duration
	Tenant    string    // fair share among tenants
	Enqueued  time.Time // aging counts from here
	NotBefore time.Time // not handed out before; zero: at once
	Deadline  time.Time // not handed out at or after; zero: none
	// Class partitions items: items of different classes wait in
	// different FIFOs, so PopFunc can pass over a whole class by its
	// head (which providers can take a task). Zero for one class.
	Class uint64
}

// Config tunes a Scheduler.
type Config struct {
	// AgingInterval: a waiting item gains one priority level per interval.
	// Zero disables aging.
	AgingInterval time.Duration
	// Weights are the tenants' fair share weights; a missing or
	// non-positive weight counts as 1.
	Weights map[string]int
}

// strideUnit is divided by a tenant's weight to get the pass increment
// charged for each item handed out.
const strideUnit = 1 << 20

type entry[T any] struct {
	item    Item[T]
	removed bool
	dIndex  int // index in the delayed heap, -1 when not there
	xIndex  int // index in the deadline heap, -1 when not there
}

type lane[T any] struct {
	priority int
	tenant   string
	fifo     []*entry[T] // sorted by before; removed entries skipped lazily
}

func (l *lane[T]) head() *entry[T] {
	for len(l.fifo) > 0 && l.fifo[0].removed {
		l.fifo[0] = nil
		l.fifo = l.fifo[1:]
	}
	if len(l.fifo) == 0 {
		return nil
	}
	return l.fifo[0]
}

type laneKey struct {
	priority int
	tenant   string
	class    uint64
}

// Scheduler holds waiting items.
type Scheduler[T any] struct {
	cfg      Config
	byID     map[string]*entry[T]
	lanes    map[laneKey]*lane[T]
	delayed  delayHeap[T]
	deadline deadlineHeap[T]
	pass     map[string]int64 // per active tenant
	vtime    int64            // pass of the last item handed out
	ready    int              // items in lanes (not delayed, not removed)
}

// New returns an empty Scheduler.
func New[T any](cfg Config) *Scheduler[T] {
	return &Scheduler[T]{
		cfg:   cfg,
		byID:  map[string]*entry[T]{},
		lanes: map[laneKey]*lane[T]{},
		pass:  map[string]int64{},
	}
}

// Len is the number of waiting items, delayed ones included.
func (s *Scheduler[T]) Len() int { return len(s.byID) }

// Has reports whether id is waiting.
func (s *Scheduler[T]) Has(id string) bool { _, ok := s.byID[id]; return ok }

// Push adds an item. An item whose ID is already waiting is replaced.
func (s *Scheduler[T]) Push(it Item[T], now time.Time) {
	s.Remove(it.ID)
	e := &entry[T]{item: it, dIndex: -1, xIndex: -1}
	s.byID[it.ID] = e
	if !it.Deadline.IsZero() {
		heap.Push(&s.deadline, e)
	}
	if it.NotBefore.After(now) {
		heap.Push(&s.delayed, e)
		return
	}
	s.toLane(e)
}

func (s *Scheduler[T]) toLane(e *entry[T]) {
	k := laneKey{e.item.Priority, e.item.Tenant, e.item.Class}
	l := s.lanes[k]
	if l == nil {
		l = &lane[T]{priority: k.priority, tenant: k.tenant}
		s.lanes[k] = l
	}
	if _, active := s.pass[k.tenant]; !active {
		// A tenant that had nothing waiting starts at the current virtual
		// time: idling earns no credit to hog the threads later.
		s.pass[k.tenant] = s.vtime
	}
	// Keep the lane's order; appends are the common case.
	i := len(l.fifo)
	for i > 0 && before(&e.item, &l.fifo[i-1].item) {
		i--
	}
	l.fifo = append(l.fifo, nil)
	copy(l.fifo[i+1:], l.fifo[i:])
	l.fifo[i] = e
	s.ready++
}

// before reports whether a goes before b among items of one effective
// priority: earlier Burst, then longer Expected, then smaller Seq.
func before[T any](a, b *Item[T]) bool {
	if a.Burst != b.Burst {
		return a.Burst < b.Burst
	}
	if a.Expected != b.Expected {
		return a.Expected > b.Expected
	}
	return a.Seq < b.Seq
}

// Remove takes a waiting item out; it reports whether it was there.
func (s *Scheduler[T]) Remove(id string) (Item[T], bool) {
	e, ok := s.byID[id]
	if !ok {
		return Item[T]{}, false
	}
	s.drop(e)
	return e.item, true
}

func (s *Scheduler[T]) drop(e *entry[T]) {
	delete(s.byID, e.item.ID)
	e.removed = true
	if e.xIndex >= 0 {
		heap.Remove(&s.deadline, e.xIndex)
	}
	if e.dIndex >= 0 {
		heap.Remove(&s.delayed, e.dIndex)
	} else {
		s.ready--
	}
}

func (s *Scheduler[T]) promote(now time.Time) {
	for s.delayed.Len() > 0 && !s.delayed[0].item.NotBefore.After(now) {
		e := heap.Pop(&s.delayed).(*entry[T])
		s.toLane(e)
	}
}

// Expired removes and returns every item whose deadline is at or before now.
func (s *Scheduler[T]) Expired(now time.Time) []Item[T] {
	var out []Item[T]
	for s.deadline.Len() > 0 {
		e := s.deadline[0]
		if e.item.Deadline.After(now) {
			break
		}
		s.drop(e)
		out = append(out, e.item)
	}
	return out
}

func (s *Scheduler[T]) effective(it *Item[T], now time.Time) int {
	p := it.Priority
	if s.cfg.AgingInterval > 0 && now.After(it.Enqueued) {
		p -= int(now.Sub(it.Enqueued) / s.cfg.AgingInterval)
	}
	return p
}

func (s *Scheduler[T]) weight(tenant string) int64 {
	if w := s.cfg.Weights[tenant]; w > 0 {
		return int64(w)
	}
	return 1
}

// Pop hands out the next item that may go at now: the most urgent
// effective priority; among tenants with a head at that level, the one
// with the smallest pass (weighted fair share); within a tenant, the
// earliest Burst, then the longest Expected, then the smallest Seq. Items past their deadline are never handed out: call
// Expired first. ok is false when nothing may go now.
func (s *Scheduler[T]) Pop(now time.Time) (it Item[T], ok bool) { return s.PopFunc(now, nil) }

// PopFunc is Pop among the FIFOs whose head take accepts (nil accepts
// all): the caller passes over a class, or the tasks not yet old enough,
// by their head alone, the oldest of its FIFO.
func (s *Scheduler[T]) PopFunc(now time.Time, take func(Item[T]) bool) (it Item[T], ok bool) {
	s.promote(now)
	var (
		best     *entry[T]
		bestLane *lane[T]
		bestEff  int
		bestPass int64
	)
	for k, l := range s.lanes {
		h := l.head()
		if h == nil {
			delete(s.lanes, k)
			continue
		}
		if take != nil && !take(h.item) {
			continue
		}
		eff := s.effective(&h.item, now)
		pass := s.pass[l.tenant]
		better := best == nil || eff < bestEff ||
			(eff == bestEff && (pass < bestPass ||
				(pass == bestPass && before(&h.item, &best.item))))
		if better {
			best, bestLane, bestEff, bestPass = h, l, eff, pass
		}
	}
	if best == nil {
		return Item[T]{}, false
	}
	if !best.item.Deadline.IsZero() && !best.item.Deadline.After(now) {
		// Left for Expired to report; never handed out.
		return Item[T]{}, false
	}
	s.drop(best)
	s.vtime = bestPass
	s.pass[bestLane.tenant] = bestPass + strideUnit/s.weight(bestLane.tenant)
	s.forgetIdleTenant(bestLane.tenant)
	return best.item, true
}

// forgetIdleTenant drops a tenant's pass once nothing of it waits, so the
// map stays bounded by the tenants that have work.
func (s *Scheduler[T]) forgetIdleTenant(tenant string) {
	for k, l := range s.lanes {
		if k.tenant == tenant && l.head() != nil {
			return
		}
	}
	delete(s.pass, tenant)
}

// NextWake is the earliest time after now at which Pop or Expired may
// return something new without a Push: the earliest NotBefore still
// ahead, or Deadline. Zero means none. Items whose NotBefore has come are
// ready by then, not a time to wake for: a caller that could not Pop them
// (no thread free) waits for its own signal instead of passing again
// every moment. Call Expired(now) first, so no Deadline is at or before
// now.
func (s *Scheduler[T]) NextWake(now time.Time) time.Time {
	s.promote(now)
	var t time.Time
	if s.delayed.Len() > 0 {
		t = s.delayed[0].item.NotBefore
	}
	if s.deadline.Len() > 0 {
		if d := s.deadline[0].item.Deadline; t.IsZero() || d.Before(t) {
			t = d
		}
	}
	return t
}

// Ready is the number of items that may go now or could go at once if
// their NotBefore were now (delayed items excluded).
func (s *Scheduler[T]) Ready() int { return s.ready }

// Each calls fn for every waiting item, in no particular order.
func (s *Scheduler[T]) Each(fn func(Item[T])) {
	for _, e := range s.byID {
		fn(e.item)
	}
}

type delayHeap[T any] []*entry[T]

func (h delayHeap[T]) Len() int { return len(h) }
func (h delayHeap[T]) Less(i, j int) bool {
	if !h[i].item.NotBefore.Equal(h[j].item.NotBefore) {
		return h[i].item.NotBefore.Before(h[j].item.NotBefore)
	}
	return h[i].item.Seq < h[j].item.Seq
}
func (h delayHeap[T]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].dIndex, h[j].dIndex = i, j
}
func (h *delayHeap[T]) Push(x any) { e := x.(*entry[T]); e.dIndex = len(*h); *h = append(*h, e) }
func (h *delayHeap[T]) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.dIndex = -1
	return e
}

type deadlineHeap[T any] []*entry[T]

func (h deadlineHeap[T]) Len() int           { return len(h) }
func (h deadlineHeap[T]) Less(i, j int) bool { return h[i].item.Deadline.Before(h[j].item.Deadline) }
func (h deadlineHeap[T]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].xIndex, h[j].xIndex = i, j
}
func (h *deadlineHeap[T]) Push(x any) { e := x.(*entry[T]); e.xIndex = len(*h); *h = append(*h, e) }
func (h *deadlineHeap[T]) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.xIndex = -1
	return e
}
