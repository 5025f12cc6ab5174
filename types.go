package captchaq

import (
	"time"

	"github.com/captchaq/captchaq/captchaqtype"
)

// The types a queue shares with its stores, fleets and doors are declared
// in package captchaqtype, which documents their fields and methods; they
// are the same types under the same names here.

// Task is one unit of work for the queue (captchaqtype.Task).
type Task = captchaqtype.Task

// ValidTask is a task a door validated (captchaqtype.ValidTask).
type ValidTask = captchaqtype.ValidTask

// Status is where a task stands (captchaqtype.Status).
type Status = captchaqtype.Status

// Result is the final outcome of a task (captchaqtype.Result).
type Result = captchaqtype.Result

// Record is everything a Store keeps about one task (captchaqtype.Record).
type Record = captchaqtype.Record

// Known is what a task submitted under a known id is (captchaqtype.Known).
type Known = captchaqtype.Known

// Store keeps tasks durable (captchaqtype.Store).
type Store = captchaqtype.Store

// PingbackLedger is a Store that keeps pingbacks owed
// (captchaqtype.PingbackLedger).
type PingbackLedger = captchaqtype.PingbackLedger

// StateStore is a Store that keeps small named values
// (captchaqtype.StateStore).
type StateStore = captchaqtype.StateStore

// ReservoirStore is a Store that keeps reservoirs' tokens
// (captchaqtype.ReservoirStore).
type ReservoirStore = captchaqtype.ReservoirStore

// DeadLetterFilter selects dead letters (captchaqtype.DeadLetterFilter).
type DeadLetterFilter = captchaqtype.DeadLetterFilter

// Fleet is how a Queue takes part in a fleet (captchaqtype.Fleet).
type Fleet = captchaqtype.Fleet

// Journal makes a queue's steps durable (captchaqtype.Journal).
type Journal = captchaqtype.Journal

// ThreadPool shares one plan's threads among processes
// (captchaqtype.ThreadPool).
type ThreadPool = captchaqtype.ThreadPool

// Provider is what the queue needs from a solving service
// (captchaqtype.Provider).
type Provider = captchaqtype.Provider

// BalanceChecker is a Provider that reads the account's balance
// (captchaqtype.BalanceChecker).
type BalanceChecker = captchaqtype.BalanceChecker

// ProviderConfig is one provider of a queue with several
// (captchaqtype.ProviderConfig).
type ProviderConfig = captchaqtype.ProviderConfig

// ReservoirConfig declares a reservoir (captchaqtype.ReservoirConfig).
type ReservoirConfig = captchaqtype.ReservoirConfig

// ReservoirCounts are one reservoir's numbers (captchaqtype.ReservoirCounts).
type ReservoirCounts = captchaqtype.ReservoirCounts

// Metrics is a snapshot of the queue's counters (captchaqtype.Metrics).
type Metrics = captchaqtype.Metrics

// ProviderMetrics is one provider's share of a queue's work
// (captchaqtype.ProviderMetrics).
type ProviderMetrics = captchaqtype.ProviderMetrics

// TypeRefusal is a provider's refusal of a type (captchaqtype.TypeRefusal).
type TypeRefusal = captchaqtype.TypeRefusal

// ReportOutcome is what came of one client's report
// (captchaqtype.ReportOutcome).
type ReportOutcome = captchaqtype.ReportOutcome

// TaskError says why a task was refused (captchaqtype.TaskError).
type TaskError = captchaqtype.TaskError

// AccountError is why all sending is paused (captchaqtype.AccountError).
type AccountError = captchaqtype.AccountError

// IDConflictError refuses a task whose id names another task
// (captchaqtype.IDConflictError).
type IDConflictError = captchaqtype.IDConflictError

// The states of a task (captchaqtype.Status).
const (
	StatusQueued   = captchaqtype.StatusQueued
	StatusInFlight = captchaqtype.StatusInFlight
	StatusSolved   = captchaqtype.StatusSolved
	StatusFailed   = captchaqtype.StatusFailed
)

// What a task submitted under a known id is (captchaqtype.Known).
const (
	KnownPending  = captchaqtype.KnownPending
	KnownAnswered = captchaqtype.KnownAnswered
	KnownExpired  = captchaqtype.KnownExpired
)

// Priorities (captchaqtype.PriorityDefault, captchaqtype.PriorityLowest).
const (
	PriorityDefault = captchaqtype.PriorityDefault
	PriorityLowest  = captchaqtype.PriorityLowest
)

