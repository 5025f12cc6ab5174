package sqlite_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/store/sqlite"
)

// The tests here run this test binary again as a second process, with
// childModeEnv naming what the child does (see TestChildProcess).
const (
	childModeEnv = "CAPTCHAQ_STORE_CHILD"
	childPathEnv = "CAPTCHAQ_STORE_CHILD_PATH"
	childTagEnv  = "CAPTCHAQ_STORE_CHILD_TAG"
)

// TestChildProcess is the child's body; it does nothing in a normal run.
func TestChildProcess(t *testing.T) {
	mode := os.Getenv(childModeEnv)
	if mode == "" {
		return
	}
	path := os.Getenv(childPathEnv)
	ctx := context.Background()
	switch mode {
	case "open":
		// Try to open, say how it went, and close.
		s, err := sqlite.Open(ctx, path, sqlite.Config{})
		if err != nil {
			fmt.Printf("error: %v\n", err)
			os.Exit(3)
		}
		fmt.Println("opened")
		_ = s.Close()
	case "hold":
		// Open, write one task, say so, and hold the store until stdin closes.
		s, err := sqlite.Open(ctx, path, sqlite.Config{})
		if err != nil {
			fmt.Printf("error: %v\n", err)
			os.Exit(3)
		}
		if _, _, err := s.Enqueue(ctx, []captchaq.Task{{ID: "held", Method: "turnstile"}}, time.Now()); err != nil {
			fmt.Printf("error: %v\n", err)
			os.Exit(3)
		}
		fmt.Println("opened")
		_, _ = io.Copy(io.Discard, os.Stdin)
		_ = s.Close()
	case "lifecycles":
		runLifecycles(ctx, path, os.Getenv(childTagEnv))
	default:
		fmt.Printf("error: unknown child mode %q\n", mode)
		os.Exit(2)
	}
	os.Exit(0)
}

// child is a second process running TestChildProcess in mode.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines *bufio.Scanner
}

func startChild(t *testing.T, mode, path string, extraEnv ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), childModeEnv+"="+mode, childPathEnv+"="+path)
	cmd.Env = append(cmd.Env, extraEnv...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, stdin: stdin, lines: bufio.NewScanner(stdout)}
	t.Cleanup(func() {
		_ = c.cmd.Process.Kill()
		_ = c.cmd.Wait()
	})
	return c
}

// line returns the child's next line of output.
func (c *child) line(t *testing.T) string {
	t.Helper()
	if !c.lines.Scan() {
		t.Fatalf("child ended without the expected output (scan error %v)", c.lines.Err())
	}
	return c.lines.Text()
}

func TestSecondProcessIsRefused(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/captchaq.db"

	// This process holds the store; a second process must give up at once.
	s, err := sqlite.Open(t.Context(), path, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c := startChild(t, "open", path)
	got := c.line(t)
	want := fmt.Sprintf("error: store %s is in use by another captchaq process (pid %d); stop it or choose another path", path, os.Getpid())
	if got != want {
		t.Errorf("child said\n%s\nwant\n%s", got, want)
	}
	var exit *exec.ExitError
	if err := c.cmd.Wait(); !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Errorf("child exit: %v, want exit status 3", err)
	}
	// Once the holder closes, another process opens it.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	c = startChild(t, "open", path)
	if got := c.line(t); got != "opened" {
		t.Errorf("child after Close said %q, want opened", got)
	}
}

func TestStoreHeldByKilledProcessIsFreed(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/captchaq.db"
	c := startChild(t, "hold", path)
	if got := c.line(t); got != "opened" {
		t.Fatalf("child said %q, want opened", got)
	}

	_, err := sqlite.Open(t.Context(), path, sqlite.Config{})
	var inUse *sqlite.InUseError
	if !errors.As(err, &inUse) || !errors.Is(err, sqlite.ErrInUse) {
		t.Fatalf("Open while another process holds the store: %v, want *InUseError", err)
	}
	if inUse.PID != c.cmd.Process.Pid || inUse.Path != path {
		t.Errorf("InUseError names pid %d path %s, want pid %d path %s", inUse.PID, inUse.Path, c.cmd.Process.Pid, path)
	}

	// kill -9 leaves no stale lock, and the child's write is there.
	if err := c.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = c.cmd.Wait()
	s, err := sqlite.Open(t.Context(), path, sqlite.Config{})
	if err != nil {
		t.Fatalf("Open after the holder was killed: %v", err)
	}
	defer s.Close()
	if rec, err := s.Get(t.Context(), "held"); err != nil || rec.Status != captchaq.StatusQueued {
		t.Errorf("Get(held) = %+v, %v; want the child's queued task", rec, err)
	}
}

