package provider

import "time"

// Class says what a caller must do about an error.
type Class int

// The error classes. The zero value is ClassTransient: anything not
// understood is retried with backoff.
const (
	// ClassTransient: network failure, 5xx, unparseable answer. Retry this
	// request with exponential backoff and jitter.
	ClassTransient Class = iota
	// ClassNoSlot: every plan thread is busy (ERROR_NO_SLOT_AVAILABLE, and
	// ERROR_ZERO_BALANCE on thread plans). Wait at least RetryAfter, retry,
	// and lower the concurrency window.
	ClassNoSlot
	// ClassRateLimit: too many requests (MAX_USER_TURN, ERROR: 100x). Pause
	// this endpoint for RetryAfter.
	ClassRateLimit
	// ClassUnsolvable: the provider could not solve it (not charged). Retry
	// a limited number of times, then fail the task.
	ClassUnsolvable
	// ClassTask: this task is wrong (bad field, bad proxy, expired
	// challenge, unknown id). Fail the task at once, no retry.
	ClassTask
	// ClassAccount: bad key, no plan, IP not allowed or banned. Stop all
	// sending and keep every task; RetryAfter, when set, says when trying
	// again may work (a temporary IP ban lifts after about 5 minutes).
	ClassAccount
)

// Error is an answer from the provider (or a failure to get one), with the
// class that says what to do. Code is the provider's code (ERROR_…), or
// one of the client's own: "HTTP_5XX", "NETWORK", "BAD_ANSWER",
// "INVALID_TASK", "UNSUPPORTED_TYPE".
//
// The account key never appears in Error().
type Error struct {
	Op         string // "submit", "poll", "balance", ...
	Code       string
	Text       string // human text: the provider's error_text or our own
	Class      Class
	RetryAfter time.Duration // a suggested wait; zero means use your backoff
	HTTPStatus int           // when the failure was an HTTP status
	Err        error         // the underlying cause, key redacted
}
