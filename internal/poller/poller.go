// Package poller is the loop that polls one provider's tasks in flight:
// one Poller per lane. It owns their poll timing (submitted at, last
// not-ready poll, last polled, next due) and the provider's learned solve
// time distributions, behind its own lock, and is fed by events from the
// task table: Track when a task's captcha id is durable, Forget when it
// leaves flight, DueNow when a pingback says to look at once. What a
// round (round.go) finds goes back to the table through its Sink: an answer, a
// per-id refusal, a round that failed as a whole, a task past its poll
// budget or result window (Config.Budget, Window), which it no longer
// polls.
//
// Its lock is a leaf: no other lock is taken while it is held, and the
// Sink is never called under it. Rounds follow the default scheduler
// (internal/pollsched) or, with Config.Adaptive false, a fixed interval.
package poller

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/captchaq/captchaq/internal/lane"
	"github.com/captchaq/captchaq/internal/pollsched"
	"github.com/captchaq/captchaq/provider"
)

// Chunk is the most ids asked in one res.php request (2captcha's
// documented bulk limit).
const Chunk = 100

// Config is one poller's.
type Config struct {
	// Lane is the provider polled.
	Lane *lane.Lane
	// Adaptive: rounds follow the default scheduler (PollInterval left 0
	// and no pingbacks); else a fixed cadence of PollInterval.
	Adaptive     bool
	PollInterval time.Duration
	// PollGap is the shortest time between two polls of one id on the
	// default scheduler.
	PollGap time.Duration
	// Rule is the provider's own rule for one id (0: none), which the
	// fixed cadence keeps too.
	Rule time.Duration
	// RequestCost is what one poll request costs, in answer-seconds, at a
	// provider polled id by id (pollsched.DecideEach): the queue's
	// PollGap. Default PollGap.
	RequestCost time.Duration
	// Budget bounds the polls of one task, and Window the time after its
	// submit in which it may be polled (0: no bound). See budgetFloor.
	Budget int
	Window time.Duration
	// Repoll is the time between two polls of one task on the fixed
	// cadence: PollInterval, or the slow fallback behind pingbacks.
	Repoll time.Duration
	// Backoff is the wait after the nth failed round in a row.
	Backoff func(n int) time.Duration
	// Requests is the context of every poll request: it ends when the
	// queue stops (a loop stopped and started again keeps its requests).
	Requests context.Context
	Now      func() time.Time
	Logger   *slog.Logger
}

// Sink is the task table's side of a round. Its methods are called
// without the poller's lock; they may call the poller back.
type Sink[T any] interface {
	// Ready gives an answer to the attempt with captchaID, seen at `at`;
	// lastPoll is the last poll that found it not ready (zero: none). It
	// reports whether the answer was taken (a pingback, or a move of the
	// task, may have come first).
	Ready(ref T, captchaID string, a provider.Answer, at, lastPoll time.Time) bool
	// Refused gives a per-id error of class unsolvable, task or account.
	Refused(ref T, captchaID string, err error, at time.Time, epoch int)
	// RoundFailed gives a round that failed as a whole with an account
	// error or a transport failure (lane.TransportFailure).
	RoundFailed(err error, at time.Time, epoch int)
	// Recovered says the lane answered after transport failures.
	Recovered()
	// Expired gives a task no longer polled, unanswered: err is
	// ErrPollBudget or ErrResultWindow.
	Expired(ref T, captchaID string, err error, at time.Time)
	// Epoch identifies the pause state a request is sent under.
	Epoch() int
}

// A task that reaches Config.Budget or Config.Window unanswered leaves the
// poller with one of these: its id may not be polled again.
var (
	ErrPollBudget   = errors.New("poll budget spent: the provider allows no more polls of this task")
	ErrResultWindow = errors.New("result window over: the provider no longer keeps this task's result")
)

// entry is one task in flight.
type entry[T any] struct {
	ref                 T
	captchaID           string
	kind                provider.Kind
	submitted, deadline time.Time
	due                 time.Time // next poll
	lastPoll            time.Time // last poll that found it not ready
	polledAt            time.Time // start of the round that last polled it
	polls               int       // polls asked for it
	id                  string    // its task id
	alone               bool      // polled alone, for its bindings (holdForBindings)
	given               bool      // given what its answer binds to (Track)
}

