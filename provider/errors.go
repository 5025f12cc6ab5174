package provider

import (
	"strconv"
	"strings"
	"time"
)

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
	// answered: the provider gave this answer (Classify), rather than
	// the client refusing a request it did not send.
	answered bool
}

// String names the class for logs and metrics labels.
func (c Class) String() string {
	switch c {
	case ClassTransient:
		return "transient"
	case ClassNoSlot:
		return "no_slot"
	case ClassRateLimit:
		return "rate_limit"
	case ClassUnsolvable:
		return "unsolvable"
	case ClassTask:
		return "task"
	case ClassAccount:
		return "account"
	}
	return "class(" + strconv.Itoa(int(c)) + ")"
}

// Error formats as "<op>: <CODE>: <text>: <cause>", leaving out empty and
// repeated parts. The client redacts the key from every cause before it is
// stored in Err, so nothing here can leak it.
func (e *Error) Error() string {
	var b strings.Builder
	if e.Op != "" {
		b.WriteString(e.Op)
		b.WriteString(": ")
	}
	parts := 0
	add := func(s string) {
		if s == "" {
			return
		}
		if parts > 0 {
			b.WriteString(": ")
		}
		b.WriteString(s)
		parts++
	}
	// Validation failures read better as plain sentences.
	if (e.Code != CodeInvalidTask && e.Code != CodeUnsupportedType) || e.Text == "" {
		add(e.Code)
	}
	if e.Text != e.Code {
		add(e.Text)
	}
	if e.Err != nil {
		if s := e.Err.Error(); s != e.Text {
			add(s)
		}
	}
	if parts == 0 {
		add("provider error (" + e.Class.String() + ")")
	}
	return b.String()
}

// Unwrap returns the underlying cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is the same provider answer: an *Error with a
// Code matches by Code (every "ERROR: 100x" code matches ErrTooManyRequests);
// a class sentinel (ErrClassTransient, ErrClassAccount, ...) matches by Class.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	if t.Code == "" {
		return t.isClassSentinel() && e.Class == t.Class
	}
	if t.Code == e.Code {
		return true
	}
	return t.Code == codeTooMany100x && strings.HasPrefix(e.Code, "ERROR: 100")
}

// isClassSentinel reports whether e is one of the ErrClass* values.
func (e *Error) isClassSentinel() bool {
	for _, s := range classSentinels {
		if e == s {
			return true
		}
	}
	return false
}

// Class sentinels: errors.Is(err, ErrClassAccount) is true for any *Error of
// that class.
var (
	ErrClassTransient  = &Error{Class: ClassTransient, Text: "transient failure"}
	ErrClassNoSlot     = &Error{Class: ClassNoSlot, Text: "no free thread"}
	ErrClassRateLimit  = &Error{Class: ClassRateLimit, Text: "rate limited"}
	ErrClassUnsolvable = &Error{Class: ClassUnsolvable, Text: "unsolvable"}
	ErrClassTask       = &Error{Class: ClassTask, Text: "task rejected"}
	ErrClassAccount    = &Error{Class: ClassAccount, Text: "account unusable"}
)

var classSentinels = [...]*Error{
	ErrClassTransient, ErrClassNoSlot, ErrClassRateLimit,
	ErrClassUnsolvable, ErrClassTask, ErrClassAccount,
}
