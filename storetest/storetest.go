// Package storetest is the conformance suite for captchaq.Store. Every
// implementation (memory, SQLite, and any later one) calls Run from its own
// tests:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) captchaq.Store {
//			s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "q.db"), sqlite.Config{})
//			if err != nil {
//				t.Fatal(err)
//			}
//			return s
//		})
//	}
//
// The suite pins down what the Store doc comments leave open:
//
//   - Enqueue of a batch that names one id twice keeps the first; the second
//     is reported as existed with the first's record.
//   - Enqueue stores each task's Fingerprint and returns it; a known id
//     with another task (other fingerprint) leaves the first task, its
//     fingerprint and its result as they were, so Record.Conflict refuses
//     the second.
//   - Renew of a solved task queues it again as the given task (attempts
//     0, no result, AcceptedAt now, Seq kept); of a queued or failed task
//     it fails and changes nothing; of an unknown id it is ErrNotFound.
//   - Enqueue with an empty id fails as a whole and stores nothing.
//   - Checkpoint, Retry and Finish of an unknown id return ErrNotFound.
//   - Checkpoint and Retry of a final task fail and change nothing.
//   - Finish of a result whose status is not final is an error.
//   - Checkpoint clears NotBefore. Retry keeps SubmittedAt (the latest
//     submit); LastError stays until a Retry or failed Finish replaces it.
//   - Finish sets Status, Attempts and Result, and for a failed result
//     LastError and LastErrorCode; it clears CaptchaID and leaves the other
//     fields as they were.
//   - Replay keeps Seq and LastError; it sets AcceptedAt to now, resets
//     Attempts to 0, and clears CaptchaID, NotBefore, SubmittedAt and
//     Result.
//   - A DeadLetterFilter with both IDs and ErrorCode selects the dead
//     letters that match both; All selects every one. Tenant narrows
//     each of them (All included) to that tenant's, for DeadLetters and
//     Replay alike.
//   - Report of a solved task stores the first verdict and its time and
//     returns true; every later one (concurrent ones too: exactly one
//     wins) returns false and changes nothing. Of a queued, in-flight or
//     failed task it is ErrNotSolved, of an unknown id ErrNotFound. Renew
//     clears the report.
//   - Prune's cutoff is exclusive: a task finished exactly at it stays.
//   - Seq keeps growing after the newest task was pruned.
//   - Times come back equal to within a millisecond, in any location;
//     Task.TTL is not stored (the queue turns it into Deadline first).
//   - A nil and an empty Params or Answer are the same.
//   - Every task Task.Validate accepts is stored and read back as it
//     was, at the limits too (an id and a tenant of MaxIDBytes that do
//     not compress, any UTF-8 text without NUL bytes): no door publishes
//     or submits a task its store then refuses.
//   - A PingbackLedger owes a pingback from the Finish of a task with
//     Task.Pingback (a failed one too; again after a Renew) until
//     PingbackDone; a lease is taken by one of many at once, and
//     ClaimPingbacks takes the oldest owed first, at most max.
//   - A ReservoirStore hands each token to one take (of many at once
//     too: TokensTakenOnce), the one expiring first at or after
//     notBefore; it keeps the first token stocked under an ID, refuses
//     what Result.CheckStockable refuses with its error, and gives a
//     token back whole (its Answer byte for byte). DropTokens' cutoff is
//     exclusive: a token expiring at it stays.
//   - A StateStore loads what it saved under a name byte for byte (any
//     bytes; an empty value is one, not nil), the last save of a name
//     wins, each name keeps its own, and a name never saved loads nil.
//   - Every call after Close returns ErrStoreClosed (errors.Is).
//
// Recorder wraps a Store and records its Enqueue calls, for the tests of
// what stores through one (a batch goes to the Store in one Enqueue).
package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
)

