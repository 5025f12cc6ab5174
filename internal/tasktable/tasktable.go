// Package tasktable is the queue's table of unfinished tasks behind a lock
// of its own: every task by id, the ids being stored (claims), the tasks
// in flight (by id and by the provider's id as stored), the waiting tasks
// in order (an internal/sched Scheduler), and the channels that wake
// those waiting for room or for the table to empty.
//
// A state change that touches several of these (and the fields of the
// task itself, which the table's owner guards by the same lock) is one
// call of Do; the lock is held for the call only, so fn must not block:
// no Store write, provider request, waiter or callback runs under it.
// Get, Counts, Idle, Room and WakeRoom lock on their own.
package tasktable

import (
	"sync"

	"github.com/captchaq/captchaq/internal/sched"
)

// Table holds the unfinished tasks, each a T (a pointer to the owner's
// task state).
type Table[T comparable] struct {
	mu       sync.Mutex
	tasks    map[string]T
	claims   map[string]chan struct{} // ids being stored, closed when released
	inflight map[string]T             // by task id
	byKey    map[string]T             // by the provider's id as stored
	waiting  *sched.Scheduler[T]
	freed    chan struct{} // closed and replaced when a task leaves the table
	idle     chan struct{} // closed and replaced when the table becomes empty
	busy     bool          // tasks were waiting at the end of the last Do
	onBusy   func(bool)
}

// New returns an empty table whose waiting tasks are ordered by a
// Scheduler of cfg. onBusy (nil: none) hears, at the end of a Do and
// under the table's lock, when tasks start or stop waiting: it must not
// block or call the table.
func New[T comparable](cfg sched.Config, onBusy func(busy bool)) *Table[T] {
	return &Table[T]{
		onBusy:   onBusy,
		tasks:    map[string]T{},
		claims:   map[string]chan struct{}{},
		inflight: map[string]T{},
		byKey:    map[string]T{},
		waiting:  sched.New[T](cfg),
		freed:    make(chan struct{}),
		idle:     make(chan struct{}),
	}
}

// Tx is the table while Do holds its lock; it is valid inside fn only.
type Tx[T comparable] struct{ t *Table[T] }

// Do runs fn with the table locked.
func (t *Table[T]) Do(fn func(tx Tx[T])) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fn(Tx[T]{t})
	if busy := t.waiting.Len() > 0; busy != t.busy {
		t.busy = busy
		if t.onBusy != nil {
			t.onBusy(busy)
		}
	}
}

// Get returns the task of id.
func (t *Table[T]) Get(id string) (T, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v, ok := t.tasks[id]
	return v, ok
}

// Counts is how many tasks the table holds, waiting and in flight, and
// how many provider ids it indexes (one per task in flight, unless two
// tasks were given the same id).
type Counts struct {
	Tasks, Waiting, InFlight, Keys int
}

// Counts returns the table's counts now.
func (t *Table[T]) Counts() Counts {
	t.mu.Lock()
	defer t.mu.Unlock()
	return Tx[T]{t}.Counts()
}

// Idle returns how many tasks the table holds and a channel closed when
// it next becomes empty.
func (t *Table[T]) Idle() (int, <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.tasks), t.idle
}

// Room returns how many more tasks fit under max and a channel closed
// when a task next leaves the table (or WakeRoom is called).
func (t *Table[T]) Room(max int) (int, <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return max - len(t.tasks), t.freed
}

// WakeRoom wakes those waiting on Room's channel.
func (t *Table[T]) WakeRoom() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.wakeRoom()
}

func (t *Table[T]) wakeRoom() {
	close(t.freed)
	t.freed = make(chan struct{})
}

// Add puts v in the table as the task of id.
func (tx Tx[T]) Add(id string, v T) { tx.t.tasks[id] = v }

// Get returns the task of id.
func (tx Tx[T]) Get(id string) (T, bool) {
	v, ok := tx.t.tasks[id]
	return v, ok
}

// Remove takes the task of id out of the table (it is neither waiting nor
// in flight any more), wakes those waiting for room and, when the table is
// now empty, those waiting for that.
func (tx Tx[T]) Remove(id string) {
	t := tx.t
	delete(t.tasks, id)
	t.wakeRoom()
	if len(t.tasks) == 0 {
		close(t.idle)
		t.idle = make(chan struct{})
	}
}

// Each calls fn for every task in the table, in no order.
func (tx Tx[T]) Each(fn func(T)) {
	for _, v := range tx.t.tasks {
		fn(v)
	}
}

// Counts returns the table's counts.
func (tx Tx[T]) Counts() Counts {
	t := tx.t
	return Counts{Tasks: len(t.tasks), Waiting: t.waiting.Len(), InFlight: len(t.inflight), Keys: len(t.byKey)}
}

// Claim reserves id for the caller to store and add: ok is false, and busy
// the channel closed when the claim is released, when another caller
// holds it.
func (tx Tx[T]) Claim(id string) (busy <-chan struct{}, ok bool) {
	if ch, held := tx.t.claims[id]; held {
		return ch, false
	}
	tx.t.claims[id] = make(chan struct{})
	return nil, true
}

// Claimed reports whether a caller holds the claim on id.
func (tx Tx[T]) Claimed(id string) bool {
	_, ok := tx.t.claims[id]
	return ok
}

// Release ends the claim on id and wakes those waiting for it.
func (tx Tx[T]) Release(id string) {
	if ch, ok := tx.t.claims[id]; ok {
		close(ch)
		delete(tx.t.claims, id)
	}
}

// Fly marks v, the task of id, in flight under the provider's id as
// stored (key).
func (tx Tx[T]) Fly(id, key string, v T) {
	tx.t.inflight[id] = v
	tx.t.byKey[key] = v
}

// Land takes the task of id out of flight, and key out of the index when
// it still names v (key "": none). It reports whether the task was in
// flight.
func (tx Tx[T]) Land(id, key string, v T) bool {
	t := tx.t
	_, was := t.inflight[id]
	delete(t.inflight, id)
	if key != "" && t.byKey[key] == v {
		delete(t.byKey, key)
	}
	return was
}

// InFlight returns the task of id when it is in flight.
func (tx Tx[T]) InFlight(id string) (T, bool) {
	v, ok := tx.t.inflight[id]
	return v, ok
}

// ByKey returns the task in flight under the provider's id as stored.
func (tx Tx[T]) ByKey(key string) (T, bool) {
	v, ok := tx.t.byKey[key]
	return v, ok
}

// EachInFlight calls fn for every task in flight, in no order.
func (tx Tx[T]) EachInFlight(fn func(T)) {
	for _, v := range tx.t.inflight {
		fn(v)
	}
}

// Waiting is the scheduler of the tasks waiting for a thread.
func (tx Tx[T]) Waiting() *sched.Scheduler[T] { return tx.t.waiting }
