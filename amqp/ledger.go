package amqp

import (
	"cmp"
	"maps"
	"sync"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/tally"
)

// maxUnrecorded bounds the tasks a gateway keeps published but not
// recorded (their images included) while its store fails.
const maxUnrecorded = 10000

// readFresh is how long Get answers a shared store's unfinished record
// from its last read.
const readFresh = time.Second

// ledger is what a gateway keeps in memory of its tasks, under one lock:
// the unfinished ones (by id and by tenant, for fair share), the tasks
// published whose record's write failed, the records Get read of
// unfinished tasks on a shared store, and its counts and tally.
type ledger struct {
	burst int // GatewayConfig.FairBurst

	mu      sync.Mutex
	weights map[string]int         // fair-share weights by tenant (Attach)
	pending map[string]pendingTask // unfinished tasks, by store id
	// byTenant counts the pending tasks of each tenant.
	byTenant map[string]int
	// unrecorded are tasks published whose record's write failed, by
	// store id (taskRecorder.keepUnrecorded).
	unrecorded map[string]unrecordedTask
	// read are unfinished records Get read from a shared store, by id,
	// while their tasks are pending here (see Gateway.Get).
	read   map[string]readRecord
	counts GatewayCounts
	tally  tally.Results
}

type pendingTask struct {
	tenant   string
	priority int
	accepted time.Time
}

// unrecordedTask is a task published whose record's write failed: its
// result, or the client's next submit of it, writes the record then.
type unrecordedTask struct {
	task     captchaq.Task
	accepted time.Time
}

// readRecord is an unfinished record as Get read it.
type readRecord struct {
	rec captchaq.Record
	at  time.Time
}

func newLedger(burst int) *ledger {
	return &ledger{
		burst: burst, pending: map[string]pendingTask{}, byTenant: map[string]int{},
		unrecorded: map[string]unrecordedTask{}, read: map[string]readRecord{},
	}
}

// setWeights sets the tenants' fair-share weights.
func (l *ledger) setWeights(weights map[string]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.weights = maps.Clone(weights)
}

// start starts the tally at now.
func (l *ledger) start(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tally = tally.NewResults(now)
}

// snapshot returns the counts.
func (l *ledger) snapshot() GatewayCounts {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.counts
}

// count changes the counts with add.
func (l *ledger) count(add func(*GatewayCounts)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	add(&l.counts)
}

// track counts r as unfinished.
func (l *ledger) track(r captchaq.Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.trackLocked(r)
}

func (l *ledger) trackLocked(r captchaq.Record) {
	if _, ok := l.pending[r.Task.ID]; ok {
		return
	}
	l.pending[r.Task.ID] = pendingTask{tenant: r.Task.Tenant, priority: cmp.Or(r.Task.Priority, captchaq.PriorityDefault), accepted: r.AcceptedAt}
	l.byTenant[r.Task.Tenant]++
}

// untrack lets go of task id, no longer stored.
func (l *ledger) untrack(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.untrackLocked(id)
}

func (l *ledger) untrackLocked(id string) {
	p, ok := l.pending[id]
	if !ok {
		return
	}
	delete(l.pending, id)
	delete(l.read, id)
	if l.byTenant[p.tenant]--; l.byTenant[p.tenant] <= 0 {
		delete(l.byTenant, p.tenant)
	}
}

// finished counts r, recorded, and its task no longer unfinished;
// received, when set, dates the delivery delay.
func (l *ledger) finished(r captchaq.Result, received time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.untrackLocked(r.ID)
	l.countLocked(r, received)
}

func (l *ledger) countLocked(r captchaq.Result, received time.Time) {
	l.counts.Results++
	l.tally.Add(r.Status == captchaq.StatusSolved, r.SolveSeconds, received.Sub(r.FinishedAt), !received.IsZero() && !r.FinishedAt.IsZero())
}

// holds says whether task id is unfinished here.
func (l *ledger) holds(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.pending[id]
	return ok
}

// unfinished counts the unfinished tasks, and those of tenant.
func (l *ledger) unfinished(tenant string) (all, tenants int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.pending), l.byTenant[tenant]
}

