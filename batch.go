package captchaq

import (
	"cmp"
	"context"
	"errors"
	"sync"
)

// SolveBatch submits tasks and waits for all their results, returned in
// input order. The tasks are stored together, as SubmitBatchFunc does. An
// invalid task gets a failed Result (ErrorCode INVALID_TASK or
// UNSUPPORTED_TYPE), and a task whose id names another task one with
// ErrorCode ID_CONFLICT, instead of failing the batch; the error is for the
// batch as a whole (ctx done, queue closed), with the results known so
// far.
func (q *Queue) SolveBatch(ctx context.Context, tasks []Task) ([]Result, error) {
	results := make([]Result, len(tasks))
	futures := make([]*Future, len(tasks))
	for i, t := range tasks {
		futures[i] = newFuture(t.ID)
	}
	errs := q.acceptBatch(ctx, tasks, func(i int) func(Result, error) { return futures[i].resolve })
	for i, err := range errs {
		if err == nil {
			continue
		}
		futures[i] = nil
		if r, ok := refusal(tasks[i], err); ok {
			results[i] = r
			continue
		}
		return results, err
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		r, err := f.Wait(ctx)
		if err != nil {
			return results, err
		}
		results[i] = r
	}
	return results, nil
}

// refusal turns a validation error, or the refusal of an id that names
// another task, into the task's failed Result; ok is false for any other
// error (the intake stopped).
func refusal(t Task, err error) (r Result, ok bool) {
	var ce *IDConflictError
	if errors.As(err, &ce) {
		return Result{ID: t.ID, Status: StatusFailed, Method: t.Method, Error: ce.Error(), ErrorCode: CodeIDConflict}, true
	}
	var te *TaskError
	if !errors.As(err, &te) {
		return Result{}, false
	}
	return Result{ID: t.ID, Status: StatusFailed, Method: t.Method, Error: te.Msg, ErrorCode: te.Code}, true
}

// StreamFuncParallelDefault is how many chunks StreamFunc stores at once
// when its parallel is 0.
const StreamFuncParallelDefault = 16

// streamBatch bounds how many items StreamFunc stores in one call.
const streamBatch = 256

// StreamFunc solves the tasks carried by the items read from in and calls
// fn once for every item it takes: with the task's Result once it is
// final and durable, or at once with a failed Result when the task is
// refused at the door: task(item) returned an error, the task does not
// validate (ErrorCode INVALID_TASK or UNSUPPORTED_TYPE), or its id names
// another task (ID_CONFLICT). refused is that refusal's error, nil for a
// result of the queue's. Calls to fn never overlap; they run on the
// queue's goroutines: keep fn short.
//
// Each of parallel goroutines (StreamFuncParallelDefault when 0) takes
// the items waiting in in, up to 256, and stores their tasks in one Store
// call; parallel 1 hands the tasks over in in's order exactly. Past
// MaxQueued unfinished tasks it waits for room before it reads on, so in
// is read no faster than the queue takes tasks.
//
// It returns nil once in is closed and every item has had its call. It
// returns early with ctx's error when ctx ends, or ErrClosed when the
// queue closes: then fn is not called again, the tasks accepted stay in
// the Store for the next Start, and in is still read to its end (its
// sender never blocks; close it).
func StreamFunc[T any](ctx context.Context, q *Queue, in <-chan T, parallel int, task func(T) (Task, error), fn func(item T, r Result, refused error)) error {
	s := newStreamGate(fn)
	var readers sync.WaitGroup
	for range cmp.Or(max(parallel, 0), StreamFuncParallelDefault) {
		readers.Go(func() {
			for item := range in {
				chunk := []T{item}
			gather:
				for len(chunk) < streamBatch {
					select {
					case item, ok := <-in:
						if !ok {
							break gather
						}
						chunk = append(chunk, item)
					default:
						break gather
					}
				}
				s.submit(ctx, q, chunk, task)
			}
		})
	}
	inDone := make(chan struct{})
	go func() {
		readers.Wait()
		close(inDone)
	}()
	select {
	case <-inDone:
		return s.wait(ctx)
	case <-s.stopped:
	case <-ctx.Done():
		s.stop(ctx.Err())
	}
	return s.err()
}

// streamGate is StreamFunc's bookkeeping: the items still owed a call,
// the calls themselves (one at a time, none after the stream stopped),
// and why it stopped.
type streamGate[T any] struct {
	fn func(T, Result, error)

	mu      sync.Mutex
	open    int           // items taken and owed a call
	idle    chan struct{} // closed when open falls to 0 (replaced when it rises)
	stopErr error
	stopped chan struct{} // closed by stop
}

func newStreamGate[T any](fn func(T, Result, error)) *streamGate[T] {
	idle := make(chan struct{})
	close(idle)
	return &streamGate[T]{fn: fn, idle: idle, stopped: make(chan struct{})}
}

// submit stores one chunk's tasks: refusals are called back at once,
// accepted tasks when their results come. After a stop it takes nothing.
func (s *streamGate[T]) submit(ctx context.Context, q *Queue, chunk []T, task func(T) (Task, error)) {
	if s.err() != nil {
		return
	}
	var items []T
	var tasks []Task
	for _, item := range chunk {
		t, err := task(item)
		if err != nil {
			r := Result{ID: t.ID, Status: StatusFailed, Method: t.Method, Error: err.Error(), ErrorCode: RefusalCode(err)}
			if rr, ok := refusal(t, err); ok {
				r = rr
			}
			s.add(1)
			s.call(item, r, err)
			continue
		}
		items, tasks = append(items, item), append(tasks, t)
	}
	s.add(len(tasks))
	errs := q.acceptBatch(ctx, tasks, func(i int) func(Result, error) {
		return func(r Result, err error) {
			if err != nil {
				s.stop(err) // the queue stopped before the result
				s.add(-1)
				return
			}
			s.call(items[i], r, nil)
		}
	})
	for i, err := range errs {
		if err == nil {
			continue
		}
		if r, ok := refusal(tasks[i], err); ok {
			s.call(items[i], r, err)
			continue
		}
		s.stop(err)
		s.add(-1)
	}
}

// add counts n more items owed a call (n < 0: fewer).
func (s *streamGate[T]) add(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open == 0 && n > 0 {
		s.idle = make(chan struct{})
	}
	s.open += n
	if s.open == 0 && n < 0 {
		close(s.idle)
	}
}

// call makes an item's one call, unless the stream stopped.
func (s *streamGate[T]) call(item T, r Result, refused error) {
	s.mu.Lock()
	if s.stopErr == nil {
		s.fn(item, r, refused)
	}
	s.mu.Unlock()
	s.add(-1)
}

// stop ends the stream with err (the first one wins).
func (s *streamGate[T]) stop(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopErr == nil {
		s.stopErr = err
		close(s.stopped)
	}
}

func (s *streamGate[T]) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopErr
}

// wait waits until every item taken has had its call, or the stream
// stops.
func (s *streamGate[T]) wait(ctx context.Context) error {
	s.mu.Lock()
	idle := s.idle
	s.mu.Unlock()
	select {
	case <-idle:
	case <-s.stopped:
	case <-ctx.Done():
		s.stop(ctx.Err())
	}
	return s.err()
}
