package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
