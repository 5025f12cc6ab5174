package captchaqtype

import (
	"context"
	"errors"
	"time"
)

// ErrNotFound is returned by a Store for an unknown task id.
var ErrNotFound = errors.New("captchaq: task not found")

// Record is everything a Store keeps about one task.
type Record struct {
	Task   Task   `json:"task"`
	Status Status `json:"status"`
	// Seq orders tasks by acceptance (FIFO within a priority). The store
	// assigns it; it only grows.
	Seq int64 `json:"seq"`
	// Fingerprint is Task.Fingerprint() as the store took the task: what
	// the provider is asked. The store sets it on Enqueue and keeps it, so a
	// later task under the same id can be told apart (Record.Conflict).
	Fingerprint string `json:"fingerprint,omitempty"`
	// CaptchaID is the provider's id of the attempt in flight; set only while
	// Status is StatusInFlight.
	CaptchaID string `json:"captcha_id,omitempty"`
	// Attempts counts submissions the provider accepted or refused for this
	// task (transient network failures and "no free thread" do not count).
	Attempts int `json:"attempts"`
	// NotBefore: a queued task is not submitted before this time (retry
	// backoff). Zero means at once.
	NotBefore time.Time `json:"not_before,omitzero"`
	// LastError is the latest failure's text and code, kept across retries.
	LastError     string    `json:"last_error,omitempty"`
	LastErrorCode string    `json:"last_error_code,omitempty"`
	AcceptedAt    time.Time `json:"accepted_at"`
	SubmittedAt   time.Time `json:"submitted_at,omitzero"`
	// Result is set once Status is final.
	Result *Result `json:"result,omitempty"`
	// Report is a client's verdict on a solved task's answer, ReportGood
	// or ReportBad, set once by Store.Report, with ReportedAt; "" when
	// none. Renew clears it (a new solve, a new answer).
	Report     string    `json:"report,omitempty"`
	ReportedAt time.Time `json:"reported_at,omitzero"`
}

// The verdicts of Record.Report.
const (
	ReportGood = "good"
	ReportBad  = "bad"
)

// Store keeps tasks durable. The queue calls it at each step of a task's
// life, and only moves on once the call has returned:
//
//   - Enqueue before a task is acknowledged to whoever submitted it;
//   - Checkpoint with the provider's id before the first poll, so a crash
//     resumes polling instead of paying for a second solve;
//   - Finish before a result is delivered.
//
// Every implementation must pass the conformance suite in package storetest.
// All methods are safe for concurrent use.
type Store interface {
	// Enqueue makes tasks durable as StatusQueued, in order, with their
	// Fingerprint, and returns one record per task. A task whose ID is
	// already stored is left as it is, even when it differs (the queue
	// refuses it by comparing fingerprints); its existing record is
	// returned with existed[i] true.
	Enqueue(ctx context.Context, tasks []Task, now time.Time) (recs []Record, existed []bool, err error)
	// Renew puts a solved task back in the queue to be solved again, as t
	// (same id and fingerprint; its other fields replace the stored ones):
	// attempts reset, result cleared, accepted at now, Seq kept. The queue
	// calls it for a task whose token expired (Result.Expired). It fails
	// with ErrNotFound for an unknown id and with an error for a task that
	// is not solved.
	Renew(ctx context.Context, t Task, now time.Time) (Record, error)
	// Checkpoint marks a task in flight with the provider's id for attempt
	// number attempt.
	Checkpoint(ctx context.Context, id, captchaID string, attempt int, at time.Time) error
	// Retry puts a task back in the queue after a failed attempt: attempts
	// is the count so far, notBefore the earliest next submit, and the error
	// is kept as LastError. Any captcha id is cleared.
	Retry(ctx context.Context, id string, attempts int, notBefore time.Time, errText, errCode string) error
	// Finish stores a final result. A failed result makes the task a dead
	// letter until it is replayed or pruned.
	Finish(ctx context.Context, r Result) error
	// Pending calls fn for every task that is queued or in flight, in Seq
	// order, so a restarted queue can resume them.
	Pending(ctx context.Context, fn func(Record) error) error
	// Get returns one task's record, or ErrNotFound.
	Get(ctx context.Context, id string) (Record, error)
	// Results calls fn for every stored final result, in Seq order.
	Results(ctx context.Context, fn func(Result) error) error
	// DeadLetters calls fn for every failed task that matches f, in Seq order.
	DeadLetters(ctx context.Context, f DeadLetterFilter, fn func(Record) error) error
	// Replay puts the dead letters that match f back in the queue with their
	// attempts reset, and returns how many it moved.
	Replay(ctx context.Context, f DeadLetterFilter, now time.Time) (int, error)
	// Report records a client's verdict on a solved task's answer, once
	// (the provider is told once): good is ReportGood, else ReportBad.
	// The first report of a task stores the verdict and at, and Report
	// returns true; a later one, of either verdict, changes nothing and
	// returns false. It fails with ErrNotFound for an unknown id and with
	// ErrNotSolved for a task that is not solved.
	Report(ctx context.Context, id string, good bool, at time.Time) (first bool, err error)
	// Prune deletes final tasks that finished before the given time and
	// returns how many it deleted.
	Prune(ctx context.Context, finishedBefore time.Time) (int, error)
	// Close releases the store. Calls after Close return an error.
	Close() error
}

