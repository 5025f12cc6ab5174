package captchaq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/captchaq/captchaq/internal/dispatch"
	"github.com/captchaq/captchaq/internal/engine"
	"github.com/captchaq/captchaq/internal/lane"
	"github.com/captchaq/captchaq/internal/latency"
	"github.com/captchaq/captchaq/internal/pingback"
	"github.com/captchaq/captchaq/internal/sched"
	"github.com/captchaq/captchaq/internal/startstop"
	"github.com/captchaq/captchaq/internal/tally"
	"github.com/captchaq/captchaq/internal/tasktable"
	"github.com/captchaq/captchaq/provider"
)

// New checks cfg and returns a Queue that is not yet started.
func New(cfg Config) (*Queue, error) { return newQueue(cfg, nil) }

// NewFleetQueue is New for a queue in fleet f: f admits each submit,
// shares each provider's threads and, with a Journal, makes each step
// durable in the fleet.
func NewFleetQueue(cfg Config, f Fleet) (*Queue, error) {
	if f == nil {
		return nil, errors.New("captchaq: NewFleetQueue: the fleet is nil; use New for a queue of its own")
	}
	return newQueue(cfg, f)
}

// newQueue is New for a queue in fleet f (nil: none).
func newQueue(cfg Config, f Fleet) (*Queue, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	q := &Queue{
		cfg:      cfg,
		fleet:    f,
		log:      cfg.Logger,
		store:    cfg.Store,
		journal:  cfg.Store,
		metrics:  tally.NewCounters(),
		estimate: latency.NewEstimator(estimateQuantile, estimateSamples, func(k string) time.Duration { return provider.TypicalSolveTime(provider.Kind(k)) }),
	}
	// The pollers hear when tasks start or stop waiting for a thread.
	q.table = tasktable.New[*taskState](sched.Config{AgingInterval: cfg.AgingInterval, Weights: cfg.TenantWeights}, func(busy bool) {
		for _, p := range q.pollers {
			p.Busy(busy)
		}
	})
	if f != nil && f.Journal() != nil {
		q.journal = f.Journal()
	}
	q.runCtx, q.runCancel = context.WithCancel(context.Background())
	q.lanes = lane.NewSet(cfg.laneConfigs(f))
	secret := pingback.Secret(cfg.PingbackSecret)
	for _, l := range q.lanes.Lanes() {
		q.inboxes = append(q.inboxes, pingback.NewInbox(secret, l.Name(), func(sig string) string {
			return l.PingbackURL(cfg.PingbackURL, sig)
		}))
	}
	q.pauses = lane.NewPauses(q.lanes.Lanes())
	q.refusals = engine.NewRefusals(q.lanes, cfg.Store, q.log)
	q.waiting = dispatch.Tasks[*taskState]{Route: func(l *lane.Lane, st *taskState, now time.Time) (bool, time.Time) {
		return q.lanes.Route(l, st.routing(), now)
	}, Price: priceAt, Taken: func(l *lane.Lane, st *taskState) { l.Refusals.Sending(st.route) }}
	q.dispatcher = dispatch.New(q.lanes.Lanes(), q.now, q.pass)
	q.loops = []*startstop.Loop{startstop.New(q.dispatcher.Run)}
	if q.res = engine.NewReservoirs(cfg.Reservoirs, cfg.Providers, cfg.Store, cfg.ReservoirShare, cfg.threads(), q.reservoirHost()); q.res != nil {
		q.loops = append(q.loops, q.res.Loop())
	}
	for _, l := range q.lanes.Lanes() {
		p := q.newPoller(l)
		q.pollers = append(q.pollers, p)
		q.loops = append(q.loops, startstop.New(p.Run))
	}
	return q, nil
}

// The first poll of a task goes out at the estimateQuantile of its kind's
// last estimateSamples solve times. A low quantile costs almost no requests
// (a busy queue polls every PollInterval anyway; an early id just joins that
// bulk request) and keeps fast solves from waiting for a late first poll:
// on the mixed benchmark, moving it from 0.2 to 0.02 cut the
// ready-to-fetched p99 by half to two thirds.
const (
	estimateQuantile = 0.02
	estimateSamples  = 64
)

