package poller

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/captchaq/captchaq/internal/lane"
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

// sink records nothing.
type sink struct{}

func (sink) Ready(string, string, provider.Answer, time.Time, time.Time) bool { return true }
func (sink) Refused(string, string, error, time.Time, int)                    {}
func (sink) RoundFailed(error, time.Time, int)                                {}
func (sink) Recovered()                                                       {}
func (sink) Expired(string, string, error, time.Time)                         {}
func (sink) Epoch() int                                                       { return 0 }

func newPoller(rec *pollRecorder, adaptive, busy bool, now time.Time) *Poller[string] {
	p := newPollerOf(rec, sink{}, adaptive, now)
	p.Busy(busy)
	return p
}

// newPollerOf is a Poller of prov's lane reporting to snk, on a clock
// stopped at now.
func newPollerOf(prov lane.Provider, snk Sink[string], adaptive bool, now time.Time) *Poller[string] {
	log := slog.New(slog.DiscardHandler)
	l := lane.New(lane.Config{Provider: prov, Threads: 8, Methods: provider.CaptchaAIMethods, DownAfter: time.Minute, Logger: log})
	return New(Config{
		Lane: l, Adaptive: adaptive, PollInterval: time.Second, PollGap: 500 * time.Millisecond, Repoll: time.Second,
		Backoff: func(int) time.Duration { return time.Second }, Requests: context.Background(),
		Now: func() time.Time { return now }, Logger: log,
	}, snk)
}

// A round asks for every id due before the next round, not only those
// due now: an answer left for the next round would sit ready for up to a
// whole interval. An id polled less than PollInterval ago waits.
func TestRoundTakesIDsDueBeforeNextRound(t *testing.T) {
	rec := &pollRecorder{}
	const every = time.Second
	now := time.Now()
	p := newPoller(rec, false, false, now)
	add := func(id string, due, polledAt time.Time) {
		p.Track(id, id, id, provider.KindTurnstile, now.Add(-time.Minute), time.Time{}, due, true, false)
		p.tasks[id].polledAt = polledAt
	}
	add("due", now, time.Time{})
	add("soon", now.Add(600*time.Millisecond), time.Time{})
	add("next-round", now.Add(every), time.Time{})
	add("later", now.Add(every+time.Millisecond), time.Time{})
	add("just-polled", now, now.Add(-every/2))
	p.round(now)
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
	now := time.Now()
	p := newPoller(rec, true, true, now) // a task waits for a thread: busy
	// One reCAPTCHA v3 answer learned: not ready at 5.0 s, ready at 5.6 s.
	p.learned.Learn(provider.KindRecaptchaV3, now.Add(-time.Minute), now.Add(-time.Minute+5*time.Second), now.Add(-time.Minute+5600*time.Millisecond))
	add := func(id string, age time.Duration) {
		p.Track(id, id, id, provider.KindRecaptchaV3, now.Add(-age), time.Time{}, now, true, false)
	}
	add("young", 3*time.Second)
	add("old", 6*time.Second)
	p.round(now)
	if len(rec.ids) != 1 {
		t.Fatalf("%d requests, want 1: %v", len(rec.ids), rec.ids)
	}
	if got, want := slices.Sorted(slices.Values(rec.ids[0])), []string{"old", "young"}; !slices.Equal(got, want) {
		t.Fatalf("polled %v, want %v", got, want)
	}
}

// Forget takes an id out of the rounds; DueNow brings one due at once,
// but only for the attempt it names.
func TestForgetAndDueNow(t *testing.T) {
	rec := &pollRecorder{}
	now := time.Now()
	p := newPoller(rec, false, false, now)
	p.Track("a", "a", "c1", provider.KindTurnstile, now, time.Time{}, now.Add(time.Hour), true, false)
	p.Track("b", "b", "c2", provider.KindTurnstile, now, time.Time{}, now.Add(time.Hour), true, false)
	p.Forget("b")
	if n := p.Len(); n != 1 {
		t.Fatalf("%d in flight after Forget, want 1", n)
	}
	p.DueNow("a", "c-other", now)
	if at := p.nextRound(now); !at.Equal(now.Add(time.Hour)) {
		t.Fatalf("next round at %v after a DueNow for another attempt, want unchanged", at.Sub(now))
	}
	p.DueNow("a", "c1", now)
	if at := p.nextRound(now); !at.Equal(now) {
		t.Fatalf("next round in %v after DueNow, want now", at.Sub(now))
	}
}