// Reservoirs' defaults (captchaqtype.ReservoirMaxDefault,
// captchaqtype.ReservoirShareDefault).
const (
	ReservoirMaxDefault   = captchaqtype.ReservoirMaxDefault
	ReservoirShareDefault = captchaqtype.ReservoirShareDefault
)

// The limits of what every Store holds (captchaqtype.MaxIDBytes).
const (
	MaxIDBytes     = captchaqtype.MaxIDBytes
	MaxParamsBytes = captchaqtype.MaxParamsBytes
)

// Error codes of the queue's own, in Result.ErrorCode
// (captchaqtype.CodeExpired).
const (
	CodeExpired          = captchaqtype.CodeExpired
	CodeCanceled         = captchaqtype.CodeCanceled
	CodeInvalidTask      = captchaqtype.CodeInvalidTask
	CodeUnsupportedType  = captchaqtype.CodeUnsupportedType
	CodeAccountErrorTask = captchaqtype.CodeAccountErrorTask
	CodeProviderDown     = captchaqtype.CodeProviderDown
	CodePollBudget       = captchaqtype.CodePollBudget
	CodeResultWindow     = captchaqtype.CodeResultWindow
	CodeIDConflict       = captchaqtype.CodeIDConflict
)

// Clients' verdicts and what came of reporting them
// (captchaqtype.ReportGood, captchaqtype.ReportAccepted).
const (
	ReportGood     = captchaqtype.ReportGood
	ReportBad      = captchaqtype.ReportBad
	ReportAccepted = captchaqtype.ReportAccepted
	ReportRefused  = captchaqtype.ReportRefused
	ReportFailed   = captchaqtype.ReportFailed
	ReportTooLate  = captchaqtype.ReportTooLate
	ReportNotSent  = captchaqtype.ReportNotSent
)

// ReportOutcomes are the outcomes in the order /v1/stats and the
// dashboard show them (captchaqtype.ReportOutcomes).
var ReportOutcomes = captchaqtype.ReportOutcomes

// Sentinel errors (captchaqtype.ErrClosed). Test them with errors.Is.
var (
	ErrClosed        = captchaqtype.ErrClosed
	ErrExpired       = captchaqtype.ErrExpired
	ErrPaused        = captchaqtype.ErrPaused
	ErrInvalidTask   = captchaqtype.ErrInvalidTask
	ErrInFlight      = captchaqtype.ErrInFlight
	ErrFinal         = captchaqtype.ErrFinal
	ErrNotSolved     = captchaqtype.ErrNotSolved
	ErrNotFound      = captchaqtype.ErrNotFound
	ErrStoreClosed   = captchaqtype.ErrStoreClosed
	ErrIDConflict    = captchaqtype.ErrIDConflict
	ErrReportTooLate = captchaqtype.ErrReportTooLate
	ErrReportNotSent = captchaqtype.ErrReportNotSent
)

// ParseTask reads one line of task JSONL (captchaqtype.ParseTask).
func ParseTask(line []byte) (Task, error) { return captchaqtype.ParseTask(line) }

// RefusalCode is the Result.ErrorCode for a task a door refused with err
// (captchaqtype.RefusalCode).
func RefusalCode(err error) string { return captchaqtype.RefusalCode(err) }

// ReportOutcomeOf classifies the error of forwarding a report
// (captchaqtype.ReportOutcomeOf).
func ReportOutcomeOf(err error) (outcome, code string) { return captchaqtype.ReportOutcomeOf(err) }

// ConflictByFingerprint is Record.Conflict for a door that keeps only a
// fingerprint (captchaqtype.ConflictByFingerprint).
func ConflictByFingerprint(t Task, fingerprint, differs string) error {
	return captchaqtype.ConflictByFingerprint(t, fingerprint, differs)
}

// LongestFirst reorders tasks as the queue serves them
// (captchaqtype.LongestFirst).
func LongestFirst(tasks []Task) { captchaqtype.LongestFirst(tasks) }

// SortLongestFirst is LongestFirst for a slice of anything that carries a
// Task (captchaqtype.SortLongestFirst).
func SortLongestFirst[E any](s []E, task func(E) Task) { captchaqtype.SortLongestFirst(s, task) }

// PublishedReportWindow is p's published window for reports, or 0
// (captchaqtype.PublishedReportWindow).
func PublishedReportWindow(p Provider) time.Duration { return captchaqtype.PublishedReportWindow(p) }
