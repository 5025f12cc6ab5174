package pollsched

import (
	"math"
	"testing"
	"time"

	"github.com/captchaq/captchaq/provider"
)

var t0 = time.Date(2026, 1, 2, 15, 0, 0, 0, time.UTC)

// A kind always solved in exactly 2 s, on a busy queue (weight 2): an
// answer has waited (age − 2 s) × 2 answer-seconds, and a round is worth
// its PollGap of 0.5 s at 2.25 s, found within the bisection's gap/50.
func TestDecideOnALearnedKind(t *testing.T) {
	l := NewLearned()
	l.Learn(provider.KindTurnstile, t0.Add(-time.Minute), t0.Add(-time.Minute+2*time.Second), t0.Add(-time.Minute+2*time.Second))
	task := InFlight{Kind: provider.KindTurnstile, Submitted: t0}
	got := l.Decide([]InFlight{task}, t0, t0, false, 500*time.Millisecond).Sub(t0)
	if got < 2250*time.Millisecond || got >= 2260*time.Millisecond {
		t.Fatalf("round at %v after the submit, want [2.25 s, 2.26 s)", got)
	}
	if at := l.Decide(nil, t0, t0, false, 500*time.Millisecond); !at.IsZero() {
		t.Fatalf("nothing in flight: round at %v, want none", at)
	}
	// Polled 100 ms ago: its per-id gap has not ended, so the round
	// waits for it however much its answer is worth.
	task.PolledAt = t0.Add(2200 * time.Millisecond)
	got = l.Decide([]InFlight{task}, t0.Add(2300*time.Millisecond), t0, false, 500*time.Millisecond).Sub(t0)
	if got < 2700*time.Millisecond || got >= 2710*time.Millisecond {
		t.Fatalf("round at %v, want when its gap ends: [2.7 s, 2.71 s)", got)
	}
}

// Due asks for an id once its gap has ended and its kind is at least 1%
// likely ready by the next round; before any answer the prior decides: a
// reCAPTCHA v2 (median 25 s) is not 1% likely within 0.5 s, an image
// (median 0.7 s) is.
func TestDue(t *testing.T) {
	l := NewLearned()
	model := l.Models(true)
	gap := 500 * time.Millisecond
	if Due(InFlight{Kind: provider.KindRecaptchaV2, Submitted: t0}, t0, gap, model) {
		t.Fatal("reCAPTCHA v2 just submitted: due, want not")
	}
	if !Due(InFlight{Kind: provider.KindImage, Submitted: t0}, t0, gap, model) {
		t.Fatal("image just submitted: not due, want due")
	}
	if Due(InFlight{Kind: provider.KindImage, Submitted: t0, PolledAt: t0.Add(-100 * time.Millisecond)}, t0, gap, model) {
		t.Fatal("image polled 100 ms ago: due within its gap")
	}
}

// The prior of a kind not yet seen follows the pace of the kinds learned:
// Turnstile solved at 2 s against a published 8 s puts reCAPTCHA v2's
// median at 25 s × 0.25, where its chance is one half.
func TestPriorFollowsPace(t *testing.T) {
	l := NewLearned()
	l.Learn(provider.KindTurnstile, t0, t0.Add(2*time.Second), t0.Add(2*time.Second))
	got := l.Models(false)(provider.KindRecaptchaV2).CDF(25 * time.Second / 4)
	if math.Abs(got-0.5) > 1e-9 {
		t.Fatalf("CDF at the paced median %v, want 0.5", got)
	}
}

// For a provider that answers one id a request, each id is weighed alone.
// A kind always solved in exactly 2 s on a busy queue (weight 2): one task
// submitted 2 s before another. Each alone is worth a request (0.5
// answer-seconds) 2.25 s after its own submit: the first at 2.25 s, the
// second at 4.25 s; a round at 2.3 s asks for the first only.
func TestDecideEachAndDueEach(t *testing.T) {
	l := NewLearned()
	l.Learn(provider.KindTurnstile, t0.Add(-time.Minute), t0.Add(-time.Minute+2*time.Second), t0.Add(-time.Minute+2*time.Second))
	gap := 500 * time.Millisecond
	a := InFlight{Kind: provider.KindTurnstile, Submitted: t0}
	b := InFlight{Kind: provider.KindTurnstile, Submitted: t0.Add(2 * time.Second)}
	tasks := []InFlight{a, b}
	within := func(what string, got, lo time.Duration) {
		t.Helper()
		if got < lo || got >= lo+10*time.Millisecond {
			t.Fatalf("%s at %v after the first submit, want [%v, %v)", what, got, lo, lo+10*time.Millisecond)
		}
	}
	within("DecideEach", l.DecideEach(tasks, t0, t0, false, gap, gap).Sub(t0), 2250*time.Millisecond)
	within("DecideEach once the first is polled", l.DecideEach([]InFlight{b}, t0.Add(2300*time.Millisecond), t0, false, gap, gap).Sub(t0), 4250*time.Millisecond)
	if at := l.DecideEach(nil, t0, t0, false, gap, gap); !at.IsZero() {
		t.Fatalf("nothing in flight: round at %v, want none", at)
	}
	// At 2.3 s the first is worth its request, the second (0.3 s old, its
	// kind never ready before 2 s) is not.
	got := l.DueEach(tasks, t0.Add(2300*time.Millisecond), false, gap, gap)
	if !got[0] || got[1] {
		t.Fatalf("DueEach at 2.3 s = %v, want [true false]", got)
	}
	// Polled 100 ms ago: its per-id gap holds it back whatever its worth.
	a.PolledAt = t0.Add(2200 * time.Millisecond)
	if got := l.DueEach([]InFlight{a}, t0.Add(2300*time.Millisecond), false, gap, gap); got[0] {
		t.Fatal("DueEach within the per-id gap: due")
	}
	within("DecideEach after its gap", l.DecideEach([]InFlight{a}, t0.Add(2300*time.Millisecond), t0, false, gap, gap).Sub(t0), 2700*time.Millisecond)
}

// A task's poll budget (InFlight.NotBefore) holds its next poll however
// much its answer is worth: Due leaves it out and DecideEach waits for
// it, as they do within its per-id gap.
func TestNotBeforeHoldsThePoll(t *testing.T) {
	l := NewLearned()
	l.Learn(provider.KindTurnstile, t0.Add(-time.Minute), t0.Add(-time.Minute+2*time.Second), t0.Add(-time.Minute+2*time.Second))
	gap := 500 * time.Millisecond
	task := InFlight{Kind: provider.KindTurnstile, Submitted: t0.Add(-time.Minute), NotBefore: t0.Add(3 * time.Second)}
	if Due(task, t0, gap, l.Models(true)) {
		t.Fatal("due 3 s before its budget allows")
	}
	if !Due(task, t0.Add(3*time.Second), gap, l.Models(true)) {
		t.Fatal("not due once its budget allows")
	}
	if at := l.DecideEach([]InFlight{task}, t0, t0, false, gap, gap); !at.Equal(task.NotBefore) {
		t.Fatalf("round at %v, want when its budget allows (+3s)", at.Sub(t0))
	}
}
