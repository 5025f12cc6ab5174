package captchaq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/captchaq/captchaq/internal/lane"
	"github.com/captchaq/captchaq/internal/latency"
	"github.com/captchaq/captchaq/internal/poller"
	"github.com/captchaq/captchaq/internal/pollsched"
	"github.com/captchaq/captchaq/internal/sched"
	"github.com/captchaq/captchaq/internal/startstop"
	"github.com/captchaq/captchaq/provider"
)

// Queue solves tasks through a Provider: it keeps the plan's threads busy,
// submits urgent tasks first, polls every task in flight in one bulk
// request, retries by error class and keeps every step in its Store.
//
// Create one with New, call Start, Submit tasks, and end with Shutdown (or
// Close). All methods are safe for concurrent use.
type Queue struct {
	cfg      Config
	log      *slog.Logger
	store    Store
	estimate *latency.Estimator
	// lanes are the providers, in order of preference; one for
	// Config.Provider. pollers[i] polls the tasks in flight at lanes[i].
	lanes   []*lane.Lane
	pollers []*poller.Poller[*taskState]

	// runCtx ends on Close or at the end of Shutdown; store writes use a
	// context without its cancellation so a checkpoint is never lost.
	runCtx    context.Context
	runCancel context.CancelFunc
	wg        sync.WaitGroup

	dispatcher *dispatcher
	loops      []*startstop.Loop // the dispatcher's and each lane poller's run

	mu      sync.Mutex
	started bool
	closed  bool // intake stopped
	stopped bool // loops stopped
	tasks   map[string]*taskState
	// accepting holds the ids between their claim and their registration
	// (Enqueue in progress), so one id is stored and registered once while
	// different ids are stored concurrently (the Store groups their commits).
	accepting      map[string]chan struct{}
	queue          *sched.Scheduler[*taskState]
	inflight       map[string]*taskState // by task id
	byCaptchaID    map[string]*taskState // by the provider's id as stored (lane.storedID), for pingbacks
	capacityFreed  chan struct{}         // closed and replaced when a task finishes (waitCapacity)
	idle           chan struct{}         // closed and replaced when tasks becomes empty
	resumes        int                   // Resume calls; answers to requests sent before one cannot re-pause
	earlyPingbacks map[string]pingback   // pingbacks that beat their checkpoint
	paused         bool                  // every lane paused (OnPause was called)
	bursts         bursts
	metrics        counters
}

// taskState is the queue's memory of one unfinished task.
type taskState struct {
	rec Record
	// pt is the task as the provider is sent it, checked at the door
	// (provider.Task.Check): it is not validated again.
	pt      provider.Checked
	kind    provider.Kind
	burst   int64 // the burst it was accepted in (order.go)
	waiters []func(Result, error)
	// class is the set of lanes that solve it (bit i for lane i).
	class uint64
	// waitingSince is when it last joined the queue, for SpillAfter.
	waitingSince time.Time

	// lane holds it while it has a slot there; price is what the
	// attempt there costs.
	lane  *lane.Lane
	price float64
	// paid is what earlier attempts cost: the solve abandoned at each
	// provider in abandoned, which may bill it too.
	paid      float64
	abandoned []string

	transient   int  // consecutive transient submit failures (backoff)
	accountErrs int  // account errors its submits drew that no check told apart
	slot        bool // holds a limiter slot
	done        bool // finishing or finished

	// resumed: the captcha id came from the Store or another process, not
	// from a submit of this queue's. If the provider no longer knows it (a
	// provider restarted, or the answer expired while nobody polled), the
	// task is submitted again instead of failing.
	resumed bool
}

