package captchaq

import (
	"cmp"
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/captchaq/captchaq/internal/dispatch"
	"github.com/captchaq/captchaq/internal/engine"
	"github.com/captchaq/captchaq/internal/lane"
	"github.com/captchaq/captchaq/internal/latency"
	"github.com/captchaq/captchaq/internal/pingback"
	"github.com/captchaq/captchaq/internal/poller"
	"github.com/captchaq/captchaq/internal/pollsched"
	"github.com/captchaq/captchaq/internal/sched"
	"github.com/captchaq/captchaq/internal/startstop"
	"github.com/captchaq/captchaq/internal/tally"
	"github.com/captchaq/captchaq/internal/tasktable"
	"github.com/captchaq/captchaq/provider"
)

// The queue's state: the Queue, what it keeps of each unfinished task, and
// a task's entry into it (register, push), shared by the queue's parts
// (intake, dispatcher, submits, pollers, results) through its task table
// (internal/tasktable), whose lock guards each task's fields too. The
// other files hold the parts; docs/engine.md says where each part's state
// goes.

// Queue solves tasks through a Provider: it keeps the plan's threads busy,
// submits urgent tasks first, polls every task in flight in one bulk
// request, retries by error class and keeps every step in its Store.
//
// Create one with New, call Start, Submit tasks, and end with Shutdown (or
// Close). All methods are safe for concurrent use.
type Queue struct {
	cfg      Config
	fleet    Fleet // nil: the queue is not in a fleet
	log      *slog.Logger
	store    Store
	journal  Journal // the Store's steps, or the fleet's Journal
	estimate *latency.Estimator
	// lanes are the providers, in order of preference, and the routing
	// among them; one unnamed lane for Config.Provider (lanes.Single).
	// pollers[i] polls the tasks in flight at lane i.
	lanes   *lane.Set
	pollers []*poller.Poller[*taskState]

	// runCtx ends on Close or at the end of Shutdown; store writes use a
	// context without its cancellation so a checkpoint is never lost.
	runCtx    context.Context
	runCancel context.CancelFunc
	wg        sync.WaitGroup

	dispatcher *dispatch.Loop // runs pass (dispatcher.go); wakeDispatcher wakes it
	// waiting is what a pass asks of a waiting task: which lanes may
	// take it (lane.Set.Route) and its price at each (priceAt).
	waiting dispatch.Tasks[*taskState]
	loops   []*startstop.Loop // the dispatcher's and each lane poller's run

	// mu guards the lifecycle: started; closed and stopped are written
	// under it and read anywhere.
	mu      sync.Mutex
	started bool
	closed  atomic.Bool  // intake stopped
	stopped atomic.Bool  // loops stopped
	pauses  *lane.Pauses // the lanes' pauses, as the queue sees them
	// unserved: a waiting task's type may be refused by every provider
	// that solves it (the next pass fails those: failUnserved).
	unserved atomic.Bool
	// refusals keeps the lanes' refusals of types in the Store.
	refusals *engine.Refusals

	// table holds every unfinished task: by id, the ids being stored
	// (claims: one id is stored and added once while different ids are
	// stored concurrently, the Store grouping their commits), those in
	// flight (by the provider's id as stored, lane.StoredID, for
	// pingbacks) and the waiting ones in order. Its lock also guards the
	// fields of each taskState below and bursts, which are read and
	// written only inside table.Do.
	table  *tasktable.Table[*taskState]
	bursts sched.Bursts

	metrics *tally.Counters // under their own lock, a leaf
	// res are the reservoirs (internal/engine), nil without any; they
	// keep their state under their own lock, a leaf.
	res *engine.Reservoirs

	// inboxes[i] is lane i's side of the pingbacks: the secret its URL
	// carries and the pingbacks that beat their checkpoint.
	inboxes []*pingback.Inbox
}