// Run runs the suite. open must return a new, empty store for each call;
// Run closes it when the subtest ends (a second Close may return an error,
// which Run ignores). The suite's times are in March 2026, so open must turn
// off anything that prunes on its own.
func Run(t *testing.T, open func(t *testing.T) captchaq.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s captchaq.Store)
	}{
		{"EnqueueAssignsGrowingSeq", testEnqueueAssignsGrowingSeq},
		{"EnqueueKnownIDLeavesItUnchanged", testEnqueueKnownID},
		{"EnqueueDuplicateInBatchFirstWins", testEnqueueDuplicateInBatch},
		{"KnownIDWithOtherTaskKeepsTheFirst", testKnownIDOtherTask},
		{"RenewSolvesAgain", testRenew},
		{"EnqueueEmptyIDStoresNothing", testEnqueueEmptyID},
		{"Checkpoint", testCheckpoint},
		{"Retry", testRetry},
		{"FinishAndResultsInSeqOrder", testFinishAndResults},
		{"FinishRejectsNonFinalStatus", testFinishRejectsNonFinal},
		{"UnknownIDIsErrNotFound", testUnknownID},
		{"CheckpointOrRetryOfFinalTaskFails", testFinalIsFinal},
		{"DeadLetterFilters", testDeadLetterFilters},
		{"DeadLetterFiltersByTenant", testDeadLetterTenant},
		{"ReportOnce", testReportOnce},
		{"PingbackOwedUntilDone", testPingbackOwed},
		{"PingbackClaimedOnce", testPingbackClaimsOnce},
		{"TokenTakenOnce", testTokenTakenOnce},
		{"TokenTakeExpiringFirst", testTakeExpiringFirst},
		{"TokenStockKnownIDLeavesIt", testStockKnownIDLeavesIt},
		{"TokenStockRefusesUnstockable", testStockRefusesUnstockable},
		{"TokenDropBeforeCutoff", testDropTokens},
		{"TokenReservoirsSeparate", testReservoirsSeparate},
		{"TokenRoundTrip", testTokenRoundTrip},
		{"TokenTakenOnceConcurrently", testTokensTakenOnceConcurrently},
		{"StateSavedAndReplaced", testStateSavedAndReplaced},
		{"StateBytesKeptExactly", testStateBytesExact},
		{"Replay", testReplay},
		{"PendingIsQueuedAndInFlightInSeqOrder", testPending},
		{"CallbackErrorStopsIteration", testCallbackError},
		{"PruneDeletesOnlyFinalBeforeCutoff", testPrune},
		{"SeqGrowsAfterPrune", testSeqGrowsAfterPrune},
		{"TaskRoundTrip", testTaskRoundTrip},
		{"ValidTasksAtTheLimitsAreStored", testValidAtLimits},
		{"ResultRoundTrip", testResultRoundTrip},
		{"Concurrent", testConcurrent},
		{"CallsAfterCloseFail", testClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			t.Cleanup(func() { _ = s.Close() })
			tc.fn(t, s)
		})
	}
}

// t0 has nanoseconds and a zone other than UTC, so a store that drops
// either shows up.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.FixedZone("UTC+1", 3600))

// at is t0 plus d.
func at(d time.Duration) time.Time { return t0.Add(d) }

// cmpOpts compares times to the millisecond in any location and treats nil
// and empty maps and slices alike.
var cmpOpts = cmp.Options{
	cmp.Comparer(func(a, b time.Time) bool {
		if a.IsZero() || b.IsZero() {
			return a.IsZero() && b.IsZero()
		}
		d := a.Sub(b)
		return d > -time.Millisecond && d < time.Millisecond
	}),
	cmpopts.EquateEmpty(),
}

func diff(want, got any) string { return cmp.Diff(want, got, cmpOpts) }

func task(id string) captchaq.Task {
	return captchaq.Task{
		ID:     id,
		Method: "turnstile",
		Params: map[string]string{"sitekey": "0x4AAA-" + id, "pageurl": "https://shop.example/" + id},
	}
}