// Start resumes the Store's pending tasks (tasks in flight are polled, not
// submitted again) and starts the queue's loops. ctx bounds the resume
// only; stop the queue with Shutdown or Close. A Close or Shutdown that
// comes while Start runs wins: Start returns ErrClosed and leaves nothing
// running.
func (q *Queue) Start(ctx context.Context) error {
	q.mu.Lock()
	if q.started || q.closed.Load() {
		q.mu.Unlock()
		return errors.New("captchaq: Start called twice or after Close")
	}
	q.started = true
	q.mu.Unlock()
	started := q.now()
	q.metrics.Start(started)

	if err := q.refusals.Load(ctx); err != nil {
		return fmt.Errorf("captchaq: load the providers' refusals of types: %w", err)
	}
	var resumed, polling int
	err := q.store.Pending(ctx, func(r Record) (err error) {
		q.table.Do(func(tx table) {
			if q.stopped.Load() {
				err = ErrClosed
				return
			}
			if _, ok := tx.Get(r.Task.ID); ok {
				return
			}
			if tx.Claimed(r.Task.ID) {
				return // a Submit is storing it now and registers the stored record
			}
			st := q.register(tx, r, nil, q.checkStored(r.Task))
			q.res.Resume(r.Task.ID)
			resumed++
			q.metrics.Resumed(st.resumed)
			if r.Status == StatusInFlight {
				polling++
			}
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("captchaq: resume pending tasks: %w", err)
	}
	// The loops start under q.mu, where stop marks the queue stopped
	// before it stops them: they start before (and stop waits for them)
	// or not at all. A loop started after stop returned would send
	// requests after Close.
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stopped.Load() {
		return fmt.Errorf("captchaq: start: %w", ErrClosed)
	}
	if resumed > 0 {
		q.log.Info("resumed pending tasks", "tasks", resumed, "in_flight", polling)
	}
	q.logPolling()
	for _, l := range q.loops {
		_ = l.Start(q.runCtx)
	}
	return nil
}

// Submit accepts a task: it validates it, makes it durable in the Store
// and returns a Future for its result. A known id with the same task
// returns a Future for the existing task (resolved at once when it is
// already final, unless its token has expired: then it is solved again);
// a known id with another task is refused with an *IDConflictError. When
// MaxQueued tasks are unfinished, Submit waits for room or for ctx.
// After Shutdown or Close it returns ErrClosed.
func (q *Queue) Submit(ctx context.Context, t Task) (*Future, error) {
	f := newFuture(t.ID)
	if err := q.accept(ctx, t, f.resolve); err != nil {
		return nil, err
	}
	return f, nil
}

// SubmitFunc is Submit with a callback: fn is called once with the result
// after it is durable (not when the queue stops first). fn runs on the
// queue's goroutines: keep it short.
func (q *Queue) SubmitFunc(ctx context.Context, t Task, fn func(Result)) error {
	return q.accept(ctx, t, func(r Result, err error) {
		if err == nil {
			fn(r)
		}
	})
}

// SubmitBatchFunc is SubmitFunc for many tasks at once: it accepts them
// in order and stores the new ones together, in one Store call for as many
// as MaxQueued has room for (one commit on the SQLite store), where
// SubmitFunc makes a call for each. fn is called once for each accepted
// task, with its index, after its result is durable (not when the queue
// stops first); it runs on the queue's goroutines: keep it short.
//
// errs[i] is task i's error: nil once it is accepted; a *TaskError when it
// is invalid, which does not stop the others; or the reason the call
// stopped before accepting it (ctx done while waiting for room, ErrClosed,
// the Store failing), for it and every task not yet accepted.
func (q *Queue) SubmitBatchFunc(ctx context.Context, tasks []Task, fn func(i int, r Result)) (errs []error) {
	return q.acceptBatch(ctx, tasks, func(i int) func(Result, error) {
		return func(r Result, err error) {
			if err == nil {
				fn(i, r)
			}
		}
	})
}

// Adopt takes a record as it is, for tasks handed over from elsewhere (a
// redelivered queue message): a record in flight with a CaptchaID resumes
// polling instead of being submitted again; a queued one keeps its
// attempts. A task the Store already knows is not overwritten. It comes
// in by the queue's one intake, as Submit's tasks do.
func (q *Queue) Adopt(ctx context.Context, r Record) (*Future, error) {
	t := r.Task
	f := newFuture(t.ID)
	if r.Result != nil && r.Status.Final() {
		f.resolve(*r.Result, nil)
		return f, nil
	}
	v, err := q.Check(t)
	if err != nil {
		return nil, err
	}
	in := &intakeBatch{
		tasks: []Task{t}, pts: []provider.Checked{v.Checked()}, ws: []func(Result, error){f.resolve},
		errs: []error{nil}, adopted: []*Record{&r},
	}
	if err := q.intake(ctx, in)[0]; err != nil {
		return nil, err
	}
	return f, nil
}

// Get returns a task's record from the Store.
func (q *Queue) Get(ctx context.Context, id string) (Record, error) {
	return q.store.Get(ctx, id)
}

// Cancel fails a queued task with ErrorCode CANCELED. A task in flight
// cannot be canceled (the provider is already solving it and bills the
// thread either way): Cancel returns ErrInFlight. A finished task gives
// ErrFinal, an unknown one ErrNotFound.
func (q *Queue) Cancel(ctx context.Context, id string) error {
	var st *taskState
	var ok, queued bool
	q.table.Do(func(tx table) {
		if st, ok = tx.Get(id); ok {
			_, queued = tx.Waiting().Remove(id)
		}
	})
	if !ok {
		r, err := q.store.Get(ctx, id)
		if err != nil {
			return err
		}
		if r.Status.Final() {
			return fmt.Errorf("captchaq: cancel %q: %w", id, ErrFinal)
		}
		return fmt.Errorf("captchaq: cancel %q: task is not held by this queue", id)
	}
	if !queued {
		return fmt.Errorf("captchaq: cancel %q: %w", id, ErrInFlight)
	}
	q.finish(st, q.failure(st, st.rec.Attempts, CodeCanceled, "canceled before it was submitted"))
	return nil
}

// Abandon lets go of a task this queue holds, queued or in flight,
// because another process holds it now (amqp's Worker, once the broker
// has given the task to the fleet): it is not submitted or polled again,
// its thread is freed, and it finishes failed with ErrorCode CANCELED
// through the Store's Finish, whose job is to record nothing for it. A
// task being submitted right now gives ErrInFlight (try again once the
// submit is answered); a finished or unknown one, as Cancel.
func (q *Queue) Abandon(ctx context.Context, id string) error {
	var st *taskState
	var ok, held bool
	q.table.Do(func(tx table) {
		if st, ok = tx.Get(id); !ok {
			return
		}
		_, held = tx.Waiting().Remove(id)
		if !held {
			f, flying := tx.InFlight(id)
			held = flying && f == st
		}
	})
	if !ok {
		return q.Cancel(ctx, id)
	}
	if !held {
		return fmt.Errorf("captchaq: abandon %q: %w", id, ErrInFlight)
	}
	q.finish(st, q.failure(st, st.rec.Attempts, CodeCanceled, "abandoned: another process holds it now"))
	return nil
}

// Resume lifts every pause caused by an account error (after the key or
// allow-list is fixed); sending starts again at once.
func (q *Queue) Resume() {
	if q.pauses.Resume() {
		q.log.Info("sending resumed")
	}
	q.wakeDispatcher()
	for _, p := range q.pollers {
		p.Wake()
	}
}

// Paused returns the *AccountError that paused all sending, or nil. With
// several providers, sending stops only when every one is paused; the
// error is the first provider's.
func (q *Queue) Paused() error {
	if p := q.pausedNow(q.now()); p != nil {
		return p
	}
	return nil
}

// Shutdown stops intake (Submit and its kin return ErrClosed), then waits
// until every accepted task has its result or ctx is done, then stops the
// queue's loops and returns. Tasks still unfinished when ctx ends stay in
// the Store for the next Start (their Futures return ErrClosed) and
// Shutdown returns ctx's error. On a queue never started it only stops
// intake. The Store is not closed.
func (q *Queue) Shutdown(ctx context.Context) error {
	q.mu.Lock()
	started := q.started
	q.closed.Store(true)
	q.mu.Unlock()
	if !started {
		// Nothing runs; accepted tasks stay in the Store.
		q.stop()
		return nil
	}
	q.wakeCapacityWaiters()
	var err error
	for {
		n, idle := q.table.Idle()
		if n == 0 {
			break
		}
		select {
		case <-idle:
			continue
		case <-ctx.Done():
			err = ctx.Err()
		}
		break
	}
	q.stop()
	return err
}

// Close stops the queue now: intake ends, requests in progress are
// abandoned, loops stop. Queued and in-flight tasks stay in the Store
// (in-flight ones with their provider id, to be polled by the next
// Start); their Futures return ErrClosed. The Store is not closed.
func (q *Queue) Close() error {
	q.mu.Lock()
	q.closed.Store(true)
	q.mu.Unlock()
	q.stop()
	return nil
}

func (q *Queue) stop() {
	q.mu.Lock()
	if q.stopped.Load() {
		q.mu.Unlock()
		q.stopLoops()
		return
	}
	q.stopped.Store(true)
	q.closed.Store(true)
	q.mu.Unlock()
	q.runCancel()
	q.stopLoops()
	var ws []func(Result, error)
	q.table.Do(func(tx table) {
		tx.Each(func(st *taskState) {
			ws = append(ws, st.waiters...)
			st.waiters = nil
		})
	})
	for _, w := range ws {
		w(Result{}, ErrClosed)
	}
}

// stopLoops waits for the loops, then for the submits they started.
func (q *Queue) stopLoops() {
	for _, l := range q.loops {
		l.Stop()
	}
	q.wg.Wait()
}

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

// Reservoirs returns each reservoir's counts, in Config.Reservoirs'
// order; none without reservoirs.
func (q *Queue) Reservoirs() []ReservoirCounts { return q.res.Counts(q.now()) }

// SetReservoirs makes rcs the reservoirs of a queue started with some,
// validated as Config.Reservoirs (nothing changes on an error). A
// reservoir kept by name with the same method and params keeps its stock,
// counts and refills in flight; the stock of one removed, or whose
// captcha changed, is dropped. It logs what changed.
func (q *Queue) SetReservoirs(rcs []ReservoirConfig) error {
	if q.res == nil {
		return errors.New("captchaq: Reservoirs: the queue was built without reservoirs and runs no refill loop; build it with them")
	}
	c := q.cfg
	c.Reservoirs = rcs
	c = c.withReservoirDefaults()
	if errs := c.checkReservoirs(c.threads()); len(errs) > 0 {
		return fmt.Errorf("captchaq: invalid Reservoirs: %w", errors.Join(errs...))
	}
	q.res.Set(c.Reservoirs, c.Providers)
	return nil
}

// reservoirHost is what the reservoirs use of q.
func (q *Queue) reservoirHost() engine.ReservoirHost {
	return engine.ReservoirHost{
		Now: q.now, StoreCtx: q.storeCtx, Log: q.log, Journal: q.journal, Metrics: q.metrics,
		Delivered: func(r Result) {
			q.logResult(r)
			if q.cfg.OnResult != nil {
				q.cfg.OnResult(r)
			}
		},
		Submit: func(ctx context.Context, tasks []Task) []error {
			none := func(int) func(Result, error) { return func(Result, error) {} }
			return q.acceptBatch(ctx, tasks, none)
		},
	}
}

// Metrics returns a snapshot.
func (q *Queue) Metrics() Metrics {
	return engine.Metrics(q.now(), engine.MetricsSources{
		Counts: q.metrics, Lanes: q.lanes.Lanes(), Inboxes: q.inboxes,
		Waiting: func() (depth int, w tally.Waiting) {
			w = tally.NewWaiting()
			q.table.Do(func(tx table) {
				depth = tx.Waiting().Len()
				tx.Waiting().Each(func(it sched.Item[*taskState]) { w.Add(it.Priority, it.Enqueued) })
			})
			return depth, w
		},
		Paused: func(now time.Time) error {
			if p := q.pausedNow(now); p != nil {
				return p
			}
			return nil
		},
	})
}
