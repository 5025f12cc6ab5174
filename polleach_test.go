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
}

func (p *perIDModel) BulkSupported() bool { return p.bulk }

func (p *perIDModel) PollMany(ctx context.Context, ids []string) ([]provider.PollResult, error) {
	p.mu.Lock()
	p.ids += len(ids)
	p.mu.Unlock()
	return p.modelProvider.PollMany(ctx, ids)
}

// runPerID is runModel on a perIDModel: its outcome counts a request per
// id polled.
func runPerID(t *testing.T, threads int, tasks []Task, seed uint64, bulk bool) (o outcome) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		m := &perIDModel{modelProvider: &modelProvider{threads: threads, seed: seed, lat: fastMix, tasks: map[string]*modelTask{}}, bulk: bulk}
		q := startQueue(t, Config{Provider: m, Threads: threads})
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
		m.mu.Unlock()
		o = m.outcome(len(tasks), makespan)
	})
	return o
}

// A provider that answers one id a request (createTask's getTaskResult
// has no bulk form) is polled id by id when each is worth its own
// request, not every id whose answer may be ready by the next round. On
// the fast mix, seeds 1-3, this model measures 3.48-3.54 requests a task
// against 6.96-7.00, at a makespan 4-9% longer (49.5-51.1 s against
// 45.4-49.0 s), utilization 0.86-0.88 against 0.95 and ready-to-fetched
// p50 0.60-0.64 s against 0.20-0.23 s: the price of half the requests.
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