// taskState is the queue's memory of one unfinished task. Its fields
// change only inside q.table.Do (the task table's lock); the ones set at
// register and never after (pt, route, kind, burst, class) are read
// anywhere.
type taskState struct {
	rec Record
	// pt is the task as the provider is sent it, checked at the door
	// (provider.Task.Check): it is not validated again.
	pt      provider.Checked
	route   string // pt's route method (provider.Task.RouteMethod)
	kind    provider.Kind
	burst   int64 // the burst it was accepted in (sched.Bursts)
	waiters []func(Result, error)
	// class is the set of lanes that solve it (bit i for lane i).
	class uint64
	// waitingSince is when it last joined the queue, for SpillAfter.
	waitingSince time.Time
	// proxy is its proxy as a provider taking only IP addresses is sent it.
	proxy engine.TaskProxy

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

// routing is what the lanes' routing (lane.Set.Route) knows of st.
func (st *taskState) routing() lane.Waiting {
	return lane.Waiting{Class: st.class, Route: st.route, Kind: st.kind, Since: st.waitingSince, Deadline: st.rec.Task.Deadline}
}

// priceAt is what one solve of st costs at l (0 on a flat-rate plan).
func priceAt(l *lane.Lane, st *taskState) float64 { return l.PriceOf(st.route) }

func (q *Queue) now() time.Time { return q.cfg.Now() }

// storeCtx is for store writes: they outlive Close so no checkpoint or
// result is half-written.
func (q *Queue) storeCtx() context.Context { return context.WithoutCancel(q.runCtx) }

// wakeDispatcher asks the dispatcher for a pass soon; it never blocks.
func (q *Queue) wakeDispatcher() { q.dispatcher.Wake() }

// pollerOf is the poller of l's tasks in flight.
func (q *Queue) pollerOf(l *lane.Lane) *poller.Poller[*taskState] { return q.pollers[l.Index()] }

// stopping reports whether the loops must end.
func (q *Queue) stopping() bool { return q.runCtx.Err() != nil }

// register adds an unfinished record to the table: queued ones to the
// scheduler, in-flight ones to the poller with a slot taken. It runs
// inside q.table.Do.
func (q *Queue) register(tx table, r Record, w func(Result, error), pt provider.Checked) *taskState {
	route := pt.RouteMethod()
	st := &taskState{rec: r, pt: pt, route: route, class: q.lanes.Class(route), burst: q.bursts.Of(r.AcceptedAt)}
	st.kind, _ = pt.KindFor(provider.KnownMethods)
	if w != nil {
		st.waiters = append(st.waiters, w)
	}
	tx.Add(r.Task.ID, st)
	if r.Status == StatusInFlight && r.CaptchaID != "" {
		if l, id, ok := q.lanes.Of(r.CaptchaID); ok {
			l.Limiter.Take()
			st.slot, st.lane, st.price = true, l, priceAt(l, st)
			st.rec.CaptchaID = id
			st.resumed = true
			tx.Fly(r.Task.ID, l.StoredID(id), st)
			// Due at once: answers may have waited while we were away.
			q.pollerOf(l).Track(r.Task.ID, st, id, st.kind, r.SubmittedAt, r.Task.Deadline, q.now(), true, provider.GivenBindings(st.kind, r.Task.Params))
			return st
		}
		q.log.Warn("task in flight at a provider this queue no longer has: submitting it again", "id", r.Task.ID)
	}
	st.rec.Status, st.rec.CaptchaID = StatusQueued, ""
	q.push(tx, st)
	return st
}

// table is the task table inside q.table.Do.
type table = tasktable.Tx[*taskState]

// push hands a queued task to the scheduler. It runs inside q.table.Do.
func (q *Queue) push(tx table, st *taskState) {
	t := st.rec.Task
	now := q.now()
	st.waitingSince = pollsched.Later(now, st.rec.NotBefore)
	if q.lanes.Unserved(st.class, st.route, now) {
		q.unserved.Store(true)
	}
	tx.Waiting().Push(sched.Item[*taskState]{
		ID: t.ID, Value: st, Priority: effectivePriority(t), Seq: st.rec.Seq, Tenant: t.Tenant,
		Burst: st.burst, Expected: provider.MedianSolveTime(st.kind), Enqueued: st.rec.AcceptedAt, NotBefore: st.rec.NotBefore, Deadline: t.Deadline, Class: st.class,
	}, now)
	q.wakeDispatcher()
}

// effectivePriority is t's priority, PriorityDefault for none.
func effectivePriority(t Task) int { return cmp.Or(t.Priority, PriorityDefault) }

func (q *Queue) maxAttempts(t Task) int {
	if t.MaxAttempts > 0 {
		return t.MaxAttempts
	}
	return q.cfg.MaxAttempts
}