// Poller polls one lane's tasks in flight. Its methods are safe for
// concurrent use; Run is its loop.
type Poller[T any] struct {
	cfg    Config
	sink   Sink[T]
	wakeCh chan struct{}
	busy   atomic.Bool // tasks wait for a thread (Busy)

	mu             sync.Mutex
	tasks          map[string]*entry[T] // by task id
	last           time.Time            // start of the last round
	chain          time.Time            // when the tasks polled in the last round are due again
	pollsHeldUntil time.Time            // no rounds before (rate limit, backoff)
	failures       int                  // consecutive failed rounds
	learned        *pollsched.Learned
	misses         map[provider.Kind]int       // by kind, polls alone that brought no bindings (or binds)
	probes         map[provider.Kind]*entry[T] // by kind, the task polled alone to learn misses
}

// New returns a Poller that reports to sink.
func New[T any](c Config, sink Sink[T]) *Poller[T] {
	return &Poller[T]{cfg: c, sink: sink, wakeCh: make(chan struct{}, 1), tasks: map[string]*entry[T]{}, learned: pollsched.NewLearned(),
		misses: map[provider.Kind]int{}, probes: map[provider.Kind]*entry[T]{}}
}

// Adaptive reports whether rounds follow the default scheduler.
func (p *Poller[T]) Adaptive() bool { return p.cfg.Adaptive }

// Busy tells the poller whether tasks wait for a thread: while they do,
// an answer's wait weighs double (a paid thread waits too). It never
// blocks, and may be called under the caller's lock.
func (p *Poller[T]) Busy(b bool) { p.busy.Store(b) }

// Wake asks the loop to look again soon; it never blocks.
func (p *Poller[T]) Wake() {
	select {
	case p.wakeCh <- struct{}{}:
	default:
	}
}

// Track starts polling task id, in flight under captchaID since
// submitted: its first poll at firstDue (on the fixed cadence, moved onto
// the round nearest to it), or, with resumed, at once (answers may have
// waited while nobody polled). With given, the task was given what its
// answer is bound to (a reCAPTCHA's cookies, provider.GivenBindings): a
// ready token an ids= answer gives without its bindings waits for a poll
// of its id alone, whatever the polls alone of its kind brought before.
func (p *Poller[T]) Track(id string, ref T, captchaID string, kind provider.Kind, submitted, deadline, firstDue time.Time, resumed, given bool) {
	p.mu.Lock()
	due := firstDue
	if !resumed {
		due = p.alignLocked(p.cfg.Now(), firstDue)
	}
	p.tasks[id] = &entry[T]{id: id, ref: ref, captchaID: captchaID, kind: kind, submitted: submitted, deadline: deadline, due: due, given: given}
	p.mu.Unlock()
	p.Wake()
}

// Forget stops polling task id.
func (p *Poller[T]) Forget(id string) {
	p.mu.Lock()
	delete(p.tasks, id)
	p.mu.Unlock()
}

// DueNow asks for task id at once, if it is still in flight under
// captchaID (a pingback said its state changed).
func (p *Poller[T]) DueNow(id, captchaID string, at time.Time) {
	p.mu.Lock()
	e, ok := p.tasks[id]
	if ok && e.captchaID == captchaID {
		e.due = at
	}
	p.mu.Unlock()
	if ok {
		p.Wake()
	}
}

// Len is how many tasks are in flight here.
func (p *Poller[T]) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.tasks)
}

// minGap is the least time between two rounds: the request rate bound.
// The default scheduler starts rounds at least PollGap apart, so every
// round may ask for every id (none is within its per-id gap) and ids
// polled together stay together. A provider that answers one id a
// request is asked id by id, each at most once per PollGap from the
// answer to its last poll (see round), so rounds there may come every
// PollGap/eachRoundsPerGap, each asking for the ids whose gap has ended.
func (p *Poller[T]) minGap() time.Duration {
	switch {
	case p.cfg.Adaptive && p.eachID():
		return min(p.cfg.PollGap, p.requestCost()) / eachRoundsPerGap
	case p.cfg.Adaptive:
		return p.cfg.PollGap
	}
	return p.cfg.PollInterval / 4
}

// requestCost is what a request costs at a provider polled id by id:
// Config.RequestCost, else PollGap.
func (p *Poller[T]) requestCost() time.Duration {
	if p.cfg.RequestCost > 0 {
		return p.cfg.RequestCost
	}
	return p.cfg.PollGap
}

// eachRoundsPerGap: rounds per PollGap, at most, at a provider polled id
// by id.
const eachRoundsPerGap = 4