// New checks cfg and returns a Queue that is not yet started.
func New(cfg Config) (*Queue, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	q := &Queue{
		cfg:            cfg,
		log:            cfg.Logger,
		store:          cfg.Store,
		estimate:       latency.NewEstimator(estimateQuantile, estimateSamples, func(k string) time.Duration { return provider.TypicalSolveTime(provider.Kind(k)) }),
		tasks:          map[string]*taskState{},
		accepting:      map[string]chan struct{}{},
		queue:          sched.New[*taskState](sched.Config{AgingInterval: cfg.AgingInterval, Weights: cfg.TenantWeights}),
		inflight:       map[string]*taskState{},
		byCaptchaID:    map[string]*taskState{},
		earlyPingbacks: map[string]pingback{},
		capacityFreed:  make(chan struct{}),
		idle:           make(chan struct{}),
	}
	q.metrics.init()
	q.runCtx, q.runCancel = context.WithCancel(context.Background())
	q.dispatcher = newDispatcher(q)
	q.lanes = newLanes(cfg)
	q.loops = []*startstop.Loop{startstop.New(q.dispatcher.run)}
	for _, l := range q.lanes {
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

func (q *Queue) now() time.Time { return q.cfg.Now() }

// storeCtx is for store writes: they outlive Close so no checkpoint or
// result is half-written.
func (q *Queue) storeCtx() context.Context { return context.WithoutCancel(q.runCtx) }

// Start resumes the Store's pending tasks (tasks in flight are polled, not
// submitted again) and starts the queue's loops. ctx bounds the resume
// only; stop the queue with Shutdown or Close. A Close or Shutdown that
// comes while Start runs wins: Start returns ErrClosed and leaves nothing
// running.
func (q *Queue) Start(ctx context.Context) error {
	q.mu.Lock()
	if q.started || q.closed {
		q.mu.Unlock()
		return errors.New("captchaq: Start called twice or after Close")
	}
	q.started = true
	q.metrics.Started = q.now()
	q.mu.Unlock()

	var resumed, polling int
	err := q.store.Pending(ctx, func(r Record) error {
		q.mu.Lock()
		defer q.mu.Unlock()
		if q.stopped {
			return ErrClosed
		}
		if _, ok := q.tasks[r.Task.ID]; ok {
			return nil
		}
		if _, ok := q.accepting[r.Task.ID]; ok {
			return nil // a Submit is storing it now and registers the stored record
		}
		st := q.register(r, nil, provider.Checked{})
		resumed++
		q.metrics.countResumed(st)
		if r.Status == StatusInFlight {
			polling++
		}
		return nil
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
	if q.stopped {
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

// register adds an unfinished record to memory: queued ones to the
// scheduler, in-flight ones to the poller with a slot taken. Callers hold
// q.mu.
func (q *Queue) register(r Record, w func(Result, error), pt provider.Checked) *taskState {
	if pt.Method == "" {
		// From the Store: checked here, at this door. A task that fails
		// is sent unchecked, and the provider's client refuses it.
		var err error
		if pt, err = q.check(r.Task); err != nil {
			pt = provider.Unchecked(r.Task.ProviderTask())
		}
	}
	st := &taskState{rec: r, pt: pt, class: q.routeClass(r.Task), burst: q.bursts.of(r.AcceptedAt)}
	st.kind, _ = r.Task.ProviderTask().KindFor(provider.KnownMethods)
	if w != nil {
		st.waiters = append(st.waiters, w)
	}
	q.tasks[r.Task.ID] = st
	if r.Status == StatusInFlight && r.CaptchaID != "" {
		if l, id, ok := q.laneOf(r.CaptchaID); ok {
			l.Limiter.Take()
			st.slot, st.lane, st.price = true, l, priceAt(l, r.Task)
			st.rec.CaptchaID = id
			st.resumed = true
			q.inflight[r.Task.ID] = st
			q.byCaptchaID[l.StoredID(id)] = st
			// Due at once: answers may have waited while we were away.
			q.pollerOf(l).Track(r.Task.ID, st, id, st.kind, r.SubmittedAt, r.Task.Deadline, q.now(), true)
			return st
		}
		q.log.Warn("task in flight at a provider this queue no longer has: submitting it again", "id", r.Task.ID)
	}
	st.rec.Status, st.rec.CaptchaID = StatusQueued, ""
	q.push(st)
	return st
}

// push hands a queued task to the scheduler. Callers hold q.mu.
func (q *Queue) push(st *taskState) {
	t := st.rec.Task
	now := q.now()
	st.waitingSince = pollsched.Later(now, st.rec.NotBefore)
	q.queue.Push(sched.Item[*taskState]{
		ID: t.ID, Value: st, Priority: effectivePriority(t), Seq: st.rec.Seq, Tenant: t.Tenant,
		Burst: st.burst, Expected: provider.MedianSolveTime(st.kind), Enqueued: st.rec.AcceptedAt, NotBefore: st.rec.NotBefore, Deadline: t.Deadline, Class: st.class,
	}, now)
	q.dispatcher.wake()
}

func (q *Queue) maxAttempts(t Task) int {
	if t.MaxAttempts > 0 {
		return t.MaxAttempts
	}
	return q.cfg.MaxAttempts
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

func (q *Queue) accept(ctx context.Context, t Task, w func(Result, error)) error {
	return q.acceptBatch(ctx, []Task{t}, func(int) func(Result, error) { return w })[0]
}

// attach adds a waiter to a known unfinished task.
func (q *Queue) attach(id string, w func(Result, error)) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	st, ok := q.tasks[id]
	if ok {
		st.waiters = append(st.waiters, w)
	}
	return ok
}

// claimIntake reserves id for the caller to store and register, or attaches w to
// the task when it is already registered (attached true). While another
// caller holds the claim, claimIntake waits for it. release must be called after
// the task is registered (or storing failed).
func (q *Queue) claimIntake(ctx context.Context, id string, w func(Result, error)) (release func(), attached bool, err error) {
	for {
		q.mu.Lock()
		if st, ok := q.tasks[id]; ok {
			st.waiters = append(st.waiters, w)
			q.mu.Unlock()
			return nil, true, nil
		}
		busy, ok := q.accepting[id]
		if !ok {
			done := make(chan struct{})
			q.accepting[id] = done
			q.mu.Unlock()
			return func() {
				q.mu.Lock()
				delete(q.accepting, id)
				q.mu.Unlock()
				close(done)
			}, false, nil
		}
		q.mu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
}

// waitCapacity blocks until there is room for want more unfinished tasks
// under MaxQueued, and returns how many there is room for.
func (q *Queue) waitCapacity(ctx context.Context, want int) (int, error) {
	for {
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return 0, ErrClosed
		}
		if room := q.cfg.MaxQueued - len(q.tasks); room >= want {
			q.mu.Unlock()
			return room, nil
		}
		freed := q.capacityFreed
		q.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-q.runCtx.Done():
			return 0, ErrClosed
		}
	}
}

// Adopt takes a record as it is, for tasks handed over from elsewhere (a
// redelivered queue message): a record in flight with a CaptchaID resumes
// polling instead of being submitted again; a queued one keeps its
// attempts. A task the Store already knows is not overwritten.
func (q *Queue) Adopt(ctx context.Context, r Record) (*Future, error) {
	t := r.Task
	f := newFuture(t.ID)
	if r.Result != nil && final(r.Status) {
		f.resolve(*r.Result, nil)
		return f, nil
	}
	pt, err := q.check(t)
	if err != nil {
		return nil, err
	}
	if q.attach(t.ID, f.resolve) {
		return f, nil
	}
	if _, err := q.waitCapacity(ctx, 1); err != nil {
		return nil, err
	}
	release, attached, err := q.claimIntake(ctx, t.ID, f.resolve)
	if err != nil {
		return nil, err
	}
	if attached {
		return f, nil
	}
	defer release()
	now := q.now()
	recs, existed, err := q.store.Enqueue(ctx, []Task{t}, now)
	if err != nil {
		return nil, fmt.Errorf("captchaq: adopt %q: %w", t.ID, err)
	}
	stored := recs[0]
	if existed[0] {
		if err := stored.Conflict(t); err != nil {
			return nil, err
		}
	}
	switch {
	case existed[0] && stored.Result != nil && final(stored.Status):
		f.resolve(*stored.Result, nil)
		return f, nil
	case existed[0]:
		// The Store's record is the truth.
	case r.Status == StatusInFlight && r.CaptchaID != "":
		at := r.SubmittedAt
		if at.IsZero() {
			at = now
		}
		if err := q.store.Checkpoint(ctx, t.ID, r.CaptchaID, max(r.Attempts, 1), at); err != nil {
			return nil, fmt.Errorf("captchaq: adopt %q: %w", t.ID, err)
		}
		stored.Status, stored.CaptchaID, stored.Attempts, stored.SubmittedAt = StatusInFlight, r.CaptchaID, max(r.Attempts, 1), at
	case r.Attempts > 0 || !r.NotBefore.IsZero():
		if err := q.store.Retry(ctx, t.ID, r.Attempts, r.NotBefore, r.LastError, r.LastErrorCode); err != nil {
			return nil, fmt.Errorf("captchaq: adopt %q: %w", t.ID, err)
		}
		stored.Attempts, stored.NotBefore, stored.LastError, stored.LastErrorCode = r.Attempts, r.NotBefore, r.LastError, r.LastErrorCode
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil, ErrClosed
	}
	q.register(stored, f.resolve, pt)
	if !existed[0] {
		q.metrics.submitted++
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
	q.mu.Lock()
	st, ok := q.tasks[id]
	if !ok {
		q.mu.Unlock()
		r, err := q.store.Get(ctx, id)
		if err != nil {
			return err
		}
		if final(r.Status) {
			return fmt.Errorf("captchaq: cancel %q: %w", id, ErrFinal)
		}
		return fmt.Errorf("captchaq: cancel %q: task is not held by this queue", id)
	}
	if _, queued := q.queue.Remove(id); !queued {
		q.mu.Unlock()
		return fmt.Errorf("captchaq: cancel %q: %w", id, ErrInFlight)
	}
	q.mu.Unlock()
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
	q.mu.Lock()
	st, ok := q.tasks[id]
	if !ok {
		q.mu.Unlock()
		return q.Cancel(ctx, id)
	}
	_, queued := q.queue.Remove(id)
	if !queued && q.inflight[id] != st {
		q.mu.Unlock()
		return fmt.Errorf("captchaq: abandon %q: %w", id, ErrInFlight)
	}
	q.mu.Unlock()
	q.finish(st, q.failure(st, st.rec.Attempts, CodeCanceled, "abandoned: another process holds it now"))
	return nil
}

// Resume lifts every pause caused by an account error (after the key or
// allow-list is fixed); sending starts again at once.
func (q *Queue) Resume() {
	q.mu.Lock()
	was := false
	for _, l := range q.lanes {
		was = l.Resume() || was
	}
	q.paused = false
	q.resumes++
	q.mu.Unlock()
	if was {
		q.log.Info("sending resumed")
	}
	q.dispatcher.wake()
	for _, p := range q.pollers {
		p.Wake()
	}
}

// Paused returns the *AccountError that paused all sending, or nil. With
// several providers, sending stops only when every one is paused; the
// error is the first provider's.
func (q *Queue) Paused() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if p := q.pausedLocked(q.now()); p != nil {
		return p
	}
	return nil
}

// pausedLocked returns the pause in force at now when every lane is
// paused, lifting expired ones.
func (q *Queue) pausedLocked(now time.Time) *AccountError {
	var first *AccountError
	for _, l := range q.lanes {
		p := l.Paused(now)
		if p == nil {
			q.paused = false
			return nil
		}
		if first == nil {
			first = accountError(l, p)
		}
	}
	return first
}

// accountError is l's pause as the API tells it.
func accountError(l *lane.Lane, p *lane.Pause) *AccountError {
	return &AccountError{Code: p.Code, Until: p.Until, Err: p.Err, Provider: l.Name()}
}

// pollerOf is the poller of l's tasks in flight.
func (q *Queue) pollerOf(l *lane.Lane) *poller.Poller[*taskState] { return q.pollers[l.Index()] }

// epoch identifies the pause state a request was sent under.
func (q *Queue) epoch() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.resumes
}

// pauseAll stops all sending to l after an account error, keeping every
// task. An answer to a request sent before the latest Resume is stale and
// does not pause again.
func (q *Queue) pauseAll(l *lane.Lane, err error, sentAt int) { q.pauseFor(l, err, sentAt, 0) }

// pauseFor is pauseAll with a pause of at least d. OnPause is called when
// the last lane sending pauses.
func (q *Queue) pauseFor(l *lane.Lane, err error, sentAt int, d time.Duration) {
	var pe *provider.Error
	errors.As(err, &pe)
	p := &lane.Pause{Err: err}
	if pe != nil {
		p.Code = pe.Code
		d = max(d, pe.RetryAfter)
	}
	now := q.now()
	if d > 0 {
		p.Until = now.Add(d)
	}
	ae := accountError(l, p)
	q.mu.Lock()
	if sentAt != q.resumes {
		q.mu.Unlock()
		return
	}
	first := l.SetPause(p)
	all := !q.paused && q.pausedLocked(now) != nil
	permanent := true
	if all {
		q.paused = true
		for _, o := range q.lanes {
			op := o.Paused(now)
			permanent = permanent && op != nil && op.Until.IsZero()
		}
	}
	q.mu.Unlock()
	if first {
		if q.multi() {
			q.log.Error("PROVIDER PAUSED: it refused the account; its tasks go to the other providers", "provider", l.Name(), "code", ae.Code, "reason", ae.Error())
		} else {
			q.log.Error("ALL SENDING PAUSED: the provider refused the account; every task is kept", "code", ae.Code, "reason", ae.Error())
		}
	}
	if all && q.cfg.OnPause != nil {
		q.cfg.OnPause(ae, permanent)
	}
	q.dispatcher.wake()
	q.pollerOf(l).Wake()
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
	q.closed = true
	q.mu.Unlock()
	if !started {
		// Nothing runs; accepted tasks stay in the Store.
		q.stop()
		return nil
	}
	q.wakeCapacityWaiters()
	var err error
	for {
		q.mu.Lock()
		n, idle := len(q.tasks), q.idle
		q.mu.Unlock()
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
	q.closed = true
	q.mu.Unlock()
	q.stop()
	return nil
}

func (q *Queue) stop() {
	q.mu.Lock()
	if q.stopped {
		q.mu.Unlock()
		q.stopLoops()
		return
	}
	q.stopped, q.closed = true, true
	q.mu.Unlock()
	q.runCancel()
	q.stopLoops()
	q.mu.Lock()
	var ws []func(Result, error)
	for _, st := range q.tasks {
		ws = append(ws, st.waiters...)
		st.waiters = nil
	}
	q.mu.Unlock()
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

func (q *Queue) wakeCapacityWaiters() {
	q.mu.Lock()
	close(q.capacityFreed)
	q.capacityFreed = make(chan struct{})
	q.mu.Unlock()
}

// stopping reports whether the loops must end.
func (q *Queue) stopping() bool { return q.runCtx.Err() != nil }
