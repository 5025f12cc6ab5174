package captchaq

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/captchaq/captchaq/provider"
)

// pollRecorder answers every poll "not ready" and records the ids asked.
type pollRecorder struct {
	mu  sync.Mutex
	ids [][]string
}

func (p *pollRecorder) Submit(context.Context, provider.Task, string) (string, error) {
	return "", nil
}

func (p *pollRecorder) PollMany(_ context.Context, ids []string) ([]provider.PollResult, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ids = append(p.ids, slices.Clone(ids))
	return make([]provider.PollResult, len(ids)), nil
}

// A round asks for every id due before the next round, not only those
// due now: an answer left for the next round would sit ready for up to a
// whole interval. An id polled less than PollInterval ago waits.
func TestRoundTakesIDsDueBeforeNextRound(t *testing.T) {
	rec := &pollRecorder{}
	const every = time.Second
	q, err := New(Config{Provider: rec, Threads: 8, PollInterval: every})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	add := func(id string, due, polledAt time.Time) {
		st := &taskState{rec: Record{Task: Task{ID: id}, CaptchaID: id}, due: due, polledAt: polledAt, lane: q.lanes[0]}
		q.inflight[id] = st
	}
	add("due", now, time.Time{})
	add("soon", now.Add(600*time.Millisecond), time.Time{})
	add("next-round", now.Add(every), time.Time{})
	add("later", now.Add(every+time.Millisecond), time.Time{})
	add("just-polled", now, now.Add(-every/2))
	q.pollers[0].round(now)
	if len(rec.ids) != 1 {
		t.Fatalf("%d requests, want 1: %v", len(rec.ids), rec.ids)
	}
	got := slices.Sorted(slices.Values(rec.ids[0]))
	if want := []string{"due", "next-round", "soon"}; !slices.Equal(got, want) {
		t.Fatalf("polled %v, want %v", got, want)
	}
}

// A kind learned from a few answers (its first, so its fastest) does not
// keep younger ids out of the default scheduler's rounds: which ids a
// round asks for is judged with the prior blended in, so one solved a
// little sooner than every answer learned is still asked for. Before, a
// busy queue judged by the learned answers alone, and an id younger than
// all of them was left out of every round until it reached their ages
// (an answer ready at 5.1 s waited 2.2 s on the model of the realistic
// mix).
func TestRoundAsksYoungerThanTheFewAnswersLearned(t *testing.T) {
	rec := &pollRecorder{}
	q, err := New(Config{Provider: rec, Threads: 8})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	p := q.pollers[0]
	// One reCAPTCHA v3 answer learned: not ready at 5.0 s, ready at 5.6 s.
	p.learned.Learn(provider.KindRecaptchaV3, now.Add(-time.Minute), now.Add(-time.Minute+5*time.Second), now.Add(-time.Minute+5600*time.Millisecond))
	add := func(id string, age time.Duration) {
		q.inflight[id] = &taskState{rec: Record{Task: Task{ID: id}, CaptchaID: id, SubmittedAt: now.Add(-age)},
			kind: provider.KindRecaptchaV3, lane: q.lanes[0]}
	}
	add("young", 3*time.Second)
	add("old", 6*time.Second)
	// A task waits for a thread: the queue is busy.
	q.mu.Lock()
	q.push(&taskState{rec: Record{Task: Task{ID: "waiting"}, AcceptedAt: now}, kind: provider.KindImage})
	q.mu.Unlock()
	if q.queue.Len() != 1 {
		t.Fatalf("%d tasks waiting, want 1", q.queue.Len())
	}
	p.round(now)
	if len(rec.ids) != 1 {
		t.Fatalf("%d requests, want 1: %v", len(rec.ids), rec.ids)
	}
	if got, want := slices.Sorted(slices.Values(rec.ids[0])), []string{"old", "young"}; !slices.Equal(got, want) {
		t.Fatalf("polled %v, want %v", got, want)
	}
}