// Run is the loop: it sleeps until the next round is due, runs it, and
// returns when ctx ends.
func (p *Poller[T]) Run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := p.cfg.Now()
		p.expire(now)
		next := p.nextRound(now)
		if !next.IsZero() && !next.After(now) {
			p.round(now)
			continue
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = next.Sub(now)
		}
		timer.Reset(wait)
		select {
		case <-p.wakeCh:
		case <-timer.C:
		case <-ctx.Done():
			return
		}
	}
}

// nextRound is when the next round may go: the earliest due time, no
// sooner than the rate bound and any hold allow. Zero: nothing to poll.
func (p *Poller[T]) nextRound(now time.Time) time.Time {
	if pause := p.cfg.Lane.Health.Paused(now); pause != nil {
		return pause.Until
	}
	idle := !p.busy.Load()
	p.mu.Lock()
	defer p.mu.Unlock()
	var due time.Time
	if p.cfg.Adaptive {
		// No round can go before the rate bound allows: deciding now
		// would only be done again then (each submit wakes the loop).
		if g := p.last.Add(p.minGap()); g.After(now) && len(p.tasks) > 0 {
			return g
		}
		if p.eachID() {
			due = p.learned.DecideEach(p.timingsLocked(nil), now, p.last.Add(p.minGap()), idle, p.cfg.PollGap, p.requestCost())
		} else {
			due = p.learned.Decide(p.timingsLocked(nil), now, p.last.Add(p.minGap()), idle, p.cfg.PollGap)
		}
	} else {
		for _, e := range p.tasks {
			if at := p.pollAtLocked(e); due.IsZero() || at.Before(due) {
				due = at
			}
		}
	}
	if !due.IsZero() {
		if g := p.last.Add(p.minGap()); g.After(due) {
			due = g
		}
		if p.pollsHeldUntil.After(due) {
			due = p.pollsHeldUntil
		}
	}
	if end := p.nextEndLocked(); !end.IsZero() && (due.IsZero() || end.Before(due)) {
		return end
	}
	return due
}

// endLocked is when e leaves the poller unanswered (zero: never): at its
// window's end, or at once when its budget is spent.
func (p *Poller[T]) endLocked(e *entry[T]) time.Time {
	if p.cfg.Budget > 0 && e.polls >= p.cfg.Budget {
		return e.submitted
	}
	if p.cfg.Window > 0 {
		return e.submitted.Add(p.cfg.Window)
	}
	return time.Time{}
}

// nextEndLocked is the earliest endLocked of the tasks in flight.
func (p *Poller[T]) nextEndLocked() time.Time {
	var first time.Time
	for _, e := range p.tasks {
		if end := p.endLocked(e); !end.IsZero() && (first.IsZero() || end.Before(first)) {
			first = end
		}
	}
	return first
}

// expire takes out the tasks past their budget or window at now and
// reports them to the sink: none of them is polled again.
func (p *Poller[T]) expire(now time.Time) {
	type gone struct {
		e   *entry[T]
		err error
	}
	var out []gone
	p.mu.Lock()
	for id, e := range p.tasks {
		end := p.endLocked(e)
		if end.IsZero() || end.After(now) {
			continue
		}
		err := ErrResultWindow
		if p.cfg.Budget > 0 && e.polls >= p.cfg.Budget {
			err = ErrPollBudget
		}
		delete(p.tasks, id)
		out = append(out, gone{e, err})
	}
	p.mu.Unlock()
	for _, g := range out {
		p.cfg.Logger.Warn("task no longer polled", "provider", p.cfg.Lane.Name(), "captcha_id", g.e.captchaID, "polls", g.e.polls, "err", g.err)
		p.sink.Expired(g.e.ref, g.e.captchaID, g.err, now)
	}
}

// budgetFloor is the earliest e may be polled again within its budget
// (zero: any time). The first half of the budget is polled as the
// scheduler decides: most answers come well within it (an 80 s reCAPTCHA
// polled every 2 s takes 40 of 120). From then on the polls left are
// spread over the rest of the window, split from the last poll in (polls
// left + 1) equal parts so the last one still comes before the window
// ends: a slow answer is polled less often, and never past the budget.
func (p *Poller[T]) budgetFloor(e *entry[T]) time.Time {
	if p.cfg.Budget <= 0 || p.cfg.Window <= 0 || e.polls < p.cfg.Budget/2 {
		return time.Time{}
	}
	left := p.cfg.Budget - e.polls
	last := pollsched.Later(e.polledAt, e.submitted)
	end := e.submitted.Add(p.cfg.Window)
	if left <= 0 || !end.After(last) {
		return end
	}
	return last.Add(end.Sub(last) / time.Duration(left+1))
}