// PingbackLedger is a Store that keeps the pingbacks owed to clients
// durable, so that a process that dies with a pingback unsent leaves it to
// another (a replica of the front, or itself started again). A pingback
// is owed from the Finish of a task whose Task.Pingback is set, at the
// store's clock, until PingbackDone; a later Finish (of a renewed or
// replayed task) owes it again. Whoever sends one holds its lease first:
// TakePingback for the task whose result it recorded, ClaimPingbacks for
// those owed longer than a grace period, which their recorder did not
// mark done (it died, or its store call failed). A lease is taken in one
// step: of several processes asking at once, one gets it.
//
// It is optional: the server keeps pingbacks in memory with a Store
// without it. storetest checks every implementation of it.
type PingbackLedger interface {
	// TakePingback leases task id's pingback for lease when it is owed
	// and no lease on it runs: its record and true. False, with no
	// error, when none is owed (sent already, no pingback, an unknown
	// id) or another holds it.
	TakePingback(ctx context.Context, id string, lease time.Duration) (Record, bool, error)
	// ClaimPingbacks leases, for lease, at most max pingbacks owed for
	// longer than grace with no lease running, oldest owed first, and
	// returns their tasks' records (final, with their Result).
	ClaimPingbacks(ctx context.Context, grace, lease time.Duration, max int) ([]Record, error)
	// PingbackDone marks task id's pingback no longer owed: sent, or
	// given up. An unknown id, or one owing none, is not an error.
	PingbackDone(ctx context.Context, id string) error
}

// StateStore is a Store that keeps small named values of the queue across
// restarts, and across processes that take over one database in turn. The
// queue keeps its providers' refusals of types there (Config.RefusalHold),
// loaded at Start and saved as they change, so a queue started again does
// not pay a refused submit again for each.
//
// It is optional: with a Store without it the refusals live in memory.
// store/sqlite and store/postgres implement it; storetest checks every
// implementation of it.
type StateStore interface {
	// LoadState returns the value SaveState stored under name, byte for
	// byte; nil, with no error, when none is.
	LoadState(ctx context.Context, name string) ([]byte, error)
	// SaveState stores value under name, replacing what was there; the
	// other names' values stay as they are.
	SaveState(ctx context.Context, name string, value []byte) error
}

// DeadLetterFilter selects dead letters. The zero value selects none; set
// All, IDs or ErrorCode. Tenant, when set, narrows what they select to one
// tenant's dead letters (with All: every dead letter of that tenant); a
// Store finds them without reading the others' (an index).
type DeadLetterFilter struct {
	All       bool
	IDs       []string
	ErrorCode string // matches Result.ErrorCode exactly
	Tenant    string // matches Task.Tenant exactly
}

// ReservoirStore is a Store that keeps reservoirs' tokens: answers solved
// ahead of demand for a reservoir (internal/reservoir sizes it), each
// handed to one task. Tokens are kept by reservoir name and by the ID of
// the result that solved them; a token is a solved Result with its
// ExpiresAt set. Taking one is a single step: of several processes
// sharing the store that ask at once, one gets each token, and a process
// that dies after taking one loses that one only.
//
// It is optional: a Store without it serves no reservoir. storetest
// checks every implementation of it.
type ReservoirStore interface {
	// StockToken adds r, a solved result of one of reservoir name's
	// refills, to its stock under r.ID; an ID stocked already is left as
	// it is. It fails for a result that is not solved or has no
	// ExpiresAt.
	StockToken(ctx context.Context, name string, r Result) error
	// TakeToken removes from reservoir name's stock, and returns, the
	// token that expires first among those expiring at or after
	// notBefore (now plus the least life a token handed out must have
	// left). False, with no error, when there is none.
	TakeToken(ctx context.Context, name string, notBefore time.Time) (Result, bool, error)
	// DropTokens removes reservoir name's tokens that expire before
	// before, aged out unused, and says how many it removed.
	DropTokens(ctx context.Context, name string, before time.Time) (int, error)
	// TokenCounts counts the tokens in each reservoir's stock, by name;
	// a reservoir with none is left out.
	TokenCounts(ctx context.Context) (map[string]int, error)
}
