package captchaqtype

import (
	"errors"
	"fmt"
	"time"

	"github.com/captchaq/captchaq/provider"
)

// Sentinel errors. Test them with errors.Is.
var (
	// ErrClosed is returned by Submit and its kin after Shutdown or Close
	// began, and by Future.Wait for a task the queue stopped without
	// finishing (it stays in the Store for the next Start).
	ErrClosed = errors.New("captchaq: queue closed")
	// ErrExpired: the task's deadline passed before a thread was free; it
	// was never submitted. Its Result has ErrorCode "EXPIRED".
	ErrExpired = errors.New("captchaq: deadline passed before the task could be submitted")
	// ErrPaused: the provider refused the account (bad key, IP banned), so
	// all sending is paused. Every *AccountError matches it.
	ErrPaused = errors.New("captchaq: sending paused by an account error")
	// ErrInvalidTask matches every *TaskError.
	ErrInvalidTask = errors.New("captchaq: invalid task")
	// ErrInFlight: Cancel of a task already submitted to the provider.
	ErrInFlight = errors.New("captchaq: task already submitted to the provider; it cannot be canceled")
	// ErrFinal: Cancel of a task that already has its result.
	ErrFinal = errors.New("captchaq: task already finished")
	// ErrNotSolved: Store.Report of a task that is not solved.
	ErrNotSolved = errors.New("captchaq: task is not solved")
	// ErrStoreClosed is returned by a Store's methods after Close.
	ErrStoreClosed = errors.New("captchaq: store closed")
)

// Error codes of the queue's own, in Result.ErrorCode.
const (
	CodeExpired         = "EXPIRED"
	CodeCanceled        = "CANCELED"
	CodeInvalidTask     = provider.CodeInvalidTask     // a field missing, malformed or out of range
	CodeUnsupportedType = provider.CodeUnsupportedType // a captcha type the provider does not solve

	// CodeAccountErrorTask: the provider answered an account error (bad
	// key, IP refused) to this task's submit while the account itself
	// checked fine, or the task drew one again and again: the task fails
	// alone instead of pausing every client's sending.
	CodeAccountErrorTask = "TASK_CAUSED_ACCOUNT_ERROR"

	// CodeProviderDown: the provider a task was in flight at could not be
	// polled (down, or refusing the account), so the task was submitted
	// to another one: a task's LastErrorCode, never a final result's.
	CodeProviderDown = "PROVIDER_DOWN"

	// CodePollBudget and CodeResultWindow: the task's captcha id reached
	// its provider's poll budget or result window unanswered
	// (ProviderConfig.PollBudget, ResultWindow), so it is never polled
	// again; the task is submitted again as a new attempt.
	CodePollBudget   = "ERROR_POLL_BUDGET"
	CodeResultWindow = "ERROR_RESULT_WINDOW"
)

// TaskError says why a task was refused before anything was sent. Msg
// names the field and the fix.
type TaskError struct {
	ID   string
	Code string // CodeInvalidTask or CodeUnsupportedType
	Msg  string
	Err  error // the provider's validation error, if any
}

func (e *TaskError) Error() string {
	if e.ID == "" {
		return "captchaq: invalid task: " + e.Msg
	}
	return fmt.Sprintf("captchaq: task %q: %s", e.ID, e.Msg)
}

// Is makes every TaskError match ErrInvalidTask.
func (e *TaskError) Is(target error) bool { return target == ErrInvalidTask }

// Unwrap returns the provider's validation error.
func (e *TaskError) Unwrap() error { return e.Err }

// AccountError is why all sending is paused: the provider refused the
// account (bad key, no plan, IP not allowed or banned). errors.Is matches
// ErrPaused and, through Unwrap, the provider's own sentinel (for example
// provider.ErrWrongUserKey).
type AccountError struct {
	Code string // the provider's code, e.g. ERROR_WRONG_USER_KEY
	// Until is when sending resumes by itself (a temporary IP ban); zero
	// means it stays paused until Queue.Resume.
	Until time.Time
	Err   error
	// Provider names the provider that refused, in a queue of several
	// (Config.Providers); empty otherwise.
	Provider string
}

func (e *AccountError) Error() string {
	s := "captchaq: all sending paused: " + e.Err.Error()
	if e.Provider != "" {
		s = "captchaq: sending to provider " + e.Provider + " paused: " + e.Err.Error()
	}
	if !e.Until.IsZero() {
		s += "; resuming at " + e.Until.UTC().Format(time.RFC3339)
	} else {
		s += "; fix the account (key, plan or IP allow-list) and restart or call Resume"
	}
	return s
}

// Is makes every AccountError match ErrPaused.
func (e *AccountError) Is(target error) bool { return target == ErrPaused }

// Unwrap returns the provider's error.
func (e *AccountError) Unwrap() error { return e.Err }
