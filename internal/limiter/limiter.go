// Package limiter bounds the tasks a process keeps at the provider: at most
// the plan's threads, and fewer while the provider answers "no free thread".
//
// The window follows AIMD, like TCP congestion control: a refusal halves
// it (not below 1) and holds new submits for a wait; each success (the
// queue reports one per answer, not per submit, which halves the probing
// and so the refusals) grows it by 1/window, about one slot per window's
// worth of answers, back up to the plan's threads. Several processes sharing one key thus converge on a
// fair split of the threads without talking to each other.
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
	if now.Before(l.holdUntil) || l.inUse >= int(l.window) {
		return false
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
	if now.Before(l.holdUntil) {
		if h := now.Add(wait); h.After(l.holdUntil) {
			l.holdUntil = h
		}
		return
	}
	l.window = max(l.window/2, 1)
	l.holdUntil = now.Add(wait)
}

// Success records an accepted submit or a delivered answer: the window
// grows by 1/window, up to max.
func (l *Limiter) Success() {
	l.mu.Lock()
	l.window = min(l.window+1/l.window, float64(l.max))
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
