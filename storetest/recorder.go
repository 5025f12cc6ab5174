package storetest

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/captchaq/captchaq"
)

// Recorder is a Store that passes every call to the one it wraps and
// records the size of each Enqueue, for a test that asserts how many Store
// calls a path makes (a batch stored in one Enqueue).
type Recorder struct {
	captchaq.Store
	mu       sync.Mutex
	enqueues []int
}

// NewRecorder wraps s.
func NewRecorder(s captchaq.Store) *Recorder { return &Recorder{Store: s} }

// Enqueue records len(tasks) and calls the wrapped Store.
func (s *Recorder) Enqueue(ctx context.Context, tasks []captchaq.Task, now time.Time) ([]captchaq.Record, []bool, error) {
	s.mu.Lock()
	s.enqueues = append(s.enqueues, len(tasks))
	s.mu.Unlock()
	return s.Store.Enqueue(ctx, tasks, now)
}

// Enqueues returns the number of tasks of each Enqueue so far, in order.
func (s *Recorder) Enqueues() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.enqueues)
}
