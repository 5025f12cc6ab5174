package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/captchaq/captchaq/amqp"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/sim"
)

// The exit code tests run the built binary as a child process, as a
// script would, and check every command's code against the README's table of exit codes.

// binRun is one child process of the built binary.
type binRun struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	stderr bytes.Buffer
	stdout bytes.Buffer
}

func (r *binRun) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stderr.Write(p)
}

func (r *binRun) errText() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stderr.String()
}

// startBinary starts the binary with vars as its only CAPTCHAAI_/CAPTCHAQ_
// variables and a data directory of its own.
func startBinary(t *testing.T, vars map[string]string, stdin string, args ...string) *binRun {
	t.Helper()
	return startBinaryIn(t, "", vars, stdin, args...)
}

// startBinaryIn is startBinary in the working directory dir ("": the
// test's).
func startBinaryIn(t *testing.T, dir string, vars map[string]string, stdin string, args ...string) *binRun {
	t.Helper()
	r := &binRun{cmd: exec.Command(captchaqBinary(t), args...)}
	r.cmd.Dir = dir
	home := t.TempDir()
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CAPTCHAAI_") && !strings.HasPrefix(kv, "CAPTCHAQ_") &&
			!strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "XDG_DATA_HOME=") {
			r.cmd.Env = append(r.cmd.Env, kv)
		}
	}
	r.cmd.Env = append(r.cmd.Env, "HOME="+home, "XDG_DATA_HOME="+filepath.Join(home, "data"))
	for k, v := range vars {
		r.cmd.Env = append(r.cmd.Env, k+"="+v)
	}
	r.cmd.Stdin = strings.NewReader(stdin)
	r.cmd.Stdout = &r.stdout
	r.cmd.Stderr = r
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.cmd.Process.Kill() })
	return r
}

// wait waits for the child to exit and returns its exit code.
func (r *binRun) wait(t *testing.T) int {
	t.Helper()
	err := r.cmd.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	t.Fatalf("%v: %v", r.cmd.Args, err)
	return -1
}

