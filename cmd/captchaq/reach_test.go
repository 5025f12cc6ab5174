package main

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/sim"
)

// refusingURL is a loopback URL whose port refuses connections (a port
// that was free a moment ago): a typo in --api-url.
func refusingURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// A batch against a provider URL that refuses every connection stops
// with exit 1, naming the URL and the cause, instead of retrying forever;
// its tasks stay in the store, and the rerun with the right URL solves
// them.
func TestUnreachableProviderStopsBatch(t *testing.T) {
	t.Parallel()
	bad := refusingURL(t)
	store := filepath.Join(t.TempDir(), "tasks.db")
	tasks := writeFile(t, "tasks.jsonl", jsonl(t, turnstileTasks("reach", 2)))
	key := map[string]string{"CAPTCHAAI_KEY": batchKey}
	r := startBinary(t, key, "", "batch", tasks, "--api-url", bad, "--store", store)
	if code := r.wait(t); code != exitFailure {
		t.Fatalf("exit code %d, want %d; stderr:\n%s", code, exitFailure, r.errText())
	}
	out := r.errText()
	for _, want := range []string{
		"captchaq batch: stopped: the provider never answered: ",
		`Post "` + bad + `/in.php": dial tcp ` + strings.TrimPrefix(bad, "http://") + ": connect: connection refused",
		"check --api-url (or CAPTCHAAI_URL) and the network",
		"tasks accepted so far are kept in the store",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stderr lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, batchKey) {
		t.Errorf("the key shows in stderr:\n%s", out)
	}

	_, base := startFastSim(t, sim.Config{Threads: 5, Key: batchKey})
	r = startBinary(t, key, "", "batch", tasks, "--api-url", base, "--store", store)
	if code := r.wait(t); code != 0 {
		t.Fatalf("the rerun with the right URL: exit code %d; stderr:\n%s", code, r.errText())
	}
	if got := r.stdout.String(); strings.Count(got, `"status":"solved"`) != 2 {
		t.Errorf("the rerun's results:\n%s", got)
	}
}

// With --patient a provider that never answers is retried until the
// timeout, whose message names what was seen.
func TestUnreachablePatientSolve(t *testing.T) {
	t.Parallel()
	bad := refusingURL(t)
	r := startBinary(t, map[string]string{"CAPTCHAAI_KEY": batchKey}, "", "solve", "--api-url", bad, "--store", "memory",
		"--patient", "--timeout", "3s", "--method", "turnstile", "--param", "sitekey=0x4AAA", "--param", "pageurl=https://shop.example/")
	if code := r.wait(t); code != exitTasksFailed {
		t.Fatalf("exit code %d, want %d; stderr:\n%s", code, exitTasksFailed, r.errText())
	}
	if want := "captchaq solve: no answer within 3s: the provider never answered: "; !strings.Contains(r.errText(), want) ||
		!strings.Contains(r.errText(), "connection refused") {
		t.Errorf("stderr lacks %q and the cause:\n%s", want, r.errText())
	}
}

func TestReachNote(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	last := `submit: NETWORK: cannot reach the provider: Post "http://127.0.0.1:9/in.php": dial tcp 127.0.0.1:9: connect: connection refused`
	m := captchaq.Metrics{Providers: []captchaq.ProviderMetrics{
		{Name: "main", Failures: 3, FailingSince: now.Add(-12 * time.Second), LastFailure: last, EverAnswered: true},
		{Name: "cheap"},
		{Failures: 1, FailingSince: now.Add(-time.Second), LastFailure: provider.ErrNetwork.Error()},
	}}
	want := "provider main unreachable: 3 failures in a row over 12s, the last: " + last +
		"; the provider never answered: 1 failures in a row over 1s, the last: " + provider.ErrNetwork.Error()
	if got := reachNote(m, now); got != want {
		t.Errorf("reachNote:\n got %q\nwant %q", got, want)
	}
	if got := reachNote(captchaq.Metrics{Providers: []captchaq.ProviderMetrics{{Name: "main", EverAnswered: true}}}, now); got != "" {
		t.Errorf("reachNote of a provider that answers: %q, want none", got)
	}
}
