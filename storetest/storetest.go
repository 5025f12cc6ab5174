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
	"encoding/json"
	"errors"
	"fmt"
	"sync"
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

func testEnqueueAssignsGrowingSeq(t *testing.T, s captchaq.Store) {
	first := []captchaq.Task{task("a"), task("b"), task("c")}
	recs1, existed1, err := s.Enqueue(context.Background(), first, t0)
	if err != nil {
		t.Fatal(err)
	}
	second := []captchaq.Task{task("d"), task("e")}
	recs2, existed2, err := s.Enqueue(context.Background(), second, at(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if d := diff([]bool{false, false, false, false, false}, append(existed1, existed2...)); d != "" {
		t.Errorf("existed (-want +got):\n%s", d)
	}
	recs := append(recs1, recs2...)
	tasks := append(first, second...)
	var prev int64
	for i, rec := range recs {
		if rec.Seq <= prev {
			t.Errorf("record %d (%s) has Seq %d, want more than %d", i, rec.Task.ID, rec.Seq, prev)
		}
		prev = rec.Seq
		now := t0
		if i >= len(first) {
			now = at(time.Minute)
		}
		want := captchaq.Record{Task: tasks[i], Status: captchaq.StatusQueued, Seq: rec.Seq, Fingerprint: tasks[i].Fingerprint(), AcceptedAt: now}
		if d := diff(want, rec); d != "" {
			t.Errorf("Enqueue record %d (-want +got):\n%s", i, d)
		}
		if d := diff(want, get(t, s, tasks[i].ID)); d != "" {
			t.Errorf("Get(%q) (-want +got):\n%s", tasks[i].ID, d)
		}
	}
}

func testEnqueueKnownID(t *testing.T, s captchaq.Store) {
	enqueue(t, s, t0, task("a"))
	checkpoint(t, s, "a", "cid-1", 1, at(time.Second))
	before := get(t, s, "a")

	changed := task("a")
	changed.Method = "userrecaptcha"
	changed.Priority = 1
	recs, existed, err := s.Enqueue(context.Background(), []captchaq.Task{changed, task("b")}, at(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if d := diff([]bool{true, false}, existed); d != "" {
		t.Errorf("existed (-want +got):\n%s", d)
	}
	if d := diff(before, recs[0]); d != "" {
		t.Errorf("record returned for the known id (-want +got):\n%s", d)
	}
	if d := diff(before, get(t, s, "a")); d != "" {
		t.Errorf("known id after a second Enqueue (-want +got):\n%s", d)
	}
	if recs[1].Seq <= before.Seq || recs[1].Status != captchaq.StatusQueued {
		t.Errorf("new task b: Seq %d status %q, want Seq > %d and queued", recs[1].Seq, recs[1].Status, before.Seq)
	}
}

func testEnqueueDuplicateInBatch(t *testing.T, s captchaq.Store) {
	x1, x2 := task("x"), task("x")
	x2.Method = "base64"
	x2.Params = map[string]string{"body": "second"}
	recs, existed, err := s.Enqueue(context.Background(), []captchaq.Task{x1, x2, task("y")}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if d := diff([]bool{false, true, false}, existed); d != "" {
		t.Errorf("existed (-want +got):\n%s", d)
	}
	want := captchaq.Record{Task: x1, Status: captchaq.StatusQueued, Seq: recs[0].Seq, Fingerprint: x1.Fingerprint(), AcceptedAt: t0}
	if d := diff(want, recs[0]); d != "" {
		t.Errorf("first x (-want +got):\n%s", d)
	}
	if d := diff(want, recs[1]); d != "" {
		t.Errorf("second x must report the first (-want +got):\n%s", d)
	}
	if d := diff(want, get(t, s, "x")); d != "" {
		t.Errorf("Get(x) (-want +got):\n%s", d)
	}
	if d := diff([]string{"x", "y"}, ids(pending(t, s))); d != "" {
		t.Errorf("pending (-want +got):\n%s", d)
	}
}

func testEnqueueEmptyID(t *testing.T, s captchaq.Store) {
	_, _, err := s.Enqueue(context.Background(), []captchaq.Task{task("ok"), {Method: "turnstile"}}, t0)
	if err == nil {
		t.Fatal("Enqueue of a task without an id succeeded")
	}
	if got := pending(t, s); len(got) != 0 {
		t.Errorf("a failed Enqueue stored %v", ids(got))
	}
	if _, err := s.Get(context.Background(), "ok"); !errors.Is(err, captchaq.ErrNotFound) {
		t.Errorf("Get(ok) after a failed Enqueue: %v, want ErrNotFound", err)
	}
}

func testCheckpoint(t *testing.T, s captchaq.Store) {
	recs := enqueue(t, s, t0, task("a"), task("b"))
	checkpoint(t, s, "a", "7311223344", 1, at(2*time.Second))
	want := recs[0]
	want.Status = captchaq.StatusInFlight
	want.CaptchaID = "7311223344"
	want.Attempts = 1
	want.SubmittedAt = at(2 * time.Second)
	if d := diff(want, get(t, s, "a")); d != "" {
		t.Errorf("after Checkpoint (-want +got):\n%s", d)
	}
	if d := diff(recs[1], get(t, s, "b")); d != "" {
		t.Errorf("other task changed (-want +got):\n%s", d)
	}
}

func testRetry(t *testing.T, s captchaq.Store) {
	recs := enqueue(t, s, t0, task("a"))
	checkpoint(t, s, "a", "111", 1, at(time.Second))
	nb := at(time.Minute)
	if err := s.Retry(context.Background(), "a", 1, nb, "provider: captcha unsolvable", "ERROR_CAPTCHA_UNSOLVABLE"); err != nil {
		t.Fatal(err)
	}
	want := recs[0]
	want.Status = captchaq.StatusQueued
	want.Attempts = 1
	want.NotBefore = nb
	want.LastError = "provider: captcha unsolvable"
	want.LastErrorCode = "ERROR_CAPTCHA_UNSOLVABLE"
	want.SubmittedAt = at(time.Second)
	if d := diff(want, get(t, s, "a")); d != "" {
		t.Errorf("after Retry (-want +got):\n%s", d)
	}

	// The next attempt keeps the last error until it is replaced.
	checkpoint(t, s, "a", "222", 2, at(2*time.Minute))
	want.Status = captchaq.StatusInFlight
	want.CaptchaID = "222"
	want.Attempts = 2
	want.NotBefore = time.Time{}
	want.SubmittedAt = at(2 * time.Minute)
	if d := diff(want, get(t, s, "a")); d != "" {
		t.Errorf("after the second Checkpoint (-want +got):\n%s", d)
	}
}

func testFinishAndResults(t *testing.T, s captchaq.Store) {
	enqueue(t, s, t0, task("a"), task("b"), task("c"), task("d"))
	for _, id := range []string{"a", "b", "c", "d"} {
		checkpoint(t, s, id, "cid-"+id, 1, at(time.Second))
	}
	rc := solved("c", 1, at(10*time.Second))
	ra := failed("a", "ERROR_CAPTCHA_UNSOLVABLE", 1, at(11*time.Second))
	rd := solved("d", 1, at(12*time.Second))
	for _, r := range []captchaq.Result{rc, ra, rd} {
		before := get(t, s, r.ID)
		finish(t, s, r)
		if d := diff(finishedRecord(before, r), get(t, s, r.ID)); d != "" {
			t.Errorf("Get(%s) after Finish (-want +got):\n%s", r.ID, d)
		}
	}
	if d := diff([]captchaq.Result{ra, rc, rd}, results(t, s)); d != "" {
		t.Errorf("Results (-want +got):\n%s", d)
	}
	if d := diff([]string{"b"}, ids(pending(t, s))); d != "" {
		t.Errorf("Pending (-want +got):\n%s", d)
	}
	if d := diff([]string{"a"}, ids(deadLetters(t, s, captchaq.DeadLetterFilter{All: true}))); d != "" {
		t.Errorf("DeadLetters (-want +got):\n%s", d)
	}
}

func testFinishRejectsNonFinal(t *testing.T, s captchaq.Store) {
	recs := enqueue(t, s, t0, task("a"))
	for _, st := range []captchaq.Status{"", captchaq.StatusQueued, captchaq.StatusInFlight, "done"} {
		r := solved("a", 1, at(time.Second))
		r.Status = st
		if err := s.Finish(context.Background(), r); err == nil {
			t.Errorf("Finish with status %q succeeded", st)
		}
	}
	if d := diff(recs[0], get(t, s, "a")); d != "" {
		t.Errorf("a rejected Finish changed the task (-want +got):\n%s", d)
	}
}

func testUnknownID(t *testing.T, s captchaq.Store) {
	ctx := context.Background()
	enqueue(t, s, t0, task("a"))
	checks := []struct {
		name string
		err  error
	}{
		{"Get", func() error { _, err := s.Get(ctx, "nope"); return err }()},
		{"Checkpoint", s.Checkpoint(ctx, "nope", "1", 1, t0)},
		{"Retry", s.Retry(ctx, "nope", 1, t0, "x", "X")},
		{"Finish", s.Finish(ctx, solved("nope", 1, t0))},
	}
	for _, c := range checks {
		if !errors.Is(c.err, captchaq.ErrNotFound) {
			t.Errorf("%s of an unknown id: %v, want ErrNotFound", c.name, c.err)
		}
	}
	if got := len(results(t, s)); got != 0 {
		t.Errorf("Results has %d entries after finishing an unknown id, want 0", got)
	}
}

func testFinalIsFinal(t *testing.T, s captchaq.Store) {
	ctx := context.Background()
	enqueue(t, s, t0, task("s"), task("f"))
	finish(t, s, solved("s", 1, at(time.Second)))
	finish(t, s, failed("f", "ERROR_X", 1, at(time.Second)))
	for _, id := range []string{"s", "f"} {
		before := get(t, s, id)
		if err := s.Checkpoint(ctx, id, "late", 2, at(time.Minute)); err == nil || errors.Is(err, captchaq.ErrNotFound) {
			t.Errorf("Checkpoint of final task %s: %v, want an error other than ErrNotFound", id, err)
		}
		if err := s.Retry(ctx, id, 2, at(time.Minute), "late", "LATE"); err == nil || errors.Is(err, captchaq.ErrNotFound) {
			t.Errorf("Retry of final task %s: %v, want an error other than ErrNotFound", id, err)
		}
		if d := diff(before, get(t, s, id)); d != "" {
			t.Errorf("refused calls changed %s (-want +got):\n%s", id, d)
		}
	}
}

// deadLetterSetup stores a (failed X), b (solved), c (failed Y), d (failed
// X) and e (queued), in that Seq order.
func deadLetterSetup(t *testing.T, s captchaq.Store) map[string]captchaq.Result {
	t.Helper()
	enqueue(t, s, t0, task("a"), task("b"), task("c"), task("d"), task("e"))
	rs := map[string]captchaq.Result{
		"a": failed("a", "ERROR_X", 2, at(10*time.Second)),
		"b": solved("b", 1, at(11*time.Second)),
		"c": failed("c", "ERROR_Y", 3, at(12*time.Second)),
		"d": failed("d", "ERROR_X", 1, at(13*time.Second)),
	}
	// Finish in an order other than Seq's.
	for _, id := range []string{"d", "b", "c", "a"} {
		checkpoint(t, s, id, "cid-"+id, rs[id].Attempts, at(time.Second))
		finish(t, s, rs[id])
	}
	return rs
}

func testDeadLetterFilters(t *testing.T, s captchaq.Store) {
	rs := deadLetterSetup(t, s)
	tests := []struct {
		name   string
		filter captchaq.DeadLetterFilter
		want   []string
	}{
		{"zero selects none", captchaq.DeadLetterFilter{}, nil},
		{"all", captchaq.DeadLetterFilter{All: true}, []string{"a", "c", "d"}},
		{"ids in seq order, solved and unknown ignored", captchaq.DeadLetterFilter{IDs: []string{"d", "b", "zz", "a", "e"}}, []string{"a", "d"}},
		{"error code", captchaq.DeadLetterFilter{ErrorCode: "ERROR_X"}, []string{"a", "d"}},
		{"error code matches exactly", captchaq.DeadLetterFilter{ErrorCode: "ERROR"}, nil},
		{"ids and error code both match", captchaq.DeadLetterFilter{IDs: []string{"c", "d"}, ErrorCode: "ERROR_X"}, []string{"d"}},
		{"all with error code is all", captchaq.DeadLetterFilter{All: true, ErrorCode: "ERROR_Y"}, []string{"a", "c", "d"}},
	}
	for _, tc := range tests {
		got := deadLetters(t, s, tc.filter)
		if d := diff(tc.want, ids(got)); d != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, d)
		}
		for _, rec := range got {
			r := rs[rec.Task.ID]
			if rec.Status != captchaq.StatusFailed || rec.Result == nil {
				t.Errorf("%s: dead letter %s has status %q and result %v", tc.name, rec.Task.ID, rec.Status, rec.Result)
				continue
			}
			if d := diff(r, *rec.Result); d != "" {
				t.Errorf("%s: dead letter %s result (-want +got):\n%s", tc.name, rec.Task.ID, d)
			}
		}
	}
}

func testReplay(t *testing.T, s captchaq.Store) {
	ctx := context.Background()
	deadLetterSetup(t, s)
	before := map[string]captchaq.Record{}
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		before[id] = get(t, s, id)
	}

	n, err := s.Replay(ctx, captchaq.DeadLetterFilter{ErrorCode: "ERROR_X"}, at(time.Hour))
	if err != nil || n != 2 {
		t.Fatalf("Replay(ERROR_X) = %d, %v; want 2, nil", n, err)
	}
	for _, id := range []string{"a", "d"} {
		want := before[id]
		want.Status = captchaq.StatusQueued
		want.Attempts = 0
		want.CaptchaID = ""
		want.NotBefore = time.Time{}
		want.SubmittedAt = time.Time{}
		want.AcceptedAt = at(time.Hour)
		want.Result = nil
		if d := diff(want, get(t, s, id)); d != "" {
			t.Errorf("replayed %s (-want +got):\n%s", id, d)
		}
	}
	for _, id := range []string{"b", "c", "e"} {
		if d := diff(before[id], get(t, s, id)); d != "" {
			t.Errorf("Replay changed %s (-want +got):\n%s", id, d)
		}
	}
	if d := diff([]string{"a", "d", "e"}, ids(pending(t, s))); d != "" {
		t.Errorf("Pending after Replay (-want +got):\n%s", d)
	}
	if d := diff([]string{"c"}, ids(deadLetters(t, s, captchaq.DeadLetterFilter{All: true}))); d != "" {
		t.Errorf("DeadLetters after Replay (-want +got):\n%s", d)
	}
	if d := diff([]string{"b", "c"}, resultIDs(results(t, s))); d != "" {
		t.Errorf("Results after Replay (-want +got):\n%s", d)
	}

	for _, f := range []captchaq.DeadLetterFilter{
		{ErrorCode: "ERROR_X"}, // already moved
		{IDs: []string{"b", "e", "zz"}},
		{},
	} {
		n, err := s.Replay(ctx, f, at(time.Hour))
		if err != nil || n != 0 {
			t.Errorf("Replay(%+v) = %d, %v; want 0, nil", f, n, err)
		}
	}
	n, err = s.Replay(ctx, captchaq.DeadLetterFilter{All: true}, at(time.Hour))
	if err != nil || n != 1 {
		t.Fatalf("Replay(All) = %d, %v; want 1, nil", n, err)
	}
	if d := diff([]string{"a", "c", "d", "e"}, ids(pending(t, s))); d != "" {
		t.Errorf("Pending after Replay(All) (-want +got):\n%s", d)
	}
}

func testPending(t *testing.T, s captchaq.Store) {
	enqueue(t, s, t0, task("q1"), task("f1"), task("i1"), task("s1"))
	enqueue(t, s, at(time.Second), task("q2"), task("i2"))
	checkpoint(t, s, "i1", "c-i1", 1, at(2*time.Second))
	checkpoint(t, s, "i2", "c-i2", 1, at(2*time.Second))
	checkpoint(t, s, "f1", "c-f1", 1, at(2*time.Second))
	finish(t, s, failed("f1", "ERROR_BAD_PARAMETERS", 1, at(3*time.Second)))
	checkpoint(t, s, "s1", "c-s1", 1, at(2*time.Second))
	finish(t, s, solved("s1", 1, at(3*time.Second)))

	got := pending(t, s)
	if d := diff([]string{"q1", "i1", "q2", "i2"}, ids(got)); d != "" {
		t.Fatalf("Pending (-want +got):\n%s", d)
	}
	for _, rec := range got {
		if d := diff(get(t, s, rec.Task.ID), rec); d != "" {
			t.Errorf("Pending record %s differs from Get (-want +got):\n%s", rec.Task.ID, d)
		}
	}
}

func testCallbackError(t *testing.T, s captchaq.Store) {
	ctx := context.Background()
	enqueue(t, s, t0, task("a"), task("b"), task("c"))
	for _, id := range []string{"a", "b"} {
		checkpoint(t, s, id, "c", 1, t0)
		finish(t, s, failed(id, "ERROR_X", 1, at(time.Second)))
	}
	enqueue(t, s, t0, task("d"), task("e"))
	stop := errors.New("stop here")
	iterations := []struct {
		name string
		run  func(calls *int) error
	}{
		{"Pending", func(calls *int) error {
			return s.Pending(ctx, func(captchaq.Record) error { *calls++; return stop })
		}},
		{"Results", func(calls *int) error {
			return s.Results(ctx, func(captchaq.Result) error { *calls++; return stop })
		}},
		{"DeadLetters", func(calls *int) error {
			return s.DeadLetters(ctx, captchaq.DeadLetterFilter{All: true}, func(captchaq.Record) error { *calls++; return stop })
		}},
	}
	for _, it := range iterations {
		calls := 0
		if err := it.run(&calls); !errors.Is(err, stop) {
			t.Errorf("%s returned %v, want the callback's error", it.name, err)
		}
		if calls != 1 {
			t.Errorf("%s called fn %d times after it failed, want 1", it.name, calls)
		}
	}
}

func testPrune(t *testing.T, s captchaq.Store) {
	ctx := context.Background()
	cutoff := at(time.Hour)
	enqueue(t, s, t0, task("old-solved"), task("old-failed"), task("inflight"), task("queued"), task("at-cutoff"), task("new"))
	finishes := []captchaq.Result{
		solved("old-solved", 1, cutoff.Add(-2*time.Hour)),
		failed("old-failed", "ERROR_X", 1, cutoff.Add(-time.Millisecond)),
		solved("at-cutoff", 1, cutoff),
		solved("new", 1, cutoff.Add(time.Hour)),
	}
	for _, r := range finishes {
		checkpoint(t, s, r.ID, "c", 1, t0)
		finish(t, s, r)
	}
	checkpoint(t, s, "inflight", "c", 1, t0)
	// Deadlines and submit times before the cutoff must not matter.
	keep := map[string]captchaq.Record{}
	for _, id := range []string{"inflight", "queued", "at-cutoff", "new"} {
		keep[id] = get(t, s, id)
	}

	n, err := s.Prune(ctx, cutoff)
	if err != nil || n != 2 {
		t.Fatalf("Prune = %d, %v; want 2, nil", n, err)
	}
	for _, id := range []string{"old-solved", "old-failed"} {
		if _, err := s.Get(ctx, id); !errors.Is(err, captchaq.ErrNotFound) {
			t.Errorf("Get(%s) after Prune: %v, want ErrNotFound", id, err)
		}
	}
	for id, want := range keep {
		if d := diff(want, get(t, s, id)); d != "" {
			t.Errorf("Prune changed %s (-want +got):\n%s", id, d)
		}
	}
	if d := diff([]string{"at-cutoff", "new"}, resultIDs(results(t, s))); d != "" {
		t.Errorf("Results after Prune (-want +got):\n%s", d)
	}
	if got := deadLetters(t, s, captchaq.DeadLetterFilter{All: true}); len(got) != 0 {
		t.Errorf("DeadLetters after Prune: %v, want none", ids(got))
	}
	if n, err := s.Prune(ctx, cutoff); err != nil || n != 0 {
		t.Errorf("second Prune = %d, %v; want 0, nil", n, err)
	}
}

func testSeqGrowsAfterPrune(t *testing.T, s captchaq.Store) {
	recs := enqueue(t, s, t0, task("a"), task("b"))
	checkpoint(t, s, "b", "c", 1, t0)
	finish(t, s, solved("b", 1, at(time.Second)))
	if n, err := s.Prune(context.Background(), at(time.Hour)); err != nil || n != 1 {
		t.Fatalf("Prune = %d, %v; want 1, nil", n, err)
	}
	// An id that was pruned may be enqueued again, as a new task.
	again := enqueue(t, s, at(2*time.Hour), task("c"), task("b"))
	if again[0].Seq <= recs[1].Seq || again[1].Seq <= again[0].Seq {
		t.Errorf("Seq after pruning the newest task: c=%d b=%d, want both above %d and growing", again[0].Seq, again[1].Seq, recs[1].Seq)
	}
	if got := get(t, s, "b"); got.Status != captchaq.StatusQueued || got.Result != nil {
		t.Errorf("re-enqueued b: status %q result %v, want queued without result", got.Status, got.Result)
	}
}

func testTaskRoundTrip(t *testing.T, s captchaq.Store) {
	full := captchaq.Task{
		ID:     "full/ü 'quoted' \"id\"",
		Method: "userrecaptcha",
		Params: map[string]string{
			"googlekey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-",
			"pageurl":   "https://shop.example/login?next=%2Fcart&x=1",
			"empty":     "",
			"unicode":   "ключ 🔑 \x00 nul",
			"json":      `{"a":[1,2]}`,
		},
		Priority:    1,
		Tenant:      "team-ä",
		Deadline:    time.Date(2026, 3, 1, 13, 30, 15, 987654321, time.FixedZone("EST", -5*3600)),
		MaxAttempts: 7,
		Proxy:       "user:p@ss@10.0.0.1:3128",
		ProxyType:   "SOCKS5",
		Pingback:    "http://127.0.0.1:9/cb?id=1",
	}
	bare := captchaq.Task{ID: "bare", Method: "base64", Priority: -3}
	recs := enqueue(t, s, t0, full, bare)
	for i, tk := range []captchaq.Task{full, bare} {
		want := captchaq.Record{Task: tk, Status: captchaq.StatusQueued, Seq: recs[i].Seq, Fingerprint: tk.Fingerprint(), AcceptedAt: t0}
		if d := diff(want, recs[i]); d != "" {
			t.Errorf("Enqueue record of %q (-want +got):\n%s", tk.ID, d)
		}
		if d := diff(want, get(t, s, tk.ID)); d != "" {
			t.Errorf("Get(%q) (-want +got):\n%s", tk.ID, d)
		}
	}
	got := pending(t, s)
	if len(got) != 2 {
		t.Fatalf("Pending returned %d records, want 2", len(got))
	}
	if d := diff(full, got[0].Task); d != "" {
		t.Errorf("Pending task (-want +got):\n%s", d)
	}
}

// incompressible is n bytes of printable ASCII without repeats a
// compressor finds (PostgreSQL compresses an index entry before it
// checks its size).
func incompressible(n int, seed uint32) string {
	b := make([]byte, n)
	for i := range b {
		seed = seed*1664525 + 1013904223
		b[i] = byte('!' + (seed>>24)%94)
	}
	return string(b)
}

func testValidAtLimits(t *testing.T, s captchaq.Store) {
	long := captchaq.Task{
		ID:     incompressible(captchaq.MaxIDBytes, 1),
		Method: "turnstile",
		Params: map[string]string{"sitekey": "0x4AAA", "pageurl": "https://shop.example/checkout"},
		Tenant: incompressible(captchaq.MaxIDBytes, 2),
	}
	text := captchaq.Task{
		ID:     "ключ-🔑-\uFFFD-\x01\x7f",
		Method: "userrecaptcha",
		Params: map[string]string{
			"googlekey":   "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-",
			"pageurl":     "https://shop.example/login?q=ü",
			"ключ 🔑":      "значение \uFFFD \x01\x1f\x7f \u2028 \\u0000 '\"",
			"\x7fcontrol": "\t\r\n",
		},
		Tenant:    "магазин \x01",
		Proxy:     "usér:pä\x01ss@10.0.0.1:3128",
		ProxyType: "HTTP",
		Pingback:  "https://hooks.example/cb?ü=\u2028",
	}
	tasks := []captchaq.Task{long, text}
	for _, tk := range tasks {
		if err := tk.Validate(); err != nil {
			t.Fatalf("the suite's task is not valid: %v", err)
		}
	}
	recs := enqueue(t, s, t0, tasks...)
	for i, tk := range tasks {
		want := captchaq.Record{Task: tk, Status: captchaq.StatusQueued, Seq: recs[i].Seq, Fingerprint: tk.Fingerprint(), AcceptedAt: t0}
		if d := diff(want, recs[i]); d != "" {
			t.Errorf("Enqueue record of task %d (-want +got):\n%s", i, d)
		}
		if d := diff(want, get(t, s, tk.ID)); d != "" {
			t.Errorf("Get of task %d (-want +got):\n%s", i, d)
		}
	}
	if got := ids(pending(t, s)); !cmp.Equal(got, []string{long.ID, text.ID}) {
		t.Errorf("Pending ids are %q, want the two tasks'", got)
	}
}

func testResultRoundTrip(t *testing.T, s captchaq.Store) {
	enqueue(t, s, t0, task("geetest"), task("fail"))
	ok := captchaq.Result{
		ID: "geetest", Status: captchaq.StatusSolved, Method: "geetest_v4", Kind: provider.KindGeeTest,
		Token:        "tok \"quoted\" ü",
		Answer:       json.RawMessage(`{"captcha_id":"e392e1d7","lot_number":"7bb9","pass_token":"a5b2","gen_time":"1726","captcha_output":"x=="}`),
		Attempts:     2,
		CaptchaID:    "c1", // kept with the result, for reportbad/reportgood
		SolveSeconds: 12.345678,
		Provider:     "backup", // several providers: where it was solved, its price, where it was abandoned
		Price:        0.00299,
		Abandoned:    []string{"main"},
		Reservoir:    "gt", // a reservoir's token answered it
		ExpiresAt:    time.Date(2026, 3, 1, 12, 5, 0, 1000000, time.UTC),
		AcceptedAt:   t0,
		SubmittedAt:  at(1500 * time.Millisecond),
		FinishedAt:   at(13*time.Second + 999*time.Millisecond),
	}
	bad := captchaq.Result{
		ID: "fail", Status: captchaq.StatusFailed, Method: "turnstile",
		Error: "task expired before it was submitted", ErrorCode: "EXPIRED",
		AcceptedAt: t0, FinishedAt: at(time.Minute), Provider: "main",
	}
	checkpoint(t, s, "geetest", "backup:c1", 2, at(1500*time.Millisecond))
	finish(t, s, ok)
	finish(t, s, bad) // straight from the queue: never submitted
	for _, r := range []captchaq.Result{ok, bad} {
		rec := get(t, s, r.ID)
		if rec.Result == nil {
			t.Fatalf("Get(%s).Result is nil", r.ID)
		}
		if d := diff(r, *rec.Result); d != "" {
			t.Errorf("Get(%s).Result (-want +got):\n%s", r.ID, d)
		}
		if rec.Status != r.Status {
			t.Errorf("Get(%s).Status = %q, want %q", r.ID, rec.Status, r.Status)
		}
		if rec.CaptchaID != "" {
			t.Errorf("Get(%s).CaptchaID = %q on a final record, want it only on the Result", r.ID, rec.CaptchaID)
		}
	}
	if d := diff([]captchaq.Result{ok, bad}, results(t, s)); d != "" {
		t.Errorf("Results (-want +got):\n%s", d)
	}
	if got := get(t, s, "geetest").Result.Answer; string(got) != string(ok.Answer) {
		t.Errorf("Answer = %s, want %s byte for byte", got, ok.Answer)
	}
}

func testConcurrent(t *testing.T, s captchaq.Store) {
	const goroutines, perG = 8, 40
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*2)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perG {
				id := fmt.Sprintf("g%d-%d", g, i)
				if _, _, err := s.Enqueue(ctx, []captchaq.Task{task(id)}, t0); err != nil {
					errs <- err
					return
				}
				if err := s.Checkpoint(ctx, id, "c-"+id, 1, t0); err != nil {
					errs <- err
					return
				}
				r := solved(id, 1, at(time.Second))
				if i%2 == 1 {
					r = failed(id, "ERROR_X", 1, at(time.Second))
				}
				if err := s.Finish(ctx, r); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	// Readers run alongside the writers.
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				if err := s.Pending(ctx, func(captchaq.Record) error { return nil }); err != nil {
					errs <- err
					return
				}
				if _, err := s.Get(ctx, "g0-0"); err != nil && !errors.Is(err, captchaq.ErrNotFound) {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	rs := results(t, s)
	if len(rs) != goroutines*perG {
		t.Fatalf("Results has %d entries, want %d", len(rs), goroutines*perG)
	}
	seen := map[string]bool{}
	for _, r := range rs {
		seen[r.ID] = true
	}
	if len(seen) != goroutines*perG {
		t.Errorf("Results has %d distinct ids, want %d", len(seen), goroutines*perG)
	}
	var prev int64
	for _, id := range resultIDs(rs) {
		rec := get(t, s, id)
		if rec.Seq <= prev {
			t.Errorf("Results not in growing Seq order at %s: %d after %d", id, rec.Seq, prev)
		}
		prev = rec.Seq
	}
	if got := len(deadLetters(t, s, captchaq.DeadLetterFilter{All: true})); got != goroutines*perG/2 {
		t.Errorf("DeadLetters has %d entries, want %d", got, goroutines*perG/2)
	}
	if got := pending(t, s); len(got) != 0 {
		t.Errorf("Pending has %d entries, want 0", len(got))
	}
}

func testClosed(t *testing.T, s captchaq.Store) {
	ctx := context.Background()
	enqueue(t, s, t0, task("a"))
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	called := false
	fn := func(captchaq.Record) error { called = true; return nil }
	calls := []struct {
		name string
		err  error
	}{
		{"Enqueue", func() error { _, _, err := s.Enqueue(ctx, []captchaq.Task{task("b")}, t0); return err }()},
		{"Checkpoint", s.Checkpoint(ctx, "a", "c", 1, t0)},
		{"Retry", s.Retry(ctx, "a", 1, t0, "x", "X")},
		{"Finish", s.Finish(ctx, solved("a", 1, t0))},
		{"Pending", s.Pending(ctx, fn)},
		{"Get", func() error { _, err := s.Get(ctx, "a"); return err }()},
		{"Results", s.Results(ctx, func(captchaq.Result) error { called = true; return nil })},
		{"DeadLetters", s.DeadLetters(ctx, captchaq.DeadLetterFilter{All: true}, fn)},
		{"Replay", func() error { _, err := s.Replay(ctx, captchaq.DeadLetterFilter{All: true}, t0); return err }()},
		{"Prune", func() error { _, err := s.Prune(ctx, at(time.Hour)); return err }()},
		{"Renew", func() error { _, err := s.Renew(ctx, task("a"), t0); return err }()},
		{"Report", func() error { _, err := s.Report(ctx, "a", true, t0); return err }()},
	}
	for name, err := range optionalCallsAfterClose(s) {
		calls = append(calls, struct {
			name string
			err  error
		}{name, err})
	}
	for _, c := range calls {
		if !errors.Is(c.err, captchaq.ErrStoreClosed) {
			t.Errorf("%s after Close: %v, want ErrStoreClosed", c.name, c.err)
		}
	}
	if called {
		t.Error("an iteration after Close called its callback")
	}
}

func testKnownIDOtherTask(t *testing.T, s captchaq.Store) {
	first := task("a")
	enqueue(t, s, t0, first)
	finish(t, s, solved("a", 1, at(time.Minute)))
	before := get(t, s, "a")
	if before.Fingerprint != first.Fingerprint() {
		t.Fatalf("stored fingerprint %q, want %q", before.Fingerprint, first.Fingerprint())
	}
	other := task("a")
	other.Params["sitekey"] = "0x4BBB-other"
	recs, existed, err := s.Enqueue(context.Background(), []captchaq.Task{other}, at(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if !existed[0] {
		t.Fatal("a known id with another task was not reported as existed")
	}
	if d := diff(before, recs[0]); d != "" {
		t.Errorf("record returned for the known id (-want +got):\n%s", d)
	}
	if d := diff(before, get(t, s, "a")); d != "" {
		t.Errorf("known id after Enqueue of another task (-want +got):\n%s", d)
	}
	var ce *captchaq.IDConflictError
	if err := recs[0].Conflict(other); !errors.As(err, &ce) || ce.ID != "a" || ce.Differs != "params.sitekey differs" {
		t.Errorf("Conflict = %v, want params.sitekey differs for a", err)
	}
	if err := recs[0].Conflict(first); err != nil {
		t.Errorf("Conflict with the same task = %v", err)
	}
}

func testRenew(t *testing.T, s captchaq.Store) {
	ctx := context.Background()
	recs := enqueue(t, s, t0, task("a"), task("q"), task("f"))
	finish(t, s, solved("a", 2, at(time.Minute)))
	finish(t, s, failed("f", "ERROR_CAPTCHA_UNSOLVABLE", 1, at(time.Minute)))
	again := task("a")
	again.Priority = 2
	rec, err := s.Renew(ctx, again, at(time.Hour))
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	want := captchaq.Record{Task: again, Status: captchaq.StatusQueued, Seq: recs[0].Seq, Fingerprint: again.Fingerprint(), AcceptedAt: at(time.Hour)}
	if d := diff(want, rec); d != "" {
		t.Errorf("Renew record (-want +got):\n%s", d)
	}
	if d := diff(want, get(t, s, "a")); d != "" {
		t.Errorf("Get after Renew (-want +got):\n%s", d)
	}
	if got := ids(pending(t, s)); len(got) != 2 || got[0] != "a" || got[1] != "q" {
		t.Errorf("Pending after Renew = %v, want [a q]", got)
	}
	if got := resultIDs(results(t, s)); len(got) != 1 || got[0] != "f" {
		t.Errorf("Results after Renew = %v, want [f]", got)
	}
	for _, id := range []string{"q", "f", "a"} {
		before := get(t, s, id)
		if _, err := s.Renew(ctx, task(id), at(2*time.Hour)); err == nil {
			t.Errorf("Renew of %s task %q succeeded", before.Status, id)
		}
		if d := diff(before, get(t, s, id)); d != "" {
			t.Errorf("refused Renew changed %q (-want +got):\n%s", id, d)
		}
	}
	if _, err := s.Renew(ctx, task("nope"), t0); !errors.Is(err, captchaq.ErrNotFound) {
		t.Errorf("Renew of an unknown id: %v, want ErrNotFound", err)
	}
}

// testDeadLetterTenant: dead letters of two tenants, interleaved in Seq.
func testDeadLetterTenant(t *testing.T, s captchaq.Store) {
	ctx := context.Background()
	var tasks []captchaq.Task
	for _, id := range []string{"a1", "b1", "a2", "b2", "a3"} {
		tk := task(id)
		tk.Tenant = id[:1]
		tasks = append(tasks, tk)
	}
	enqueue(t, s, t0, tasks...)
	finish(t, s, failed("a1", "ERROR_X", 1, at(time.Second)))
	finish(t, s, failed("b1", "ERROR_X", 1, at(time.Second)))
	finish(t, s, failed("a2", "ERROR_Y", 1, at(time.Second)))
	finish(t, s, failed("b2", "ERROR_Y", 1, at(time.Second)))
	finish(t, s, solved("a3", 1, at(time.Second)))
	for _, tc := range []struct {
		name   string
		filter captchaq.DeadLetterFilter
		want   []string
	}{
		{"all of a", captchaq.DeadLetterFilter{All: true, Tenant: "a"}, []string{"a1", "a2"}},
		{"all of b", captchaq.DeadLetterFilter{All: true, Tenant: "b"}, []string{"b1", "b2"}},
		{"all of nobody", captchaq.DeadLetterFilter{All: true, Tenant: "c"}, nil},
		{"ids of a only", captchaq.DeadLetterFilter{IDs: []string{"a1", "b1", "a3"}, Tenant: "a"}, []string{"a1"}},
		{"error code of b only", captchaq.DeadLetterFilter{ErrorCode: "ERROR_Y", Tenant: "b"}, []string{"b2"}},
		{"a tenant alone selects none", captchaq.DeadLetterFilter{Tenant: "a"}, nil},
	} {
		if d := diff(tc.want, ids(deadLetters(t, s, tc.filter))); d != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, d)
		}
	}
	n, err := s.Replay(ctx, captchaq.DeadLetterFilter{All: true, Tenant: "b"}, at(time.Hour))
	if err != nil || n != 2 {
		t.Fatalf("Replay(all of b) = %d, %v; want 2, nil", n, err)
	}
	if d := diff([]string{"a1", "a2"}, ids(deadLetters(t, s, captchaq.DeadLetterFilter{All: true}))); d != "" {
		t.Errorf("DeadLetters after replaying b's (-want +got):\n%s", d)
	}
	if d := diff([]string{"b1", "b2"}, ids(pending(t, s))); d != "" {
		t.Errorf("Pending after replaying b's (-want +got):\n%s", d)
	}
}

func testReportOnce(t *testing.T, s captchaq.Store) {
	ctx := context.Background()
	enqueue(t, s, t0, task("a"), task("q"), task("i"), task("f"), task("c"))
	checkpoint(t, s, "i", "cid-i", 1, at(time.Second))
	finish(t, s, solved("a", 1, at(time.Minute)))
	finish(t, s, failed("f", "ERROR_CAPTCHA_UNSOLVABLE", 1, at(time.Minute)))
	finish(t, s, solved("c", 1, at(time.Minute)))
	if _, err := s.Report(ctx, "nope", false, at(time.Hour)); !errors.Is(err, captchaq.ErrNotFound) {
		t.Errorf("Report of an unknown id: %v, want ErrNotFound", err)
	}
	for _, id := range []string{"q", "i", "f"} {
		before := get(t, s, id)
		if first, err := s.Report(ctx, id, false, at(time.Hour)); first || !errors.Is(err, captchaq.ErrNotSolved) {
			t.Errorf("Report of %s task %s: %v, %v; want false, ErrNotSolved", before.Status, id, first, err)
		}
		if d := diff(before, get(t, s, id)); d != "" {
			t.Errorf("a refused Report changed %s (-want +got):\n%s", id, d)
		}
	}

	want := get(t, s, "a")
	first, err := s.Report(ctx, "a", false, at(time.Hour))
	if err != nil || !first {
		t.Fatalf("first Report of a: %v, %v; want true, nil", first, err)
	}
	want.Report, want.ReportedAt = captchaq.ReportBad, at(time.Hour)
	if d := diff(want, get(t, s, "a")); d != "" {
		t.Errorf("Get after Report (-want +got):\n%s", d)
	}
	for _, good := range []bool{true, false} {
		if first, err := s.Report(ctx, "a", good, at(2*time.Hour)); err != nil || first {
			t.Errorf("a second Report (good %v): %v, %v; want false, nil", good, first, err)
		}
	}
	if d := diff(want, get(t, s, "a")); d != "" {
		t.Errorf("a second Report changed the task (-want +got):\n%s", d)
	}

	// Many at once: exactly one stores its verdict.
	var wg sync.WaitGroup
	var mu sync.Mutex
	firsts := 0
	for i := range 16 {
		wg.Go(func() {
			first, err := s.Report(ctx, "c", i%2 == 0, at(3*time.Hour))
			if err != nil {
				t.Errorf("concurrent Report: %v", err)
			}
			if first {
				mu.Lock()
				firsts++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if rec := get(t, s, "c"); firsts != 1 || rec.Report == "" {
		t.Errorf("16 concurrent Reports: %d stored, record's report %q; want 1 and a verdict", firsts, rec.Report)
	}

	// A new solve is a new answer: its report is a new one.
	rec, err := s.Renew(ctx, task("a"), at(4*time.Hour))
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if rec.Report != "" || !rec.ReportedAt.IsZero() || get(t, s, "a").Report != "" {
		t.Errorf("Renew kept the report: %q at %v", rec.Report, rec.ReportedAt)
	}
	finish(t, s, solved("a", 1, at(5*time.Hour)))
	if first, err := s.Report(ctx, "a", true, at(6*time.Hour)); err != nil || !first {
		t.Errorf("Report after Renew: %v, %v; want true, nil", first, err)
	}
	if r := get(t, s, "a"); r.Report != captchaq.ReportGood {
		t.Errorf("report after Renew: %q, want good", r.Report)
	}
}