// timingsLocked is the tasks in flight as the default scheduler weighs
// them; with es, the entries in the same order.
func (p *Poller[T]) timingsLocked(es *[]*entry[T]) []pollsched.InFlight {
	out := make([]pollsched.InFlight, 0, len(p.tasks))
	for _, e := range p.tasks {
		out = append(out, p.timing(e))
		if es != nil {
			*es = append(*es, e)
		}
	}
	return out
}

func (p *Poller[T]) timing(e *entry[T]) pollsched.InFlight {
	return pollsched.InFlight{Kind: e.kind, Submitted: e.submitted, LastPoll: e.lastPoll, PolledAt: e.polledAt, NotBefore: p.budgetFloor(e), Deadline: e.deadline}
}

// eachID reports whether the provider answers one id a request (a
// createTask provider, an in.php one without bulk polls): then every id a
// round asks for costs a request, and the default scheduler weighs each
// alone (pollsched.DecideEach).
func (p *Poller[T]) eachID() bool {
	b, ok := p.cfg.Lane.Provider().(interface{ BulkSupported() bool })
	return ok && !b.BulkSupported()
}

// floor is the earliest e may be polled again on the fixed cadence:
// PollInterval after it was last polled, never within the provider's
// Rule, and not before its budgetFloor.
func (p *Poller[T]) floor(e *entry[T]) time.Time {
	b := p.budgetFloor(e)
	if e.polledAt.IsZero() {
		return b
	}
	return pollsched.Later(e.polledAt.Add(max(p.cfg.PollInterval, p.cfg.Rule)), b)
}

// pollAtLocked is when e is next polled: its due time, not before its
// floor.
func (p *Poller[T]) pollAtLocked(e *entry[T]) time.Time {
	if f := p.floor(e); f.After(e.due) {
		return f
	}
	return e.due
}

// alignLocked moves a first poll wanted at want onto the round cadence:
// the round of the last round's tasks nearest to it, or want itself when
// no round is coming. Without it every task would keep its own phase and
// rounds would go out up to four times per PollInterval.
func (p *Poller[T]) alignLocked(now, want time.Time) time.Time {
	every := p.cfg.Repoll
	if p.chain.IsZero() || !p.chain.After(now) {
		return want
	}
	if !want.After(p.chain) {
		return p.chain
	}
	k := (want.Sub(p.chain) + every/2) / every
	return p.chain.Add(k * every)
}

// dueLocked is the tasks a round at now asks for, marked polled.
//
// Which ids a round asks for is judged with the prior blended in, busy
// or idle: a kind learned from its first few answers (its fastest) would
// otherwise rule out every id younger than all of them, and an answer
// that came sooner waited for rounds that left its id out (a reCAPTCHA
// v3 solved in 5.1 s, after one learned 5.0–5.6 s, waited 2.2 s on the
// model of the realistic mix). On the fixed cadence a round takes every
// id due before the next round, but none sooner than PollInterval after
// its last poll: providers ban an IP that polls one id too often.
func (p *Poller[T]) dueLocked(now time.Time, idle bool) []*entry[T] {
	var due []*entry[T]
	switch {
	case p.cfg.Adaptive && p.eachID():
		var es []*entry[T]
		worth := p.learned.DueEach(p.timingsLocked(&es), now, idle, p.cfg.PollGap, p.requestCost())
		for i, e := range es {
			if worth[i] {
				due = append(due, e)
			}
		}
	case p.cfg.Adaptive:
		model := p.learned.Models(true)
		for _, e := range p.tasks {
			if pollsched.Due(p.timing(e), now, p.cfg.PollGap, model) {
				due = append(due, e)
			}
		}
	default:
		for _, e := range p.tasks {
			if !e.due.After(now.Add(p.cfg.Repoll)) && !p.floor(e).After(now) {
				due = append(due, e)
			}
		}
	}
	for _, e := range due {
		e.polledAt = now
		e.polls++
	}
	if !p.cfg.Adaptive {
		p.chain = now.Add(p.cfg.Repoll)
		// Tasks polled in an earlier round that would come due before
		// the next one wait for it instead: phases merge, and the cadence
		// stays one request per interval however the tasks came in.
		for _, e := range p.tasks {
			if e.polledAt.Before(now) && !e.polledAt.IsZero() && e.due.Before(p.chain) {
				e.due = p.chain
			}
		}
	}
	slices.SortFunc(due, func(a, b *entry[T]) int { return a.due.Compare(b.due) })
	return due
}