func enqueue(t *testing.T, s captchaq.Store, now time.Time, tasks ...captchaq.Task) []captchaq.Record {
	t.Helper()
	recs, existed, err := s.Enqueue(context.Background(), tasks, now)
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	if len(recs) != len(tasks) || len(existed) != len(tasks) {
		t.Fatalf("Enqueue of %d tasks returned %d records and %d existed flags", len(tasks), len(recs), len(existed))
	}
	return recs
}

func get(t *testing.T, s captchaq.Store, id string) captchaq.Record {
	t.Helper()
	rec, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("Get(%q): %v", id, err)
	}
	return rec
}

func checkpoint(t *testing.T, s captchaq.Store, id, captchaID string, attempt int, when time.Time) {
	t.Helper()
	if err := s.Checkpoint(context.Background(), id, captchaID, attempt, when); err != nil {
		t.Fatalf("Checkpoint(%q): %v", id, err)
	}
}

func finish(t *testing.T, s captchaq.Store, r captchaq.Result) {
	t.Helper()
	if err := s.Finish(context.Background(), r); err != nil {
		t.Fatalf("Finish(%q): %v", r.ID, err)
	}
}

func pending(t *testing.T, s captchaq.Store) []captchaq.Record {
	t.Helper()
	var out []captchaq.Record
	if err := s.Pending(context.Background(), func(r captchaq.Record) error {
		out = append(out, r)
		return nil
	}); err != nil {
		t.Fatalf("Pending: %v", err)
	}
	return out
}

func results(t *testing.T, s captchaq.Store) []captchaq.Result {
	t.Helper()
	var out []captchaq.Result
	if err := s.Results(context.Background(), func(r captchaq.Result) error {
		out = append(out, r)
		return nil
	}); err != nil {
		t.Fatalf("Results: %v", err)
	}
	return out
}

func deadLetters(t *testing.T, s captchaq.Store, f captchaq.DeadLetterFilter) []captchaq.Record {
	t.Helper()
	var out []captchaq.Record
	if err := s.DeadLetters(context.Background(), f, func(r captchaq.Record) error {
		out = append(out, r)
		return nil
	}); err != nil {
		t.Fatalf("DeadLetters(%+v): %v", f, err)
	}
	return out
}

func ids(recs []captchaq.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.Task.ID
	}
	return out
}

func resultIDs(rs []captchaq.Result) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.ID
	}
	return out
}

// solved and failed build the result the queue would finish a task with
// after one accepted submit at t0+1s.
func solved(id string, attempts int, finishedAt time.Time) captchaq.Result {
	return captchaq.Result{
		ID: id, Status: captchaq.StatusSolved, Method: "turnstile", Kind: provider.KindTurnstile,
		Token: "0.tok-" + id, Attempts: attempts, SolveSeconds: 7.25,
		ExpiresAt:  finishedAt.Add(300 * time.Second),
		AcceptedAt: t0, SubmittedAt: at(time.Second), FinishedAt: finishedAt,
	}
}

func failed(id, code string, attempts int, finishedAt time.Time) captchaq.Result {
	return captchaq.Result{
		ID: id, Status: captchaq.StatusFailed, Method: "turnstile", Kind: provider.KindTurnstile,
		Error: "provider: " + code, ErrorCode: code, Attempts: attempts,
		AcceptedAt: t0, SubmittedAt: at(time.Second), FinishedAt: finishedAt,
	}
}

// finishedRecord is what Get returns for before once r is stored.
func finishedRecord(before captchaq.Record, r captchaq.Result) captchaq.Record {
	want := before
	want.Status = r.Status
	want.CaptchaID = ""
	want.Attempts = r.Attempts
	if r.Status == captchaq.StatusFailed {
		want.LastError, want.LastErrorCode = r.Error, r.ErrorCode
	}
	want.Result = &r
	return want
}
