package main

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/sim"
)

// chromium finds the browser, or skips (fails under CI=true).
func chromium(t *testing.T) string {
	t.Helper()
	p, err := FindChromium()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v: the browser examples need it in CI", err)
		}
		t.Skip(err)
	}
	return p
}

// clock is a simulator clock the test moves by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestExampleRuns(t *testing.T) {
	chromium(t)
	if err := run(context.Background(), "", "demo-key"); err != nil {
		t.Fatal(err)
	}
}

// The page's server accepts a token once, for its sitekey, within its
// lifetime: a reused, an expired and another site's token are rejected
// with siteverify's codes.
func TestThePageRejectsBadTokens(t *testing.T) {
	path := chromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	clk := &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	s, base, err := sim.Start(sim.Config{Instant: true, Now: clk.Now}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	q, err := NewQueue(ctx, base, "demo-key")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := Shutdown(q, 5*time.Second); err != nil {
			t.Error(err)
		}
	}()
	bctx, stop := Browser(ctx, path, t.TempDir())
	defer stop()

	open := func(page string) {
		t.Helper()
		if err := chromedp.Do(bctx, chromedp.Navigate(base+page)); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(what string, got Verdict, err error, want Verdict) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got != want {
			t.Fatalf("%s: page says %+v, want %+v", what, got, want)
		}
	}
	rejected := func(code string) Verdict { return Verdict{Title: "Rejected", Codes: code} }

	// Solved and accepted, then the same token again.
	open("/demo/turnstile")
	token, v, err := Pass(bctx, q, Turnstile)
	expect("fresh turnstile token", v, err, Verdict{Success: true, Title: "Signed in"})
	open("/demo/turnstile")
	v, err = Submit(bctx, Turnstile, token)
	expect("reused turnstile token", v, err, rejected("timeout-or-duplicate"))

	// Expired: reCAPTCHA tokens live 120 s.
	open("/demo/recaptcha")
	token, err = Solve(ctx, q, Recaptcha, sim.DemoRecaptcha.SiteKey, base+"/demo/recaptcha")
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(121 * time.Second)
	v, err = Submit(bctx, Recaptcha, token)
	expect("recaptcha token after 121 s", v, err, rejected("timeout-or-duplicate"))

	// Solved for another sitekey.
	open("/demo/turnstile")
	token, err = Solve(ctx, q, Turnstile, "0x4AAAAAAAOtherSiteKey000", base+"/demo/turnstile")
	if err != nil {
		t.Fatal(err)
	}
	v, err = Submit(bctx, Turnstile, token)
	expect("turnstile token of another sitekey", v, err, rejected("invalid-input-response"))
}

// A task the provider never answers does not hold the program's exit:
// Shutdown gives up on it after its wait and says so.
func TestShutdownLeavesAnUnansweredTask(t *testing.T) {
	s, base, err := sim.Start(sim.Config{LatencyScale: 1000}, "127.0.0.1:0") // Turnstile in hours
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := testbound.Context(t)
	q, err := NewQueue(ctx, base, "demo-key")
	if err != nil {
		t.Fatal(err)
	}
	f, err := q.Submit(ctx, captchaq.Task{ID: "stuck", Method: "turnstile",
		Params: map[string]string{"sitekey": sim.DemoTurnstile.SiteKey, "pageurl": base + "/demo/turnstile"}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Shutdown(q, 100*time.Millisecond) }()
	err = testbound.Receive(t, "Shutdown", done)
	if want := "tasks still unfinished after 100ms, left behind: context deadline exceeded"; err == nil || err.Error() != want {
		t.Fatalf("Shutdown = %v, want %s", err, want)
	}
	if _, err := f.Wait(ctx); !errors.Is(err, captchaq.ErrClosed) {
		t.Fatalf("the task's Wait = %v, want ErrClosed", err)
	}
}
