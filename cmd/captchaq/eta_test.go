package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
)

func etaTasks(method string, n int, params map[string]string) []captchaq.Task {
	var out []captchaq.Task
	for i := range n {
		out = append(out, captchaq.Task{ID: fmt.Sprintf("%s-%d", method, i), Method: method, Params: params})
	}
	return out
}

// The examples' mix: 8 images (0.7 s), 8 Turnstile (8 s), 4 reCAPTCHA v2
// (25 s), 2 v3 (9 s), 1 GeeTest (10 s) on 20 threads.
func examplesModel() *etaModel {
	e := newETAModel()
	page := "https://shop.example/"
	for _, ts := range [][]captchaq.Task{
		etaTasks("base64", 8, map[string]string{"body": "aW1hZ2U="}),
		etaTasks("turnstile", 8, map[string]string{"sitekey": "0x4AAA", "pageurl": page}),
		etaTasks("userrecaptcha", 4, map[string]string{"googlekey": "6Le", "pageurl": page}),
		etaTasks("userrecaptcha", 2, map[string]string{"googlekey": "6Le", "pageurl": page, "version": "v3", "action": "a", "min_score": "0.3"}),
		etaTasks("geetest", 1, map[string]string{"gt": "81388ea1fc187e0c335c0a8907ff2625", "challenge": "c", "pageurl": page}),
	} {
		for _, t := range ts {
			if t.Method == "userrecaptcha" && t.Params["version"] == "v3" {
				t.ID = "v3-" + t.ID
			}
			e.read(t)
		}
	}
	return e
}

func TestETAModel(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)

	// At the start the last of the four reCAPTCHAs bounds it: the 4/5
	// quantile of solve times log-normal around 25 s with spread 0.35,
	// 25 s × e^(0.35 × 0.8416) = 33.564 s, more than the work spread over
	// the threads (197.6 s / 20 = 9.9 s).
	e := examplesModel()
	if len(e.open) != 23 {
		t.Fatalf("%d open tasks, want 23", len(e.open))
	}
	e.sample(t0, 0)
	m := captchaq.Metrics{Threads: 20, Window: 20, ThreadsInUse: 20}
	if d, ok := e.left(m, 0); !ok || d.Round(time.Millisecond) != 33564*time.Millisecond {
		t.Errorf("at the start: %v %v, want 33.564s", d, ok)
	}

	// Two seconds in, the 8 images are done: the rate says 16 left at 4 a
	// second, 4 s; the model what the last reCAPTCHA still takes at the 15
	// tasks in flight's average age, (20 threads × 2 s − 8 × 0.7 s) / 15 =
	// 2.293 s: 33.564 s − 2.293 s (that early, having taken it says
	// nothing of a solve time).
	e.sample(t0.Add(2*time.Second), 20)
	for i := range 8 {
		e.finished(captchaq.Result{ID: fmt.Sprintf("base64-%d", i), Status: captchaq.StatusSolved, SolveSeconds: 0.7,
			SubmittedAt: t0, FinishedAt: t0.Add(700 * time.Millisecond)})
	}
	m = captchaq.Metrics{Threads: 20, Window: 20, ThreadsInUse: 15, Solved: 8}
	if d, ok := e.left(m, 0); !ok || d.Round(time.Millisecond) != 31270*time.Millisecond {
		t.Errorf("8 of 23 done after 2 s: %v, want 31.270s", d)
	}

	// Answers teach it: two Turnstiles solved in 2 s move its 8 s to
	// (2 × 8 s + 2 × 2 s) / 4 = 5 s.
	e.finished(captchaq.Result{ID: "turnstile-0", Status: captchaq.StatusSolved, SolveSeconds: 2})
	e.finished(captchaq.Result{ID: "turnstile-1", Status: captchaq.StatusSolved, SolveSeconds: 2})
	if got := e.expected("turnstile"); got != 5*time.Second {
		t.Errorf("expected Turnstile %v, want 5s", got)
	}
	// A failure teaches nothing; an unknown id changes nothing.
	e.finished(captchaq.Result{ID: "turnstile-2", Status: captchaq.StatusFailed, SolveSeconds: 30})
	e.finished(captchaq.Result{ID: "never-read", Status: captchaq.StatusSolved, SolveSeconds: 30})
	if got, n := e.expected("turnstile"), len(e.open); got != 5*time.Second || n != 12 {
		t.Errorf("expected Turnstile %v with %d open, want 5s and 12", got, n)
	}
}

func TestETAModelWaitingAndUnread(t *testing.T) {
	t.Parallel()
	e := newETAModel()
	for _, task := range etaTasks("turnstile", 3, map[string]string{"sitekey": "0x4AAA", "pageurl": "https://a.example/"}) {
		e.read(task)
	}
	// One thread: one Turnstile in flight, two waiting, and three lines
	// not read yet, counted at the mean of those read (8 s): 48 s of work.
	if d, ok := e.left(captchaq.Metrics{Threads: 1, Window: 1, ThreadsInUse: 1}, 3); !ok || d != 48*time.Second {
		t.Errorf("%v %v, want 48s", d, ok)
	}
	// Nothing in flight (paused, or not started): the longest waiting
	// task's whole solve time at least.
	if d, ok := e.left(captchaq.Metrics{Threads: 5, Window: 5}, 0); !ok || d != 8*time.Second {
		t.Errorf("%v %v, want 8s", d, ok)
	}
	for i := range 3 {
		e.finished(captchaq.Result{ID: fmt.Sprintf("turnstile-%d", i), Status: captchaq.StatusSolved, SolveSeconds: 8})
	}
	if d, ok := e.left(captchaq.Metrics{Threads: 5, Window: 5}, 0); ok {
		t.Errorf("nothing left: %v %v", d, ok)
	}
}

