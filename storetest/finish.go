package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
)

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