// demotion is how many priority levels a new task of tenant goes down:
// one once the tenant has its share of unfinished tasks here.
func (l *ledger) demotion(tenant string) int {
	if l.burst < 0 {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byTenant[tenant] >= max(l.weights[tenant], 1)*l.burst {
		return 1
	}
	return 0
}

// accepted counts task id recorded; rec, when not nil, is its record,
// unfinished.
func (l *ledger) accepted(id string, rec *captchaq.Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.unrecorded, id)
	if rec != nil {
		l.trackLocked(*rec)
	}
	l.counts.Accepted++
}

// keepUnrecorded keeps t, published at now, whose record's write failed;
// false when too many are kept already.
func (l *ledger) keepUnrecorded(t captchaq.Task, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, again := l.unrecorded[t.ID]
	kept := again || len(l.unrecorded) < maxUnrecorded
	if kept && !again {
		l.unrecorded[t.ID] = unrecordedTask{task: t, accepted: now}
		l.counts.Unrecorded++
	}
	return kept
}

// unrecordedTask returns the task kept published but not recorded under id.
func (l *ledger) unrecordedTask(id string) (unrecordedTask, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	u, ok := l.unrecorded[id]
	return u, ok
}

// lastRead returns the record of id Get read less than readFresh before
// now.
func (l *ledger) lastRead(id string, now time.Time) (captchaq.Record, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.read[id]
	if !ok || now.Sub(r.at) >= readFresh {
		return captchaq.Record{}, false
	}
	return r.rec, true
}

// keepRead keeps rec, unfinished as Get read it at now, while its task
// is pending: a result that came during the read took the task out of
// pending (and out of read) already, or takes it out of read when it
// comes.
func (l *ledger) keepRead(rec captchaq.Record, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.pending[rec.Task.ID]; ok {
		l.read[rec.Task.ID] = readRecord{rec: rec, at: now}
	}
}

// metrics are the ledger's part of Gateway.Metrics.
func (l *ledger) metrics(now time.Time) captchaq.Metrics {
	l.mu.Lock()
	defer l.mu.Unlock()
	rates := l.tally.Rates(now)
	waiting := tally.NewWaiting()
	for _, p := range l.pending {
		waiting.Add(p.priority, p.accepted)
	}
	return captchaq.Metrics{
		Submitted: l.counts.Accepted + l.counts.OthersAccepted, Solved: l.tally.Solved, Failed: l.tally.Failed,
		RetriesByReason: map[string]int64{}, StartedAt: l.tally.Started,
		AvgSolveSeconds: rates.AvgSolveSeconds, SuccessRate: rates.SuccessRate, ThroughputPerMin: rates.ThroughputPerMin,
		QueueDepth: len(l.pending), DepthByPriority: waiting.ByPriority, OldestWaitingSeconds: waiting.OldestSeconds(now),
		DeliveryDelayP50: rates.DelayP50, DeliveryDelayP99: rates.DelayP99,
	}
}

// otherAccepted counts rec, accepted by another gateway, when tell says
// to (called under the ledger's lock); told by a resync (resynced), only
// a task not pending here. It returns whether it counted it.
func (l *ledger) otherAccepted(rec captchaq.Record, resynced bool, tell func() bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.pending[rec.Task.ID]; resynced && ok {
		// Its announcement came between the resync's read and now.
		return false
	}
	if !tell() {
		return false
	}
	if !rec.Status.Final() {
		l.trackLocked(rec)
	}
	l.counts.OthersAccepted++
	return true
}

// otherFinished counts r, stored by another gateway, when tell says to
// (called under the ledger's lock); told by a resync (resynced), only
// while its task is pending here. It returns whether it counted it.
func (l *ledger) otherFinished(r captchaq.Result, resynced bool, tell func() bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.pending[r.ID]; resynced && !ok {
		return false
	}
	if !tell() {
		return false
	}
	l.untrackLocked(r.ID)
	l.countLocked(r, time.Now())
	l.counts.OthersResults++
	return true
}

// compare holds the unfinished tasks here against open, the store's
// unfinished records by id: gone are those not in open, fresh the
// records of open not pending here that were accepted before (settled).
func (l *ledger) compare(open map[string]captchaq.Record, before func(time.Time) bool) (gone []string, fresh []captchaq.Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id := range l.pending {
		if _, ok := open[id]; !ok {
			gone = append(gone, id)
		}
	}
	for id, r := range open {
		if _, ok := l.pending[id]; !ok && before(r.AcceptedAt) {
			fresh = append(fresh, r)
		}
	}
	return gone, fresh
}