func TestExitCodes(t *testing.T) {
	t.Parallel()
	_, base := startFastSim(t, sim.Config{Threads: 5, Key: batchKey})
	_, badBase := startFastSim(t, sim.Config{Threads: 5, Key: batchKey, UnsolvableRate: 1})
	tasks := writeFile(t, "tasks.jsonl", jsonl(t, turnstileTasks("exit", 3)))
	invalid := writeFile(t, "invalid.jsonl", `{"id":"a","method":"turnstile","params":{"sitekey":"k"}}`+"\n"+`{"id":"b"`+"\n")
	empty := writeFile(t, "empty.jsonl", "\n")
	clients := writeFile(t, "clients.json", `[{"name":"qa","key":"client-key-1"}]`)
	key := map[string]string{"CAPTCHAAI_KEY": batchKey}
	wrongKey := map[string]string{"CAPTCHAAI_KEY": "wrong-Key-000"}
	noKey := map[string]string{}
	turnstile := []string{"--method", "turnstile", "--param", "sitekey=0x4AAA", "--param", "pageurl=https://shop.example/", "--poll-interval", "20ms"}
	cat := func(a []string, b ...string) []string { return append(append([]string{}, a...), b...) }

	cases := []struct {
		name  string
		vars  map[string]string
		stdin string
		args  []string
		code  int
		say   string
	}{
		{"batch solved", key, "", []string{"batch", tasks, "--store", "memory", "--api-url", base, "--poll-interval", "10ms"}, 0, "3 solved, 0 failed"},
		{"solve solved", key, "", cat([]string{"solve", "--api-url", base}, turnstile...), 0, ""},

		{"batch bad flag", key, "", []string{"batch", "--bogus"}, 2, "unknown flag --bogus"},
		{"batch two files", key, "", []string{"batch", tasks, tasks}, 2, "one input file at most"},
		{"batch threads -1", key, "", []string{"batch", tasks, "--threads", "-1", "--store", "memory"}, 2, "--threads must be at least 1"},
		{"batch plan GOLD", key, "", []string{"batch", tasks, "--plan", "GOLD", "--store", "memory"}, 2, "--plan: "},
		{"batch missing file", key, "", []string{"batch", filepath.Join(t.TempDir(), "none.jsonl"), "--store", "memory"}, 2, "tasks file: open "},
		{"batch every line invalid", key, "", []string{"batch", invalid, "--store", "memory", "--api-url", base}, 2, "none of the 2 lines is a valid task"},
		{"batch empty input", key, "", []string{"batch", empty, "--store", "memory", "--api-url", base}, 2, "the input holds no tasks"},
		{"batch empty stdin", key, "", []string{"batch", "-", "--store", "memory", "--api-url", base}, 2, "the input holds no tasks"},
		{"batch no key", noKey, "", []string{"batch", tasks, "--store", "memory", "--api-url", base}, 2, "no provider key"},
		{"solve no key", noKey, "", cat([]string{"solve", "--api-url", base}, turnstile...), 2, "no provider key"},
		{"solve bad flag", key, "", []string{"solve", "--bogus"}, 2, "-bogus"},
		{"serve no key", noKey, "", []string{"serve", "--clients", clients, "--listen", "127.0.0.1:0", "--store", "memory", "--api-url", base}, 2, "no provider key"},
		{"worker no key", noKey, "", []string{"worker", "--amqp", "amqp://127.0.0.1:1"}, 2, "no provider key"},
		{"results bad flag", noKey, "", []string{"results", "--bogus"}, 2, "-bogus"},
		{"sim bad flag", noKey, "", []string{"sim", "--bogus"}, 2, "-bogus"},
		{"enqueue bad flag", noKey, "", []string{"enqueue", "--bogus"}, 2, "-bogus"},
		{"collect bad flag", noKey, "", []string{"collect", "--bogus"}, 2, "-bogus"},
		{"stats bad flag", noKey, "", []string{"stats", "--bogus"}, 2, "-bogus"},
		{"dlq bad flag", noKey, "", []string{"dlq", "list", "--store", "x.db", "--bogus"}, 2, "-bogus"},
		{"bench bad flag", noKey, "", []string{"bench", "--bogus"}, 2, "-bogus"},
		{"loadtest bad flag", noKey, "", []string{"loadtest", "--bogus"}, 2, "-bogus"},
		{"unknown command", noKey, "", []string{"bogus"}, 2, "unknown command"},

		{"batch wrong key", wrongKey, "", []string{"batch", tasks, "--store", "memory", "--api-url", base}, 3, "refused the account"},
		{"solve wrong key", wrongKey, "", cat([]string{"solve", "--api-url", base}, turnstile...), 3, "ERROR_"},
		{"serve wrong key", wrongKey, "", []string{"serve", "--clients", clients, "--listen", "127.0.0.1:0", "--store", "memory", "--api-url", base}, 3, "refused the account"},
		{"worker wrong key", wrongKey, "", []string{"worker", "--amqp", "amqp://127.0.0.1:1", "--api-url", base}, 3, "refused the account"},

		{"batch tasks failed", key, "", []string{"batch", tasks, "--store", "memory", "--api-url", badBase, "--max-attempts", "1", "--poll-interval", "10ms"}, 4, "3 of 3 tasks failed"},
		{"solve task failed", key, "", cat([]string{"solve", "--api-url", badBase}, turnstile...), 4, "ERROR_CAPTCHA_UNSOLVABLE"},

		{"batch output unwritable", key, "", []string{"batch", tasks, "--store", "memory", "--api-url", base, "--out", filepath.Join(t.TempDir(), "no", "dir", "r.jsonl")}, 1, "--out: "},
		{"collect broker unreachable", noKey, "", []string{"collect", "--amqp", "amqp://guest:guest@127.0.0.1:1/"}, 1, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := startBinary(t, c.vars, c.stdin, c.args...)
			if code := r.wait(t); code != c.code || !strings.Contains(r.errText(), c.say) {
				t.Errorf("captchaq %v: exit %d, stderr:\n%s\nwant exit %d saying %q", c.args, code, r.errText(), c.code, c.say)
			}
			if strings.Contains(r.stdout.String()+r.errText(), batchKey) {
				t.Errorf("the key appears in the output")
			}
		})
	}
}