// The last of n tasks in flight lands at the n/(n+1) quantile of the solve
// times longer than its age: for solve times log-normal around 25 s with
// spread 0.35, one task alone at its median (25 s); one at 22 s, where
// Φ(ln(22/25)/0.35) = 0.3575 of the solve times are shorter, at the
// 0.6787 quantile, 25 s × e^(0.35 × 0.4637) = 29.41 s, 7.41 s more; the
// last of three at 15 s at the 0.7681 quantile, 32.31 s.
func TestTailLeft(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		median, age time.Duration
		n           int
		want        time.Duration
	}{
		{25 * time.Second, 0, 1, 25 * time.Second},
		{25 * time.Second, 22 * time.Second, 1, 7410 * time.Millisecond},
		{25 * time.Second, 40 * time.Second, 1, 5281 * time.Millisecond},
		{25 * time.Second, 15 * time.Second, 3, 17305 * time.Millisecond},
		{25 * time.Second, 0, 4, 33564 * time.Millisecond},
	} {
		if got := tailLeft(c.median, c.age, c.n).Round(time.Millisecond); got != c.want {
			t.Errorf("tailLeft(%v, %v, %d) = %v, want %v", c.median, c.age, c.n, got, c.want)
		}
	}
}

// A rerun resumes tasks submitted in the run before: only the thread-time
// of this run counts as done, so one resumed task finishing does not hide
// the age of the others; a result from the store took none of it.
func TestETAModelResumed(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	e := newETAModel()
	for _, task := range etaTasks("userrecaptcha", 3, map[string]string{"googlekey": "6Le", "pageurl": "https://a.example/"}) {
		e.read(task)
	}
	e.read(captchaq.Task{ID: "stored", Method: "turnstile", Params: map[string]string{"sitekey": "0x4AAA", "pageurl": "https://a.example/"}})
	e.sample(t0, 0)
	e.finished(captchaq.Result{ID: "stored", Status: captchaq.StatusSolved, SolveSeconds: 8,
		SubmittedAt: t0.Add(-time.Hour), FinishedAt: t0.Add(-time.Hour + 8*time.Second)})
	e.sample(t0.Add(10*time.Second), 3)
	// Submitted 20 s before this run, answered 10 s into it: 10 s of it.
	e.finished(captchaq.Result{ID: "userrecaptcha-0", Status: captchaq.StatusSolved, SolveSeconds: 30,
		SubmittedAt: t0.Add(-20 * time.Second), FinishedAt: t0.Add(10 * time.Second)})
	if e.done != 10*time.Second || e.busy != 30*time.Second {
		t.Fatalf("done %v busy %v, want 10s and 30s", e.done, e.busy)
	}
	// The two left in flight are 10 s old (20 s of thread-time over two).
	// Their kind: (2 × 25 s + 30 s) / 3 = 26.667 s. The last of two at its
	// 10 s age: Φ(ln(10/26.667)/0.35) = 0.00256, so the 0.6675 quantile,
	// 26.667 s × e^(0.35 × 0.4331) = 31.031 s: 21.031 s more.
	m := captchaq.Metrics{Threads: 5, Window: 5, ThreadsInUse: 2, Solved: 1}
	if d, ok := e.left(m, 0); !ok || d.Round(time.Millisecond) != 21031*time.Millisecond {
		t.Errorf("left %v %v, want 21.031s", d, ok)
	}
}

// Tasks resumed at the provider from an earlier run have been solving
// since their submit then: two reCAPTCHAs submitted 20 s before this run,
// 5 s into it, are 25 s old, not 5 s.
func TestETAModelResumedAtTheProvider(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	e := newETAModel()
	for _, task := range etaTasks("userrecaptcha", 2, map[string]string{"googlekey": "6Le", "pageurl": "https://a.example/"}) {
		e.read(task)
		e.atProviderSince(task.ID, t0.Add(-20*time.Second))
	}
	e.sample(t0, 2)
	e.sample(t0.Add(5*time.Second), 2)
	// 10 s of thread-time in this run and 40 s before it: 25 s each. The
	// kind's 25 s median; the last of two at its median: the 0.8333
	// quantile, 25 s × e^(0.35 × 0.9674) = 35.074 s: 10.074 s more. Counted
	// from this run's start they would be 5 s old, 24.068 s to go.
	m := captchaq.Metrics{Threads: 5, Window: 5, ThreadsInUse: 2}
	if d, ok := e.left(m, 0); !ok || d.Round(time.Millisecond) != 10074*time.Millisecond {
		t.Errorf("left %v %v, want 10.074s", d, ok)
	}
	e.finished(captchaq.Result{ID: "userrecaptcha-0", Status: captchaq.StatusSolved, SolveSeconds: 26,
		SubmittedAt: t0.Add(-20 * time.Second), FinishedAt: t0.Add(6 * time.Second)})
	if _, held := e.since["userrecaptcha-0"]; held || e.done != 6*time.Second || len(e.since) != 1 {
		t.Errorf("after an answer: since %v, done %v; want the other task alone and 6s", e.since, e.done)
	}
}
