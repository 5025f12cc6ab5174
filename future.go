package captchaq

import (
	"context"
	"sync"
)

// Future is the result of one task, to come.
type Future struct {
	id   string
	done chan struct{}
	once sync.Once
	res  Result
	err  error
}

func newFuture(id string) *Future { return &Future{id: id, done: make(chan struct{})} }

func resolvedFuture(r Result) *Future {
	f := newFuture(r.ID)
	f.resolve(r, nil)
	return f
}

func (f *Future) resolve(r Result, err error) {
	f.once.Do(func() {
		f.res, f.err = r, err
		close(f.done)
	})
}

// ID is the task's id.
func (f *Future) ID() string { return f.id }

// Done is closed once the result is known (or the queue stopped without
// one).
func (f *Future) Done() <-chan struct{} { return f.done }

// Wait returns the task's result once it is durable. A failed task is a
// Result with Status StatusFailed, not an error; the error is ctx's, or
// ErrClosed when the queue stopped first (the task stays in the Store).
func (f *Future) Wait(ctx context.Context) (Result, error) {
	select {
	case <-f.done:
		return f.res, f.err
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}