// TestExitCodeInterrupted sends SIGINT to each command while it works: every
// one exits 130.
func TestExitCodeInterrupted(t *testing.T) {
	t.Parallel()
	// Realistic solve times: a task takes seconds, so each command is busy
	// when the signal comes.
	cfg := sim.Config{Threads: 5, Key: batchKey}
	cfg.PollBan.Disabled = true
	s, base, err := sim.Start(cfg, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	key := map[string]string{"CAPTCHAAI_KEY": batchKey}
	clients := writeFile(t, "clients.json", `[{"name":"qa","key":"client-key-1"}]`)
	tasks := writeFile(t, "tasks.jsonl", jsonl(t, turnstileTasks("sigint", 3)))
	db := filepath.Join(t.TempDir(), "q.db")
	var accepted func() bool
	for _, c := range []struct {
		name  string
		args  []string
		ready func(r *binRun) bool
	}{
		{"batch", []string{"batch", tasks, "--store", db, "--api-url", base}, func(*binRun) bool { return accepted() }},
		{"solve", []string{"solve", "--api-url", base, "--method", "userrecaptcha", "--param", "googlekey=6Le-test", "--param", "pageurl=https://shop.example/sigint"}, func(*binRun) bool { return accepted() }},
		{"sim", []string{"sim", "--addr", "127.0.0.1:0", "--threads", "1"}, func(r *binRun) bool { return strings.Contains(r.errText(), "listening on") }},
		{"serve", []string{"serve", "--clients", clients, "--listen", "127.0.0.1:0", "--store", "memory", "--api-url", base}, func(r *binRun) bool { return strings.Contains(r.errText(), "serving") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := s.Stats().Accepted
			accepted = func() bool { return s.Stats().Accepted > before }
			r := startBinary(t, key, "", c.args...)
			testbound.Until(t, c.name+" to start working", func() bool { return c.ready(r) })
			if err := r.cmd.Process.Signal(os.Interrupt); err != nil {
				t.Fatal(err)
			}
			if code := r.wait(t); code != exitInterrupted {
				t.Errorf("captchaq %v after SIGINT: exit %d, want %d; stderr:\n%s", c.args, code, exitInterrupted, r.errText())
			}
		})
	}
}

// TestEveryCommandHelp runs each command with --help: it exits 0 and lists
// its flags on stdout.
func TestEveryCommandHelp(t *testing.T) {
	t.Parallel()
	for name := range commands {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := startBinary(t, nil, "", name, "--help")
			if code := r.wait(t); code != 0 || !strings.Contains(r.stdout.String(), "usage: ") || !strings.Contains(r.stdout.String(), "  -") || r.errText() != "" {
				t.Errorf("captchaq %s --help: exit %d, stdout:\n%s\nstderr:\n%s\nwant exit 0, a usage line and the flags on stdout", name, code, r.stdout.String(), r.errText())
			}
		})
	}
}

// TestExitCodesFleet runs the fleet's commands into their codes against
// the test broker.
func TestExitCodesFleet(t *testing.T) {
	t.Parallel()
	cfg, _ := cliTopology(t)
	// The worker's checkpoint and claim queues, beside the topology.
	t.Cleanup(func() { _ = amqp.DeleteTopology(context.Background(), cfg, "exit-test") })
	_, base := startFastSim(t, sim.Config{Key: batchKey})
	fleet := []string{"--amqp", cfg.URL, "--prefix", cfg.Prefix}
	cat := func(a []string, b ...string) []string { return append(append([]string{}, a...), b...) }
	good := `{"id":"f-1","method":"turnstile","params":{"sitekey":"0x4","pageurl":"https://a.example/"}}` + "\n"
	bad := `{"id":"f-2","method":"turnstile","params":{"pageurl":"https://a.example/"}}` + "\n"
	db := filepath.Join(t.TempDir(), "dlq.db")
	if r := runWith(t, "", keyEnv, "batch", writeFile(t, "t.jsonl", good), "--store", db, "--api-url", base, "--poll-interval", "10ms"); r.code != 0 {
		t.Fatalf("batch for the store = %+v", r)
	}
	for _, c := range []struct {
		name  string
		vars  map[string]string
		stdin string
		args  []string
		code  int
		say   string
	}{
		{"enqueue", nil, good, cat([]string{"enqueue", "-"}, fleet...), 0, "enqueued 1 tasks"},
		{"enqueue invalid line", nil, good + bad, cat([]string{"enqueue", "-"}, fleet...), 2, "1 invalid lines"},
		{"enqueue missing file", nil, "", cat([]string{"enqueue", filepath.Join(t.TempDir(), "none.jsonl")}, fleet...), 2, "no such file"},
		{"stats", nil, "", cat([]string{"stats", "--window", "100ms"}, fleet...), 0, "sampling for 100ms"},
		{"dlq list fleet", nil, "", cat([]string{"dlq", "list"}, fleet...), 0, "0 dead letters"},
		{"dlq replay without which", nil, "", cat([]string{"dlq", "replay"}, fleet...), 2, "say which"},
		{"dlq list store", nil, "", []string{"dlq", "list", "--store", db}, 0, "0 dead letters"},
		{"results", nil, "", []string{"results", "--store", db}, 0, ""},
		{"collect short", nil, "", cat([]string{"collect", "--count", "5", "--timeout", "300ms"}, fleet...), 4, "collected"},
	} {
		r := startBinary(t, c.vars, c.stdin, c.args...)
		if code := r.wait(t); code != c.code || !strings.Contains(r.errText(), c.say) {
			t.Errorf("%s: captchaq %v: exit %d, stderr:\n%s\nwant exit %d saying %q", c.name, c.args, code, r.errText(), c.code, c.say)
		}
	}
	// The fleet's long-running commands exit 130 on SIGINT.
	for _, c := range []struct {
		name  string
		args  []string
		ready string
	}{
		{"worker", cat([]string{"worker", "--api-url", base, "--owner", "exit-test"}, fleet...), "msg="},
		{"collect", cat([]string{"collect"}, fleet...), "reading results from"},
	} {
		r := startBinary(t, keyEnv, "", c.args...)
		testbound.Until(t, c.name+" to start", func() bool { return strings.Contains(r.errText(), c.ready) })
		if err := r.cmd.Process.Signal(os.Interrupt); err != nil {
			t.Fatal(err)
		}
		if code := r.wait(t); code != exitInterrupted {
			t.Errorf("%s after SIGINT: exit %d, want %d; stderr:\n%s", c.name, code, exitInterrupted, r.errText())
		}
	}
}

