package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBenchWritesCPUProfile runs a tiny mixed scenario with --cpuprofile
// and checks the report and the profile (gzip-compressed, as pprof
// writes it).
func TestBenchWritesCPUProfile(t *testing.T) {
	t.Parallel()
	prof := filepath.Join(t.TempDir(), "cpu.pprof")
	var out, errb bytes.Buffer
	env := &environment{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
	args := []string{"bench", "--scenario", "mixed", "--tasks", "4", "--threads", "2", "--scale", "0.01", "--poll-intervals", "1s", "--cpuprofile", prof}
	if code := run(context.Background(), env, args); code != 0 {
		t.Fatalf("bench exited %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "## mixed, realistic mix: 4 tasks") {
		t.Errorf("report lacks the mixed section:\n%s", out.String())
	}
	b, err := os.ReadFile(prof)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("profile is %d bytes starting %x, want a gzip stream", len(b), b[:min(len(b), 4)])
	}
}

func TestBenchCPUProfileUnwritable(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	env := &environment{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
	dir := filepath.Join(t.TempDir(), "missing")
	code := run(context.Background(), env, []string{"bench", "--cpuprofile", filepath.Join(dir, "cpu.pprof")})
	if code != 2 || !strings.Contains(errb.String(), "--cpuprofile: open "+dir) {
		t.Errorf("exit %d, stderr %q; want 2 and an error naming --cpuprofile and the path", code, errb.String())
	}
	if out.Len() != 0 {
		t.Errorf("a report was written: %q", out.String())
	}
}

// TestBenchReservoirFlags: the reservoir scenario's plan comes from its
// flags, 2 minutes unless --duration says otherwise; a plan that leaves
// refills no thread is a usage error naming the flag.
func TestBenchReservoirFlags(t *testing.T) {
	t.Parallel()
	env := &environment{stdin: strings.NewReader(""), stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}, getenv: func(string) string { return "" }}
	p, err := parseBench(env, []string{"--scenario", "reservoir", "--reservoir-threads", "5, 20", "--rate", "2"})
	if err != nil {
		t.Fatal(err)
	}
	if r := p.reservoir; fmt.Sprint(r.Threads) != "[5 20]" || r.Share != 0.25 || r.Rate != 2 || r.Duration != 0 {
		t.Errorf("plan %v threads, share %v, rate %v, duration %v; want [5 20], 0.25, 2, 0 (the scenario's 2m)", r.Threads, r.Share, r.Rate, r.Duration)
	}
	if p, err = parseBench(env, []string{"--scenario", "reservoir", "--duration", "5m"}); err != nil || p.reservoir.Duration != 5*time.Minute {
		t.Errorf("--duration 5m: %v, %v; want 5m", p.reservoir.Duration, err)
	}
	for args, want := range map[string]string{
		"--reservoir-threads 3":   "--reservoir-share 0.25 of 3 threads leaves no thread for refills",
		"--reservoir-threads 5,x": `--reservoir-threads: "x" is not a positive count`,
		"--reservoir-share 1.5":   "--reservoir-share is 1.5: give a share above 0 and at most 1",
		"--rate 0":                "--rate is 0: give a positive rate",
		"--duration -1s":          "--duration is -1s: give a positive duration",
	} {
		_, err := parseBench(env, append([]string{"--scenario", "reservoir"}, strings.Fields(args)...))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want an error with %q", args, err, want)
		}
	}
}
