package main

import (
	"context"
	"net/http"
	"os"
	"testing"
	"time"
)

func TestExampleRuns(t *testing.T) {
	if _, err := findChromium(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v: the browser examples need it in CI", err)
		}
		t.Skip(err)
	}
	if err := run(context.Background(), "", demoKey, ""); err != nil {
		t.Fatal(err)
	}
}

// A refused submit comes back as an error naming serve's code.
func TestSolverReportsServeErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	simURL, serveURL, stop, err := startStack(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	s := Solver{URL: serveURL, Key: "not-a-client-key", PollEvery: 50 * time.Millisecond, HTTP: &http.Client{Timeout: 10 * time.Second}}
	_, err = s.Solve(ctx, Turnstile, "0x4AAAAAAADemoCaptchaQ01", simURL+"/demo/turnstile")
	if err == nil || err.Error() != "in.php: ERROR_WRONG_USER_KEY" {
		t.Fatalf("wrong key: got %v, want in.php: ERROR_WRONG_USER_KEY", err)
	}
	s.Key = demoKey
	tok, err := s.Solve(ctx, Turnstile, "0x4AAAAAAADemoCaptchaQ01", simURL+"/demo/turnstile")
	if err != nil || len(tok) < 300 || tok[:2] != "0." {
		t.Fatalf("turnstile: got %q, %v; want a token", tok, err)
	}
}