func TestSecondOpenInProcessIsRefused(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/captchaq.db"
	s, err := sqlite.Open(t.Context(), path, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = sqlite.Open(t.Context(), path, sqlite.Config{})
	want := fmt.Sprintf("store %s is in use by another captchaq process (pid %d); stop it or choose another path", path, os.Getpid())
	if !errors.Is(err, sqlite.ErrInUse) || err.Error() != want {
		t.Errorf("second Open: %v\nwant: %s", err, want)
	}
}

// runLifecycles is the child of TestKillDuringWrites: several goroutines
// enqueue, checkpoint and finish tasks until the process is killed, and
// print each step on stdout once the store has acknowledged it.
func runLifecycles(ctx context.Context, path, tag string) {
	s, err := sqlite.Open(ctx, path, sqlite.Config{})
	if err != nil {
		fmt.Printf("error: %v\n", err)
		os.Exit(3)
	}
	var mu sync.Mutex
	ack := func(step, id string) {
		mu.Lock()
		defer mu.Unlock()
		// os.Stdout is unbuffered: the line is in the pipe when this returns.
		fmt.Fprintf(os.Stdout, "%s %s\n", step, id)
	}
	fail := func(err error) {
		mu.Lock()
		fmt.Fprintf(os.Stdout, "error: %v\n", err)
		os.Exit(3)
	}
	const goroutines = 8
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				id := fmt.Sprintf("%s-%d-%d", tag, g, i)
				now := time.Now()
				if _, _, err := s.Enqueue(ctx, []captchaq.Task{{ID: id, Method: "turnstile"}}, now); err != nil {
					fail(err)
				}
				ack("E", id)
				if err := s.Checkpoint(ctx, id, "c-"+id, 1, now); err != nil {
					fail(err)
				}
				ack("C", id)
				if i%3 == 2 {
					continue // left in flight
				}
				if err := s.Finish(ctx, captchaq.Result{ID: id, Status: captchaq.StatusSolved, Method: "turnstile",
					Token: "tok-" + id, Attempts: 1, FinishedAt: now}); err != nil {
					fail(err)
				}
				ack("F", id)
			}
		}()
	}
	wg.Wait()
}

func TestKillDuringWrites(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/captchaq.db"
	acked := map[string]string{} // id → furthest acknowledged step
	for round := range 3 {
		tag := fmt.Sprintf("r%d", round)
		c := startChild(t, "lifecycles", path, childTagEnv+"="+tag)
		// Kill at a moment chosen at random, counted in acknowledged steps;
		// the later ones come after the checkpointer has copied the WAL and
		// had it start over (about 5,000 steps).
		killAfter := 100 + int(time.Now().UnixNano()%12000)
		for n := 0; c.lines.Scan(); n++ {
			line := c.lines.Text()
			step, id, ok := strings.Cut(line, " ")
			if !ok || (step != "E" && step != "C" && step != "F") {
				t.Fatalf("child said %q", line)
			}
			acked[id] = step
			if n == killAfter {
				if err := syscall.Kill(c.cmd.Process.Pid, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
		}
		// Lines written before the kill are read above, up to EOF.
		err := c.cmd.Wait()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.String() != "signal: killed" {
			t.Fatalf("round %d: child ended with %v, want killed", round, err)
		}
		t.Logf("round %d: killed after %d acknowledged steps", round, killAfter)
	}

	s, err := sqlite.Open(t.Context(), path, sqlite.Config{})
	if err != nil {
		t.Fatalf("reopen after kill -9: %v", err)
	}
	defer s.Close()
	counts := map[string]int{}
	for id, step := range acked {
		counts[step]++
		rec, err := s.Get(t.Context(), id)
		if err != nil {
			t.Errorf("%s acknowledged %s: Get: %v", id, step, err)
			continue
		}
		switch step {
		case "C":
			if rec.Status == captchaq.StatusInFlight && rec.CaptchaID == "c-"+id && rec.Attempts == 1 {
				continue
			}
			if rec.Status == captchaq.StatusSolved && rec.Result.Token == "tok-"+id {
				continue // finished after its last acknowledged step
			}
			t.Errorf("%s acknowledged checkpoint, has status %q captcha id %q", id, rec.Status, rec.CaptchaID)
		case "F":
			if rec.Status != captchaq.StatusSolved || rec.Result == nil || rec.Result.Token != "tok-"+id {
				t.Errorf("%s acknowledged finish, has status %q result %+v", id, rec.Status, rec.Result)
			}
		}
	}
	t.Logf("acknowledged steps checked: %v", counts)
	if counts["F"] == 0 || counts["C"] == 0 {
		t.Errorf("too few steps to check: %v", counts)
	}
}