// docs/commands.md gives each command's synopsis as its --help's first
// line says it ("…" for "..."), under "## NAME", for every command.
func TestCommandsPageHasEachSynopsis(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile(filepath.Join("..", "..", "docs", "commands.md"))
	if err != nil {
		t.Fatal(err)
	}
	for name := range commands {
		r := runWith(t, "", nil, name, "--help")
		first, _, _ := strings.Cut(r.stderr+r.stdout, "\n")
		want := "## " + name + "\n\n`" + strings.ReplaceAll(strings.TrimPrefix(first, "usage: "), "...", "…") + "`\n"
		if !strings.Contains(string(page), want) {
			t.Errorf("docs/commands.md has no\n%swant the synopsis of captchaq %s --help under its heading", want, name)
		}
	}
}

// Every command's --help opens with its synopsis, "usage: captchaq NAME"
// and what it takes, and exits 0.
func TestEveryHelpOpensWithASynopsis(t *testing.T) {
	t.Parallel()
	if len(commands) < 12 {
		t.Fatalf("%d commands registered, want the 12 of the README", len(commands))
	}
	for name := range commands {
		for _, flag := range []string{"--help", "-h"} {
			r := runWith(t, "", nil, name, flag)
			first, _, _ := strings.Cut(r.stdout, "\n")
			if r.code != 0 || !strings.HasPrefix(first, "usage: captchaq "+name+" ") || strings.HasSuffix(first, name+" [flags]") {
				t.Errorf("captchaq %s %s: exit %d, first line %q; want 0 and a synopsis", name, flag, r.code, first)
			}
			if strings.Contains(r.stdout, "Usage of ") || strings.Contains(r.stdout, "(default -1") {
				t.Errorf("captchaq %s %s prints Go's bare usage or a negative default:\n%s", name, flag, r.stdout)
			}
		}
	}
	// captchaq help NAME is NAME's help; an unknown name is an error.
	if r := runWith(t, "", nil, "help", "batch"); r.code != 0 || !strings.HasPrefix(r.stdout, "usage: captchaq batch ") {
		t.Errorf("captchaq help batch: exit %d, stdout %q; want 0 and batch's synopsis", r.code, r.stdout)
	}
	if r := runWith(t, "", nil, "help", "frob"); r.code != exitUsage || !strings.Contains(r.stderr, `unknown command "frob"`) {
		t.Errorf("captchaq help frob: exit %d, stderr %q; want %d and the unknown command named", r.code, r.stderr, exitUsage)
	}
	// dlq's actions take --help too.
	for _, args := range [][]string{{"dlq", "list", "--help"}, {"dlq", "replay", "-h"}, {"dlq", "list", "--amqp", "amqp://x", "--help"}} {
		r := runWith(t, "", nil, args...)
		if first, _, _ := strings.Cut(r.stdout, "\n"); r.code != 0 || !strings.HasPrefix(first, "usage: captchaq dlq ") {
			t.Errorf("captchaq %v: exit %d, first line %q; want 0 and dlq's synopsis", args, r.code, first)
		}
	}
}
