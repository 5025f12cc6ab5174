package sim

import (
	"container/heap"
	"context"
	"time"
)

// eventKind is what happens to a task when its event comes due.
type eventKind uint8

const (
	eventSolve  eventKind = iota // the task's solve time has come
	eventForget                  // the task's answer is no longer kept
)

// event is one due time in the server's heap.
type event struct {
	at   time.Time
	id   uint64
	kind eventKind
}

// eventHeap orders events by due time, earliest first.
type eventHeap []event

func (h eventHeap) Len() int           { return len(h) }
func (h eventHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h eventHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)        { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// schedule adds an event and wakes the timer loop when the event is the
// new earliest one.
func (tt *taskTable) schedule(e event) {
	tt.compact()
	heap.Push(&tt.events, e)
	if tt.events[0] == e {
		select {
		case tt.wake <- struct{}{}:
		default:
		}
	}
}

// compact drops the events that will do nothing once the heap holds more
// than twice as many events as tasks: a fetched task's forget event
// replaces the one at ResultTTL, which would otherwise stay in the heap
// for ResultTTL after the task is gone. A task has at most one live
// event, so the heap stays within 2 × tasks + 1024 at an amortized O(1).
func (tt *taskTable) compact() {
	if len(tt.events) <= 2*len(tt.tasks)+1024 {
		return
	}
	kept := tt.events[:0]
	for _, e := range tt.events {
		if tt.live(e) {
			kept = append(kept, e)
		}
	}
	tt.events = kept
	heap.Init(&tt.events)
}

// live reports whether e still has something to do when due.
func (tt *taskTable) live(e event) bool {
	t := tt.tasks[e.id]
	switch {
	case t == nil:
		return false
	case e.kind == eventSolve:
		return t.state == statePending
	default:
		return t.forgetAt.Equal(e.at)
	}
}

// runDue does every event due at or before now, in due order, using each
// event's own due time so that stats do not depend on how late the timer
// fired: solve ends a task's solving. It returns the next due time, if any.
func (tt *taskTable) runDue(now time.Time, solve func(*task, time.Time)) (next time.Time, ok bool) {
	for len(tt.events) > 0 && !tt.events[0].at.After(now) {
		e := heap.Pop(&tt.events).(event)
		t := tt.tasks[e.id]
		if t == nil {
			continue
		}
		switch e.kind {
		case eventSolve:
			solve(t, e.at)
		case eventForget:
			if t.state != statePending && t.forgetAt.Equal(e.at) {
				delete(tt.tasks, e.id)
			}
		}
	}
	if len(tt.events) == 0 {
		return time.Time{}, false
	}
	return tt.events[0].at, true
}

// runDueLocked is runDue with the Server's solve.
func (s *Server) runDueLocked(now time.Time) (next time.Time, ok bool) {
	return s.table.runDue(now, s.solveLocked)
}

// runTimer is the one background loop that solves tasks on time (the
// Server's timer Loop): it sleeps until the earliest event, does what is
// due and sleeps again. It returns when ctx ends, at Close.
func (s *Server) runTimer(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := s.cfg.Now()
		s.mu.Lock()
		next, ok := s.runDueLocked(now)
		s.mu.Unlock()
		if ok {
			timer.Reset(next.Sub(now))
		} else {
			timer.Stop()
		}
		select {
		case <-ctx.Done():
			return
		case <-s.table.wake:
		case <-timer.C:
		}
	}
}
