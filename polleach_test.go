package captchaq

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/provider"
)

// perIDModel is a modelProvider whose polls cost one request per id, as a
// createTask service's getTaskResult does. With bulk false it says so
// (BulkSupported), as createtask.Client does; with bulk true it hides it,
// which is how the engine saw such a provider before it weighed each id
// alone.
type perIDModel struct {
	*modelProvider
	bulk bool
	ids  int // ids asked for: one request each
	// gap, when set, is its rule for polling one id (PollGap), as
	// CapMonster Cloud's 2 s: early counts the polls that broke it.
	gap   time.Duration
	last  map[string]time.Time
	early int
}

func (p *perIDModel) BulkSupported() bool { return p.bulk }

func (p *perIDModel) PollMany(ctx context.Context, ids []string) ([]provider.PollResult, error) {
	p.mu.Lock()
	p.ids += len(ids)
	now := time.Now()
	for _, id := range ids {
		if at, ok := p.last[id]; ok && now.Sub(at) < p.gap {
			p.early++
		}
		p.last[id] = now
	}
	p.mu.Unlock()
	return p.modelProvider.PollMany(ctx, ids)
}

// ruledPerIDModel is a perIDModel that tells its gap (PollGap), as
// createtask.Client tells its service's published rule.
type ruledPerIDModel struct{ *perIDModel }

func (p ruledPerIDModel) PollGap() time.Duration { return p.gap }

// runPerID is runModel on a perIDModel: its outcome counts a request per
// id polled.
func runPerID(t *testing.T, threads int, tasks []Task, seed uint64, bulk bool) (o outcome) {
	o, _ = runPerIDGap(t, threads, tasks, seed, bulk, 0)
	return o
}

// runPerIDGap is runPerID at a provider whose rule is one poll of an id
// per gap (none: 0), which it tells the queue; early is how many polls
// broke it.
func runPerIDGap(t *testing.T, threads int, tasks []Task, seed uint64, bulk bool, gap time.Duration) (o outcome, early int) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		m := &perIDModel{modelProvider: &modelProvider{threads: threads, seed: seed, lat: fastMix, tasks: map[string]*modelTask{}}, bulk: bulk, gap: gap, last: map[string]time.Time{}}
		var p Provider = m
		if gap > 0 {
			p = ruledPerIDModel{m}
		}
		q := startQueue(t, Config{Provider: p, Threads: threads})
		start := time.Now()
		rs, err := q.SolveBatch(testbound.Context(t), tasks)
		if err != nil {
			t.Fatal(err)
		}
		makespan := time.Since(start)
		for _, r := range rs {
			if r.Status != StatusSolved {
				t.Fatalf("task %s: %+v", r.ID, r)
			}
		}
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		m.mu.Lock()
		m.polls = m.ids // a request per id
		early = m.early
		m.mu.Unlock()
		o = m.outcome(len(tasks), makespan)
	})
	return o, early
}

// A provider that answers one id a request (createTask's getTaskResult
// has no bulk form) is polled id by id when each is worth its own
// request, not every id whose answer may be ready by the next round. On
// the fast mix, seeds 1-3, this model measures 3.60-3.69 requests a task
// against 6.96-7.00, at a makespan 3-5% longer (47.8-51.2 s against
// 45.4-49.0 s), utilization 0.90-0.91 against 0.95 and ready-to-fetched
// p50 0.38-0.39 s against 0.20-0.23 s: the price of half the requests.
// (Rounds there may come every PollGap/4, each asking for the ids worth
// it; with rounds PollGap apart it was 3.48-3.54 requests, utilization
// 0.86-0.88 and a p50 of 0.60-0.64 s.)
func TestDefaultPollingBudgetsPerIDRequests(t *testing.T) {
	t.Parallel()
	const threads = 20
	tasks := fastMixTasks(200)
	for seed := uint64(1); seed <= 3; seed++ {
		each := runPerID(t, threads, tasks, seed, false)
		asBulk := runPerID(t, threads, tasks, seed, true)
		t.Logf("seed %d: weighed per id: %+v", seed, each)
		t.Logf("seed %d: weighed as bulk: %+v", seed, asBulk)
		if each.requestsPerTask > 0.55*asBulk.requestsPerTask || each.requestsPerTask > 3.8 {
			t.Errorf("seed %d: %.2f requests a task weighed per id, %.2f as bulk: want at most 0.55 times, and at most 3.8", seed, each.requestsPerTask, asBulk.requestsPerTask)
		}
		if each.makespan > asBulk.makespan*115/100 || each.utilization < 0.84 {
			t.Errorf("seed %d: makespan %v (as bulk %v), utilization %.3f: want within 15%% and at least 0.84", seed, each.makespan, asBulk.makespan, each.utilization)
		}
	}
}

// TestDefaultPollingKeepsProviderGap: a provider whose rule is one poll of
// a task every 2 s (CapMonster Cloud's), which it tells the queue as
// createtask.Client does, is never polled faster at the defaults. On the
// fast mix, seeds 1-3, this model measures 3.06-3.10 requests a task,
// ready-to-fetched p50 0.52-0.57 s and p99 1.97-2.02 s, utilization
// 0.85-0.86, makespan 51.1-54.2 s (with no rule but the queue's 500 ms
// gap: 3.60-3.69, 0.38-0.39 s, 1.62-1.95 s, 0.90-0.91, 47.8-51.2 s).
// Counting a request's cost in the service's 2 s instead of the queue's
// 500 ms measured 2.44-2.48 requests a task for a p50 of 1.6 s and a
// utilization of 0.74: the rule bounds how often an id is asked, not
// what an answer's wait is worth.
func TestDefaultPollingKeepsProviderGap(t *testing.T) {
	t.Parallel()
	tasks := fastMixTasks(200)
	for seed := uint64(1); seed <= 3; seed++ {
		o, early := runPerIDGap(t, 20, tasks, seed, false, 2*time.Second)
		t.Logf("seed %d: %+v", seed, o)
		if early != 0 {
			t.Errorf("seed %d: %d polls within 2 s of the id's last one; want none", seed, early)
		}
		if o.utilization < 0.8 || o.requestsPerTask > 3.5 {
			t.Errorf("seed %d: utilization %.3f, %.2f requests a task: want at least 0.8 and at most 3.5", seed, o.utilization, o.requestsPerTask)
		}
	}
}
