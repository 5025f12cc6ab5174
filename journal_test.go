package captchaq_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/sim"
)

// stepStore is a Store that counts the steps (Checkpoint, Retry, Finish)
// it is asked for itself.
type stepStore struct {
	captchaq.Store
	steps atomic.Int32
}

func (s *stepStore) Checkpoint(ctx context.Context, id, captchaID string, attempt int, at time.Time) error {
	s.steps.Add(1)
	return s.Store.Checkpoint(ctx, id, captchaID, attempt, at)
}

func (s *stepStore) Retry(ctx context.Context, id string, attempts int, notBefore time.Time, errText, errCode string) error {
	s.steps.Add(1)
	return s.Store.Retry(ctx, id, attempts, notBefore, errText, errCode)
}

func (s *stepStore) Finish(ctx context.Context, r captchaq.Result) error {
	s.steps.Add(1)
	return s.Store.Finish(ctx, r)
}

// stepJournal records the steps it takes and writes them to mem.
type stepJournal struct {
	mem   captchaq.Store
	mu    sync.Mutex
	steps []string
}

func (j *stepJournal) add(step string) {
	j.mu.Lock()
	j.steps = append(j.steps, step)
	j.mu.Unlock()
}

func (j *stepJournal) Checkpoint(ctx context.Context, id, captchaID string, attempt int, at time.Time) error {
	j.add("checkpoint " + id)
	return j.mem.Checkpoint(ctx, id, captchaID, attempt, at)
}

func (j *stepJournal) Retry(ctx context.Context, id string, attempts int, notBefore time.Time, errText, errCode string) error {
	j.add("retry " + id)
	return j.mem.Retry(ctx, id, attempts, notBefore, errText, errCode)
}

func (j *stepJournal) Finish(ctx context.Context, r captchaq.Result) error {
	j.add("finish " + r.ID)
	return j.mem.Finish(ctx, r)
}

// A fleet's Journal takes every step a queue makes durable, in place of
// the Store's Checkpoint, Retry and Finish (at a submit's answer, for an
// adopted record, at a result); the Store keeps the rest (Enqueue, Get).
func TestFleetJournalTakesTheSteps(t *testing.T) {
	t.Parallel()
	mem := captchaq.NewMemoryStore(captchaq.MemoryStoreConfig{})
	store := &stepStore{Store: mem}
	j := &stepJournal{mem: mem}
	b := setup(t, sim.Config{}, captchaq.Config{Store: store}, testFleet{journal: j})
	b.start(t)
	ctx := testbound.Context(t)
	if r := waitAll(t, submitAll(t, b.q, task("a", 0)))[0]; r.Status != captchaq.StatusSolved {
		t.Fatalf("a: %+v", r)
	}
	f, err := b.q.Adopt(ctx, captchaq.Record{Task: task("b", 0), Status: captchaq.StatusQueued, Attempts: 1, LastError: "earlier", LastErrorCode: "ERROR_NO_SLOT_AVAILABLE"})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := f.Wait(ctx); err != nil || r.Status != captchaq.StatusSolved || r.Attempts != 2 {
		t.Fatalf("b: %+v, %v; want solved at its second attempt", r, err)
	}
	j.mu.Lock()
	steps := slices.Clone(j.steps)
	j.mu.Unlock()
	if want := []string{"checkpoint a", "finish a", "retry b", "checkpoint b", "finish b"}; !slices.Equal(steps, want) {
		t.Fatalf("the journal took %q, want %q", steps, want)
	}
	if n := store.steps.Load(); n != 0 {
		t.Fatalf("the Store was asked for %d steps itself, want 0 (the journal's)", n)
	}
	for _, id := range []string{"a", "b"} {
		if rec, err := b.q.Get(ctx, id); err != nil || rec.Status != captchaq.StatusSolved {
			t.Fatalf("%s in the Store: %+v, %v", id, rec, err)
		}
	}
}
