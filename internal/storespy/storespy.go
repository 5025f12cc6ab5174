// Package storespy wraps a captchaq.Store and records how it is called,
// for tests that assert how many Store calls a path makes.
package storespy

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/captchaq/captchaq"
)

// Store passes every call to the wrapped Store and records the size of
// each Enqueue.
type Store struct {
	captchaq.Store
	mu       sync.Mutex
	enqueues []int
}

// New wraps s.
func New(s captchaq.Store) *Store { return &Store{Store: s} }

// Enqueue records len(tasks) and calls the wrapped Store.
func (s *Store) Enqueue(ctx context.Context, tasks []captchaq.Task, now time.Time) ([]captchaq.Record, []bool, error) {
	s.mu.Lock()
	s.enqueues = append(s.enqueues, len(tasks))
	s.mu.Unlock()
	return s.Store.Enqueue(ctx, tasks, now)
}

// Enqueues returns the number of tasks of each Enqueue so far, in order.
func (s *Store) Enqueues() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.enqueues)
}
