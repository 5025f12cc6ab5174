package lane

import (
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/captchaq/captchaq/provider"
)

// Pause is why sending to a lane is paused: an account error.
type Pause struct {
	Code string // the provider's code, e.g. ERROR_WRONG_USER_KEY
	// Until is when sending resumes by itself; zero: not until Resume
	// (or a probe that answers).
	Until time.Time
	Err   error
}

// Reach is what the lane knows of reaching its provider: since when and
// how often it failed in a row (zero while it answers), the last
// failure's text, and whether it ever answered.
type Reach struct {
	FailingSince time.Time
	Failures     int
	LastFailure  string
	EverAnswered bool
}

// Health is whether and when a lane may be sent to: its pause on an
// account error, its rate-limit hold on submits, its reach (failing
// since, failures, the last one), whether it is down and its next probe.
// A probe that answers lifts a pause and brings the lane up, so one lock
// guards it all. Its methods are safe for concurrent use and call out
// only to the logger.
type Health struct {
	name      string
	mayGoDown bool
	downAfter time.Duration
	log       *slog.Logger

	mu               sync.Mutex
	pause            *Pause
	submitsHeldUntil time.Time // no submits before (rate limited)
	// failingSince is the first network error or 5xx since the lane last
	// answered; zero while it answers. failures counts them, lastFailure
	// is the last one's text (the provider's redacted error: no key);
	// answered is whether the lane ever answered.
	failingSince time.Time
	failures     int
	lastFailure  string
	answered     bool
	// down: failing longer than downAfter; out of routing until a probe
	// answers.
	down      bool
	probing   bool
	nextProbe time.Time
}

// Paused returns the pause in force at now, lifting an expired one.
func (h *Health) Paused(now time.Time) *Pause {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pausedLocked(now)
}

func (h *Health) pausedLocked(now time.Time) *Pause {
	if h.pause != nil && !h.pause.Until.IsZero() && !now.Before(h.pause.Until) {
		h.log.Info("sending resumed", "provider", h.name, "after", h.pause.Code)
		h.pause = nil
	}
	return h.pause
}

// SetPause pauses sending to the lane; first is true when it was not
// paused.
func (h *Health) SetPause(p *Pause) (first bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	first = h.pause == nil
	h.pause = p
	return first
}

// Resume lifts the pause; was is true when there was one.
func (h *Health) Resume() (was bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	was = h.pause != nil
	h.pause = nil
	return was
}

// Routable reports whether new submits may go to the lane at now: not
// down, not paused.
func (h *Health) Routable(now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.down && h.pausedLocked(now) == nil
}

// Down reports whether the lane is out of routing for failing.
func (h *Health) Down() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.down
}

// SendHold is why submits may not go to the lane at now: blocked (down,
// or paused), or held until a time (a pause that lifts then, or a
// rate-limit hold). Zero and false: submits may go.
func (h *Health) SendHold(now time.Time) (until time.Time, blocked bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch p := h.pausedLocked(now); {
	case p != nil:
		return p.Until, true
	case h.down:
		return time.Time{}, true
	case now.Before(h.submitsHeldUntil):
		return h.submitsHeldUntil, true
	}
	return time.Time{}, false
}

// HoldSubmits holds submits until `until` (a rate limit).
func (h *Health) HoldSubmits(until time.Time) {
	h.mu.Lock()
	h.submitsHeldUntil = until
	h.mu.Unlock()
}

// Answered records that the lane answered a request (any protocol answer,
// even an error code): it is up. recovered says it was failing until now.
func (h *Health) Answered() (recovered bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	recovered = h.failures > 0
	h.failingSince, h.failures, h.lastFailure, h.answered = time.Time{}, 0, "", true
	return recovered
}

// Reach reports the lane's Reach now.
func (h *Health) Reach() Reach {
	h.mu.Lock()
	defer h.mu.Unlock()
	return Reach{FailingSince: h.failingSince, Failures: h.failures, LastFailure: h.lastFailure, EverAnswered: h.answered}
}

// TransportFailed records a network error or 5xx (err) at now and
// reports whether the lane has now failed for longer than its DownAfter
// (down), and whether it went down with this failure (wentDown). Only a
// lane that MayGoDown goes down.
func (h *Health) TransportFailed(now time.Time, err error) (down, wentDown bool) {
	h.mu.Lock()
	if h.failingSince.IsZero() {
		h.failingSince = now
	}
	h.failures++
	h.lastFailure = err.Error()
	since := h.failingSince
	down = h.mayGoDown && now.Sub(since) > h.downAfter
	wentDown = down && !h.down
	if wentDown {
		h.down = true
		h.nextProbe = now.Add(h.downAfter)
	}
	h.mu.Unlock()
	if wentDown {
		h.log.Error("provider down: out of routing until a probe answers; its queued tasks go to the others", "provider", h.name, "failing_for", now.Sub(since))
	}
	return down, wentDown
}

// TransportFailure reports whether err says the provider did not answer
// in its protocol: a network error, a 5xx page, a body that is no answer.
func TransportFailure(err error) bool {
	return errors.Is(err, provider.ErrNetwork) || errors.Is(err, provider.ErrHTTP5xx) || errors.Is(err, provider.ErrBadAnswer)
}

// ProbeDue says whether a probe of the lane should start at now (the lane
// is down, or paused for good, in a queue where it may go down, and its
// next probe is due); when not, next is when it will be (zero: none). A
// true answer marks the probe started: call ProbeDone with its outcome.
func (h *Health) ProbeDue(now time.Time) (start bool, next time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.mayGoDown || !h.down && (h.pause == nil || !h.pause.Until.IsZero()) {
		return false, time.Time{}
	}
	if h.nextProbe.IsZero() {
		h.nextProbe = now.Add(h.downAfter)
	}
	if h.probing {
		return false, time.Time{}
	}
	if !now.Before(h.nextProbe) {
		h.probing = true
		return true, time.Time{}
	}
	return false, h.nextProbe
}

// ProbeDone ends a probe: up brings the lane back in routing (not down,
// not paused); otherwise the next probe is due DownAfter after now.
func (h *Health) ProbeDone(up bool, now time.Time) {
	h.mu.Lock()
	h.probing = false
	if up {
		h.down, h.pause, h.failingSince, h.nextProbe = false, nil, time.Time{}, time.Time{}
		h.failures, h.lastFailure, h.answered = 0, "", true
	} else {
		h.nextProbe = now.Add(h.downAfter)
	}
	h.mu.Unlock()
	if up {
		h.log.Info("provider back in routing: a probe answered", "provider", h.name)
	}
}

// state reports at once whether the lane is down and whether it is
// paused at now.
func (h *Health) state(now time.Time) (down, paused bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.down, h.pausedLocked(now) != nil
}
