// Package limiter bounds the tasks a process keeps at the provider: at most
// the plan's threads, and fewer while the provider answers "no free thread".
//
// The window follows AIMD, like TCP congestion control: a refusal halves
// it (not below 1) and holds new submits for a wait; each success (the
// queue reports one per answer, not per submit, which halves the probing
// and so the refusals) grows it by 1/window, about one slot per window's
// worth of answers, back up to the plan's threads. Several processes
// sharing one key thus converge on a fair split of the threads without
// talking to each other.
//
// During a hold, each answer earns one submit (a credit), like TCP's ack
// clocking: the provider has just freed the thread that solved it, so the
// process keeps the threads it had instead of idling them until the hold
// ends, and never sends more submits than it got answers. A refusal
// cancels the credits (someone else took the thread).
package limiter

import (
	"sync"
	"time"
)

// Limiter is a slot limiter. It is safe for concurrent use.
type Limiter struct {
	mu        sync.Mutex
	max       int
	window    float64
	inUse     int
	holdUntil time.Time
	credits   int // submits allowed during the hold: threads our answers freed
}

// New returns a Limiter for threads slots (at least 1), starting wide open.
func New(threads int) *Limiter {
	threads = max(threads, 1)
	return &Limiter{max: threads, window: float64(threads)}
}

// TryAcquire takes a slot if one is free under the window and no hold is in
// force at now.
func (l *Limiter) TryAcquire(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inUse >= int(l.window) {
		return false
	}
	if now.Before(l.holdUntil) {
		if l.credits == 0 {
			return false
		}
		l.credits--
	} else {
		l.credits = 0
	}
	l.inUse++
	return true
}

// Take marks a slot used without asking: for tasks already in flight at
// the provider when a queue starts.
func (l *Limiter) Take() {
	l.mu.Lock()
	l.inUse++
	l.mu.Unlock()
}

// Release frees a slot.
func (l *Limiter) Release() {
	l.mu.Lock()
	if l.inUse > 0 {
		l.inUse--
	}
	l.mu.Unlock()
}

// NoSlot records a refusal at now: the window halves and submits are held
// for wait. Refusals that arrive while a hold is in force belong to the
// same burst and do not halve again.
func (l *Limiter) NoSlot(now time.Time, wait time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.credits = 0 // the thread an answer freed went to someone else
	if now.Before(l.holdUntil) {
		if h := now.Add(wait); h.After(l.holdUntil) {
			l.holdUntil = h
		}
		return
	}
	l.window = max(l.window/2, 1)
	l.holdUntil = now.Add(wait)
}

// Success records a delivered answer at now: the window grows by
// 1/window, up to max. During a hold the answer also earns one submit:
// the provider has just freed the thread that solved it, so that submit
// takes a thread known to be free instead of guessing, and a hold never
// idles threads this process was using.
func (l *Limiter) Success(now time.Time) {
	l.mu.Lock()
	l.window = min(l.window+1/l.window, float64(l.max))
	if now.Before(l.holdUntil) {
		l.credits++
	}
	l.mu.Unlock()
}

// Window is the current number of slots allowed.
func (l *Limiter) Window() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int(l.window)
}

// InUse is the number of slots taken.
func (l *Limiter) InUse() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inUse
}

// Max is the plan's threads.
func (l *Limiter) Max() int { return l.max }

// HoldUntil is when a NoSlot hold ends; zero or past means none.
func (l *Limiter) HoldUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.holdUntil
}
