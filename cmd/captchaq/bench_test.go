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

	"github.com/captchaq/captchaq/bench"
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
	p, err = parseBench(env, []string{"--scenario", "reservoir", "--front", "serve", "--captcha", "recaptcha", "--demands", "steady"})
	if r := p.reservoir; err != nil || r.Front != "serve" || r.Captcha != "recaptcha" || fmt.Sprint(r.Demands) != "[steady]" {
		t.Errorf("--front serve --captcha recaptcha --demands steady: %v, %q, %q, %v", err, r.Front, r.Captcha, r.Demands)
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
		"--front http":            `--front "http": use queue or serve`,
		"--captcha recaptcha":     `--captcha "recaptcha": use turnstile, or recaptcha with --front serve`,
		"--demands steady,flat":   `--demands: "flat" is not a demand`,
	} {
		_, err := parseBench(env, append([]string{"--scenario", "reservoir"}, strings.Fields(args)...))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want an error with %q", args, err, want)
		}
	}
}

// TestBenchReservoirServe runs the reservoir scenario on serve for 20 s:
// `captchaq sim` and `captchaq serve` processes, both clients over HTTP.
// Every task is answered with a token of its own, each verified once at
// the demo site, none handed out twice or with less than min_life left,
// and serve's counts match what the clients got.
func TestBenchReservoirServe(t *testing.T) {
	t.Parallel()
	var log bytes.Buffer
	c := bench.ReservoirConfig{Front: bench.FrontServe, Binary: captchaqBinary(t), Threads: []int{8}, Rate: 2,
		Duration: 20 * time.Second, Demands: []string{"steady"}, PlainEvery: 4, Seed: 3, Log: &log}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rows, err := bench.Reservoir(ctx, c)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if len(rows) != 2 || !rows[0].Reservoir || rows[1].Reservoir {
		t.Fatalf("rows %+v, want one with the reservoir and one without", rows)
	}
	for _, r := range rows {
		if r.Tasks != 40 || r.Failed != 0 || r.PlainTasks != 10 || len(r.ToToken)+len(r.Plain) != 40 {
			t.Errorf("reservoir %v: %d tasks, %d failed, %d by the 2captcha client, %d+%d timed; want 40, 0, 10, 40",
				r.Reservoir, r.Tasks, r.Failed, r.PlainTasks, len(r.ToToken), len(r.Plain))
		}
		if r.Verified != r.Tasks || r.Rejected != 0 || r.Twice != 0 || r.Short != 0 {
			t.Errorf("reservoir %v: %d verified, %d rejected, %d twice, %d short of min_life; want %d, 0, 0, 0",
				r.Reservoir, r.Verified, r.Rejected, r.Twice, r.Short, r.Tasks)
		}
	}
	if r := rows[0]; r.Hits == 0 || int64(r.Hits) != r.HandedOut || r.Solved < r.HandedOut || r.Paid != r.Solved+int64(r.Tasks-r.Hits) {
		t.Errorf("with the reservoir: %d hits, %d handed out, %d solved, %d paid; want hits = handed out <= solved, paid = solved + misses",
			r.Hits, r.HandedOut, r.Solved, r.Paid)
	}
	if r := rows[1]; r.Hits != 0 || r.Paid != int64(r.Tasks) {
		t.Errorf("without: %d hits, %d paid; want 0, %d", r.Hits, r.Paid, r.Tasks)
	}
}
