package captchaq

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"sync/atomic"
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
		if r, ok := invalidResult(tasks[i], err); ok {
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

// invalidResult turns a validation error, or the refusal of an id that
// names another task, into the task's failed Result.
func invalidResult(t Task, err error) (Result, bool) {
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

// Stream solves the tasks read from in and sends their results in
// completion order, invalid tasks included as failed Results. The channel
// is closed once in is closed and every task has its result, or when ctx
// is done. At most MaxQueued results are held for a slow reader; past it
// Stream stops reading in (backpressure). Tasks left unfinished when the
// queue stops are not sent: they stay in the Store, their room frees, and
// the next task read from in is refused and ends the Stream, as does in
// closing.
func (q *Queue) Stream(ctx context.Context, in <-chan Task) <-chan Result {
	out := make(chan Result)
	s := &stream{ready: make(chan struct{}, 1)}
	go func() {
		defer close(out)
		intakeDone := make(chan struct{})
		go func() {
			defer close(intakeDone)
			s.intake(ctx, q, in)
		}()
		for {
			r, ok, finished := s.next()
			if finished {
				<-intakeDone
				return
			}
			if !ok {
				select {
				case <-s.ready:
					continue
				case <-ctx.Done():
					<-intakeDone
					return
				}
			}
			select {
			case out <- r:
				s.done()
			case <-ctx.Done():
				<-intakeDone
				return
			}
		}
	}()
	return out
}

// StreamFuncParallelDefault is how many chunks StreamFunc stores at once
// when its parallel is 0.
const StreamFuncParallelDefault = 16

// StreamFunc submits the items read from in, each carrying a task
// (task(item)), and calls fn exactly once for every item it reads: with
// the task's result once it is accepted (later, on the queue's goroutines,
// as SubmitFunc does), or with the error that refused it (a *TaskError,
// an *IDConflictError, or ctx's error or ErrClosed once the intake
// stopped). Each of parallel goroutines (StreamFuncParallelDefault when
// 0) takes the items waiting in in, up to 256, and stores them in one
// SubmitBatchFunc call, so the tasks read meanwhile share one Store
// write; parallel 1 submits in in's order exactly. Submitting blocks past
// MaxQueued, so in is read no faster than the queue takes tasks.
//
// StreamFunc returns once in is closed and every item read is accepted or
// refused; the results of accepted tasks keep coming to fn after it
// returns. Once ctx ends or the queue closes, the items still read are
// refused with that error, not submitted; in is still read to its end, so
// its sender never blocks.
func StreamFunc[T any](ctx context.Context, q *Queue, in <-chan T, parallel int, task func(T) Task, fn func(item T, r Result, err error)) {
	var stopped atomic.Bool
	submit := func(chunk []T) {
		if stopped.Load() || ctx.Err() != nil {
			err := ctx.Err()
			if err == nil {
				err = ErrClosed
			}
			for _, item := range chunk {
				fn(item, Result{}, err)
			}
			return
		}
		tasks := make([]Task, len(chunk))
		for i, item := range chunk {
			tasks[i] = task(item)
		}
		errs := q.SubmitBatchFunc(ctx, tasks, func(i int, r Result) { fn(chunk[i], r, nil) })
		for i, err := range errs {
			if err == nil {
				continue
			}
			if errors.Is(err, ErrClosed) {
				stopped.Store(true)
			}
			fn(chunk[i], Result{}, err)
		}
	}
	var wg sync.WaitGroup
	for range cmp.Or(max(parallel, 0), StreamFuncParallelDefault) {
		wg.Go(func() {
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
				submit(chunk)
			}
		})
	}
	wg.Wait()
}

// stream buffers results between the queue's goroutines (which must never
// block on a slow reader) and the reader.
type stream struct {
	mu            sync.Mutex
	buf           []Result
	open          int  // tasks submitted or results buffered, not yet sent
	inDone        bool // in is drained
	ready         chan struct{}
	capacityFreed chan struct{}
}

func (s *stream) signal() {
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

func (s *stream) push(r Result) {
	s.mu.Lock()
	s.buf = append(s.buf, r)
	s.mu.Unlock()
	s.signal()
}

// done closes one open task: its result was sent, or it will send none
// (refused, or left unfinished by the queue stopping). Its room goes to
// the intake, which may be waiting for it, and the sender learns that
// one fewer result is to come.
func (s *stream) done() {
	s.mu.Lock()
	s.open--
	sig := s.capacityFreed
	s.capacityFreed = nil
	s.mu.Unlock()
	if sig != nil {
		close(sig)
	}
	s.signal()
}

// next returns a buffered result; finished once nothing more will come.
func (s *stream) next() (r Result, ok, finished bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.buf) > 0 {
		r = s.buf[0]
		s.buf[0] = Result{}
		s.buf = s.buf[1:]
		return r, true, false
	}
	return Result{}, false, s.inDone && s.open == 0
}

// streamBatch bounds how many tasks Stream stores in one call.
const streamBatch = 256

func (s *stream) intake(ctx context.Context, q *Queue, in <-chan Task) {
	defer func() {
		s.mu.Lock()
		s.inDone = true
		s.mu.Unlock()
		s.signal()
	}()
	for {
		if !s.reserve(ctx, q.cfg.MaxQueued) {
			return
		}
		var t Task
		var ok bool
		select {
		case t, ok = <-in:
		case <-ctx.Done():
			ok = false
		}
		if !ok {
			s.done()
			return
		}
		// Take the tasks already waiting too, while there is room, and
		// store them together.
		batch := []Task{t}
		stop := false
	more:
		for len(batch) < streamBatch && s.tryReserve(q.cfg.MaxQueued) {
			select {
			case t, ok := <-in:
				if ok {
					batch = append(batch, t)
					continue
				}
				stop = true // in is closed
			default:
			}
			s.done()
			break more
		}
		errs := q.acceptBatch(ctx, batch, func(int) func(Result, error) {
			return func(r Result, err error) {
				if err != nil {
					s.done()
					return
				}
				s.push(r)
			}
		})
		for i, err := range errs {
			if err == nil {
				continue
			}
			if r, ok := invalidResult(batch[i], err); ok {
				s.push(r)
				continue
			}
			s.done()
			stop = true
		}
		if stop {
			return
		}
	}
}

// reserve waits until fewer than max tasks are open and opens one; false
// when ctx ends first.
func (s *stream) reserve(ctx context.Context, max int) bool {
	for {
		s.mu.Lock()
		if s.open < max {
			s.open++
			s.mu.Unlock()
			return true
		}
		if s.capacityFreed == nil {
			s.capacityFreed = make(chan struct{})
		}
		sig := s.capacityFreed
		s.mu.Unlock()
		select {
		case <-sig:
		case <-ctx.Done():
			return false
		}
	}
}

// tryReserve opens one task if fewer than max are open.
func (s *stream) tryReserve(max int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open < max {
		s.open++
		return true
	}
	return false
}
