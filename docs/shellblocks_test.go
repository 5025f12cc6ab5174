// Package docs holds the tests of the documentation: every shell block of
// README.md, CONTRIBUTING.md and docs/*.md is run as written, and every
// relative link resolves (CONTRIBUTING.md, "Shell blocks in the docs").
package docs_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/captchaq/captchaq/internal/brokertest"
)

// The pages whose shell blocks TestDocShellBlocks runs, as the
// repository's root sees them: CONTRIBUTING.md "Shell blocks in the docs"
// is the convention they follow.
var docPages = []string{"README.md", "CONTRIBUTING.md", "docs/*.md"}

// docBlockBound bounds one block's run: the longest (the README's first
// batch at realistic solve times, compiled first) takes about a minute on
// a quiet machine, so only a hang reaches it.
const docBlockBound = 8 * time.Minute

// shellBlock is one ```sh block of a page.
type shellBlock struct {
	page   string // path from the repository's root
	line   int    // line of the opening fence, from 1
	text   string // the block's lines, fences excluded
	notRun string // the reason given in <!-- not run: REASON -->, or ""
}

// chunk is a run of command lines and the checks written after them.
type chunk struct {
	line   int      // first line in the page, from 1
	script string   // the commands
	want   []string // #> lines, in order
	exit   int      // # exits N; 0 when not stated
}

var (
	notRunRE = regexp.MustCompile(`^<!--\s*not run:\s*(.*?)\s*-->$`)
	exitsRE  = regexp.MustCompile(`^# exits (\d+)\b`)
	portRE   = regexp.MustCompile(`\b(127\.0\.0\.1|localhost):(\d{2,5})\b`)
	prefixRE = regexp.MustCompile(`(--prefix )(demo\w*)\b|\b(demo\w*)\.`)
)

// shellBlocks returns the ```sh blocks of the markdown in src.
func shellBlocks(page string, src []byte) ([]shellBlock, error) {
	var (
		blocks  []shellBlock
		cur     *shellBlock
		body    []string
		prev    string // the last non-blank line outside a block
		inOther bool   // inside a fence of another language
	)
	sc := bufio.NewScanner(bytes.NewReader(src))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case cur != nil && trimmed == "```":
			cur.text = strings.Join(body, "\n") + "\n"
			blocks = append(blocks, *cur)
			cur, body = nil, nil
		case cur != nil:
			body = append(body, line)
		case inOther:
			if trimmed == "```" {
				inOther = false
			}
		case trimmed == "```sh" || trimmed == "```bash" || trimmed == "```shell":
			if line != trimmed {
				return nil, fmt.Errorf("%s:%d: an indented ```sh block: write shell blocks at the start of the line, so they are run", page, n)
			}
			cur = &shellBlock{page: page, line: n}
			if m := notRunRE.FindStringSubmatch(prev); m != nil {
				if m[1] == "" {
					return nil, fmt.Errorf("%s:%d: <!-- not run: --> needs a reason", page, n)
				}
				cur.notRun = m[1]
			}
		case strings.HasPrefix(trimmed, "```"):
			inOther = true
		}
		if cur == nil && trimmed != "" {
			prev = trimmed
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: a ```sh block is not closed", page, cur.line)
	}
	return blocks, sc.Err()
}

// chunks splits a block at its checks: each chunk is the commands up to a
// run of #> and # exits lines, and those checks.
func chunks(b shellBlock) ([]chunk, error) {
	var (
		out  []chunk
		cur  = chunk{line: b.line + 1}
		cmds []string
		seen bool // a check was read after the current commands
	)
	flush := func() {
		cur.script = strings.Join(cmds, "\n") + "\n"
		out = append(out, cur)
	}
	for i, line := range strings.Split(strings.TrimSuffix(b.text, "\n"), "\n") {
		n := b.line + 1 + i
		want, isWant := strings.CutPrefix(line, "#> ")
		if !isWant && line == "#>" {
			want, isWant = "", true
		}
		m := exitsRE.FindStringSubmatch(line)
		switch {
		case isWant || m != nil:
			if len(cmds) == 0 {
				return nil, fmt.Errorf("%s:%d: a check with no command before it", b.page, n)
			}
			if isWant {
				cur.want = append(cur.want, want)
			} else {
				if cur.exit != 0 {
					return nil, fmt.Errorf("%s:%d: two exit codes for one command", b.page, n)
				}
				cur.exit, _ = strconv.Atoi(m[1])
			}
			seen = true
		default:
			if seen {
				flush()
				cur, cmds, seen = chunk{line: n}, nil, false
			}
			cmds = append(cmds, line)
		}
	}
	if len(cmds) > 0 {
		flush()
	}
	return out, nil
}

// lineMatches reports whether got is the line want describes: want's text
// literally, with … standing for any text.
func lineMatches(want, got string) bool {
	parts := strings.Split(strings.TrimRight(want, " \t"), "…")
	for i := range parts {
		parts[i] = regexp.QuoteMeta(parts[i])
	}
	return regexp.MustCompile(`^` + strings.Join(parts, `.*`) + `$`).MatchString(strings.TrimRight(got, " \t\r"))
}

// missingLine returns the first of want that does not appear in got in
// order, or "" when they all do.
func missingLine(want []string, got string) (string, bool) {
	lines := strings.Split(got, "\n")
	i := 0
	for _, w := range want {
		for i < len(lines) && !lineMatches(w, lines[i]) {
			i++
		}
		if i == len(lines) {
			return w, true
		}
		i++
	}
	return "", false
}

// The markers the runner prints after each chunk, on a line of their own.
var markerRE = regexp.MustCompile(`(?m)^@@docs-check (\d+) rc=(\d+) errs=(\d+)$`)

// script is the bash program for a block: each chunk, then a marker with
// its exit code and how many commands failed in it (an ERR trap, which
// bash runs for a failed command that is not a condition).
func script(cs []chunk) string {
	var b strings.Builder
	b.WriteString("exec 2>&1\n__docs_errs=0\ntrap '__docs_errs=$((__docs_errs+1))' ERR\n")
	for i, c := range cs {
		b.WriteString(c.script)
		fmt.Fprintf(&b, "__docs_rc=$?; printf '\\n@@docs-check %d rc=%%d errs=%%d\\n' \"$__docs_rc\" \"$__docs_errs\"; __docs_errs=0\n", i)
	}
	return b.String()
}

// needs names what a block needs beside Go and captchaq, from what it runs.
func needs(text string) []string {
	var out []string
	if strings.Contains(text, "amqp://") || regexp.MustCompile(`captchaq (worker|enqueue|collect|stats)\b`).MatchString(text) {
		out = append(out, "rabbitmq")
	}
	if strings.Contains(text, "examples/browser-") {
		out = append(out, "chromium")
	}
	if regexp.MustCompile(`\b(npm|node) `).MatchString(text) {
		out = append(out, "node")
	}
	if strings.Contains(text, "promtool") {
		out = append(out, "promtool")
	}
	if regexp.MustCompile(`\bcurl\b`).MatchString(text) {
		out = append(out, "curl")
	}
	return out
}

// missingNeed says why a need is not met here, or "".
func missingNeed(need string) string {
	tool := map[string]string{"chromium": "chromium", "node": "node", "promtool": "promtool", "curl": "curl"}[need]
	if tool != "" {
		if _, err := exec.LookPath(tool); err != nil {
			return tool + " is not installed"
		}
		if need == "node" {
			if _, err := exec.LookPath("npm"); err != nil {
				return "npm is not installed"
			}
		}
		return ""
	}
	panic("no check for " + need)
}

// filesIn lists the files under dir, by their path in it; a node_modules
// directory counts once, as its path with a slash.
func filesIn(t *testing.T, dir string) map[string]bool {
	t.Helper()
	got := map[string]bool{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case d.IsDir() && d.Name() == "node_modules":
			got[filepath.ToSlash(rel)+"/"] = true
			return filepath.SkipDir
		case !d.IsDir():
			got[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// repoCopy copies the repository's tracked files into a new directory, so
// blocks run in a fresh checkout and write nothing into the tree.
func repoCopy(t *testing.T, root string) string {
	t.Helper()
	dst := t.TempDir()
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	var files []string
	if err == nil {
		for _, f := range strings.Split(string(out), "\x00") {
			if f != "" {
				files = append(files, f)
			}
		}
	} else {
		err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			if !d.IsDir() {
				rel, _ := filepath.Rel(root, p)
				files = append(files, rel)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range files {
		src := filepath.Join(root, f)
		info, err := os.Lstat(src)
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted in the work tree, not yet in git
		}
		if err != nil {
			t.Fatal(err)
		}
		if !info.Mode().IsRegular() {
			continue
		}
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dst, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, info.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// buildCaptchaq builds the command of the tree at root into a directory of
// its own, which the blocks find first on PATH.
func buildCaptchaq(t *testing.T, root string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "captchaq")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/captchaq")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/captchaq: %v\n%s", err, out)
	}
	return bin
}

// freePort returns a port on 127.0.0.1 that nothing listened on a moment
// ago.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// pageEnv is what the blocks of one page share: the copy of the tree, a
// home and data directory, its ports and its AMQP prefix.
type pageEnv struct {
	dir    string
	env    []string
	ports  map[string]string
	prefix string

	usedBroker bool // a block ran against RabbitMQ: delete the prefix's queues at the end
}

// deleteQueues deletes the queues whose names start with prefix, through
// RabbitMQ's management API (the docs' blocks leave theirs, as a reader's
// would); without the API they stay.
func deleteQueues(t *testing.T, prefix string) {
	resp, err := http.Get("http://guest:guest@127.0.0.1:15672/api/queues/%2F?columns=name")
	if err != nil {
		t.Logf("queues of prefix %s left on the broker: %v", prefix, err)
		return
	}
	defer resp.Body.Close()
	var queues []struct{ Name string }
	if err := json.NewDecoder(resp.Body).Decode(&queues); err != nil {
		t.Logf("queues of prefix %s left on the broker: %v", prefix, err)
		return
	}
	for _, q := range queues {
		if !strings.HasPrefix(q.Name, prefix+"-") {
			continue
		}
		req, _ := http.NewRequest(http.MethodDelete, "http://guest:guest@127.0.0.1:15672/api/queues/%2F/"+url.PathEscape(q.Name), nil)
		if r, err := http.DefaultClient.Do(req); err == nil {
			r.Body.Close()
		}
	}
}

// substitute puts the page's ports and prefix into a block's text.
func (pe *pageEnv) substitute(t *testing.T, text string) string {
	text = portRE.ReplaceAllStringFunc(text, func(m string) string {
		sub := portRE.FindStringSubmatch(m)
		if sub[2] == "5672" || sub[2] == "5432" || sub[2] == "15672" {
			return m // the shared RabbitMQ and PostgreSQL
		}
		p, ok := pe.ports[sub[2]]
		if !ok {
			p = freePort(t)
			pe.ports[sub[2]] = p
		}
		return sub[1] + ":" + p
	})
	return prefixRE.ReplaceAllStringFunc(text, func(m string) string {
		sub := prefixRE.FindStringSubmatch(m)
		if sub[1] != "" {
			return sub[1] + pe.prefix + "-" + sub[2]
		}
		return pe.prefix + "-" + sub[3] + "."
	})
}

// goEnv returns the go tool's cache and module directories, so the blocks'
// go commands reuse them under another HOME.
func goEnv(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOCACHE", "GOMODCACHE", "GOPATH").Output()
	if err != nil {
		t.Fatalf("go env: %v", err)
	}
	v := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(v) != 3 {
		t.Fatalf("go env: %q", out)
	}
	return []string{"GOCACHE=" + v[0], "GOMODCACHE=" + v[1], "GOPATH=" + v[2]}
}

func TestDocShellBlocks(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	var pages []string
	for _, g := range docPages {
		m, err := filepath.Glob(filepath.Join(root, g))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range m {
			rel, _ := filepath.Rel(root, p)
			pages = append(pages, rel)
		}
	}
	sort.Strings(pages)
	if len(pages) < 3 {
		t.Fatalf("found only %v: is the test run from docs/?", pages)
	}
	bin := buildCaptchaq(t, root)
	copyDir := repoCopy(t, root)
	base := goEnv(t)
	home, _ := os.UserHomeDir()
	if home != "" {
		// npm's cache, so `npm ci` in a block reuses what is downloaded.
		base = append(base, "npm_config_cache="+filepath.Join(home, ".npm"))
	}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "CAPTCHAAI_"), strings.HasPrefix(k, "CAPTCHAQ_"),
			strings.HasPrefix(k, "XDG_"),
			k == "HOME", k == "PATH", k == "GOCACHE", k == "GOMODCACHE",
			k == "GOPATH", k == "TMPDIR", k == "npm_config_cache", k == "GOFLAGS":
			continue
		}
		base = append(base, kv)
	}
	base = append(base, "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	// The copy's packages sit at another path than the tree's: without
	// their paths in the build, the go commands of the blocks (go run,
	// go test) reuse the build cache from one run of the test to the next.
	base = append(base, "GOFLAGS=-trimpath")

	// The blocks write their files into a directory of their own (cd
	// "$(mktemp -d)"), never into the checkout: after them the copy holds
	// what it held, the README's first command's results.jsonl and the
	// browser example's npm packages (both ignored by git).
	before := filesIn(t, copyDir)
	t.Cleanup(func() {
		var left []string
		for f := range filesIn(t, copyDir) {
			if !before[f] && f != "results.jsonl" && f != "examples/browser-node/node_modules/" {
				left = append(left, f)
			}
		}
		sort.Strings(left)
		if len(left) > 0 {
			t.Errorf("the blocks left %d files in the checkout: %v; have them write into a directory of their own (cd \"$(mktemp -d)\")", len(left), left)
		}
	})

	var mu sync.Mutex
	counts := map[string]int{}
	t.Cleanup(func() {
		t.Logf("shell blocks: %d run, %d not run (marked, with a reason), %d without what they need", counts["run"], counts["not run"], counts["unmet"])
	})
	count := func(k string) { mu.Lock(); counts[k]++; mu.Unlock() }

	for _, page := range pages {
		t.Run(strings.ReplaceAll(page, "/", "_"), func(t *testing.T) {
			t.Parallel()
			src, err := os.ReadFile(filepath.Join(root, page))
			if err != nil {
				t.Fatal(err)
			}
			blocks, err := shellBlocks(page, src)
			if err != nil {
				t.Fatal(err)
			}
			h := t.TempDir()
			pe := &pageEnv{
				dir:    copyDir,
				ports:  map[string]string{},
				prefix: fmt.Sprintf("docs-%d-%d", os.Getpid(), time.Now().UnixNano()%1e9),
				// A newcomer's environment: a HOME of its own and no XDG_
				// variable, so a block that leans on the test's own
				// environment fails here.
				env: append(append([]string(nil), base...), "HOME="+h, "TMPDIR="+filepath.Join(h, "tmp")),
			}
			if err := os.MkdirAll(filepath.Join(h, "tmp"), 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if pe.usedBroker {
					deleteQueues(t, pe.prefix)
				}
			})
			for _, b := range blocks {
				if b.notRun != "" {
					count("not run")
					t.Logf("%s:%d not run: %s", b.page, b.line, b.notRun)
					continue
				}
				problems, ran := runBlock(t, pe, b)
				for _, p := range problems {
					t.Error(p)
				}
				if ran {
					count("run")
				} else {
					count("unmet")
				}
			}
		})
	}
}

// runBlock runs one block and returns what differs from what its checks
// state. It returns ran false when the block's needs are not met here.
func runBlock(t *testing.T, pe *pageEnv, b shellBlock) (problems []string, ran bool) {
	t.Helper()
	where := fmt.Sprintf("%s:%d", b.page, b.line)
	for _, n := range needs(b.text) {
		if n == "rabbitmq" {
			// Held shared until the page is done, and checked under the
			// lock (a test that restarts the broker holds it exclusively);
			// a missing broker skips the page here and fails it in CI.
			brokertest.Use(t)
			pe.usedBroker = true
			continue
		}
		if why := missingNeed(n); why != "" {
			if os.Getenv("CI") == "true" {
				return []string{fmt.Sprintf("%s: %s (CI=true: every block must run)", where, why)}, false
			}
			t.Logf("%s: not run here: %s", where, why)
			return nil, false
		}
	}
	text := pe.substitute(t, b.text)
	cs, err := chunks(shellBlock{page: b.page, line: b.line, text: text})
	if err != nil {
		return []string{err.Error()}, true
	}
	ctx, cancel := context.WithTimeout(t.Context(), docBlockBound)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "--noprofile", "--norc", "-c", script(cs))
	cmd.Dir = pe.dir
	cmd.Env = pe.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Stop the block's group, and whatever it left in the background.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	cmd.WaitDelay = 10 * time.Second
	runErr := cmd.Run()
	if cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	got := out.String()
	if ctx.Err() != nil {
		return []string{fmt.Sprintf("%s: still running after %v (a hang?); it printed:\n%s", where, docBlockBound, got)}, true
	}
	marks := markerRE.FindAllStringSubmatchIndex(got, -1)
	start := 0
	for i, c := range cs {
		if i >= len(marks) {
			return append(problems, fmt.Sprintf("%s: the block stopped before its check at line %d (%v); it printed:\n%s", where, c.line, runErr, got[start:])), true
		}
		m := marks[i]
		section := got[start:m[0]]
		start = m[1]
		rc, _ := strconv.Atoi(got[m[4]:m[5]])
		errs, _ := strconv.Atoi(got[m[6]:m[7]])
		wantErrs := 0
		if c.exit != 0 {
			wantErrs = 1
		}
		if rc != c.exit || errs != wantErrs {
			problems = append(problems, fmt.Sprintf("%s: the commands from line %d exited %d with %d failed commands, want exit %d with %d (a command that fails must be the last before a # exits N line):\n%s\nthey printed:\n%s",
				where, c.line, rc, errs, c.exit, wantErrs, c.script, section))
		}
		if w, missing := missingLine(c.want, section); missing {
			problems = append(problems, fmt.Sprintf("%s: the commands from line %d did not print\n\t%s\n(in the order of the #> lines); they printed:\n%s", where, c.line, w, section))
		}
	}
	return problems, true
}

// The runner itself: a block whose output, exit code or order differs
// from what it states is reported, and one that matches is not.
func TestDocRunnerCatchesDrift(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pe := &pageEnv{dir: dir, ports: map[string]string{}, prefix: "x", env: []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}}
	for _, c := range []struct {
		name, block string
		want        []string // substrings of the problems, one each
	}{
		{"matches", "echo hello world\n#> hello …\nsh -c 'exit 3'\n# exits 3\necho after\n#> after\n", nil},
		{"condition failures are not failures", "until true; do false; done\nfalse || true\nif false; then :; fi\n", nil},
		{"stderr counts as output", "echo oops >&2\n#> oops\n", nil},
		{"wrong output", "echo hello\n#> goodbye\n", []string{"did not print\n\tgoodbye"}},
		{"wrong order", "echo a; echo b\n#> b\n#> a\n", []string{"did not print\n\ta"}},
		{"whole line", "echo hello world\n#> hello\n", []string{"did not print\n\thello"}},
		{"unstated exit code", "sh -c 'exit 3'\necho next\n", []string{"exited 0 with 1 failed commands, want exit 0 with 0"}},
		{"wrong exit code", "sh -c 'exit 3'\n# exits 4\n", []string{"exited 3 with 1 failed commands, want exit 4 with 1"}},
		{"a failure before the stated one", "false\nsh -c 'exit 4'\n# exits 4\n", []string{"exited 4 with 2 failed commands, want exit 4 with 1"}},
		{"stops early", "echo one\n#> one\nexit 0\necho two\n#> two\n", []string{"stopped before its check at line 4"}},
	} {
		problems, ran := runBlock(t, pe, shellBlock{page: "t.md", line: 1, text: c.block})
		if !ran {
			t.Fatalf("%s: not run", c.name)
		}
		if len(problems) != len(c.want) {
			t.Errorf("%s: %d problems, want %d: %q", c.name, len(problems), len(c.want), problems)
			continue
		}
		for i, w := range c.want {
			if !strings.Contains(problems[i], w) {
				t.Errorf("%s: problem %q does not say %q", c.name, problems[i], w)
			}
		}
	}
}

func TestDocBlocksParse(t *testing.T) {
	t.Parallel()
	src := "text\n\n<!-- not run: needs a real key -->\n```sh\nsecret\n```\n\n```go\nx := 1\n```\n```sh\necho a\n#> a\n```\n\n```\n```sh in a plain fence is not a block\n```\n"
	blocks, err := shellBlocks("p.md", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 2 || blocks[0].notRun != "needs a real key" || blocks[0].text != "secret\n" || blocks[0].line != 4 ||
		blocks[1].notRun != "" || blocks[1].text != "echo a\n#> a\n" || blocks[1].line != 11 {
		t.Fatalf("blocks %+v", blocks)
	}
	for _, bad := range []string{
		"<!-- not run: -->\n```sh\nx\n```\n", // no reason
		"- item\n  ```sh\n  x\n  ```\n",      // indented: would not be run
		"```sh\nx\n",                         // not closed
	} {
		if _, err := shellBlocks("p.md", []byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	cs, err := chunks(shellBlock{page: "p.md", line: 1, text: "a\nb\n#> x\n# exits 2\nc\n#> y\nd\n"})
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 3 || cs[0].script != "a\nb\n" || cs[0].exit != 2 || len(cs[0].want) != 1 || cs[0].line != 2 ||
		cs[1].script != "c\n" || cs[1].want[0] != "y" || cs[2].script != "d\n" || cs[2].exit != 0 || cs[2].line != 8 {
		t.Fatalf("chunks %+v", cs)
	}
	if _, err := chunks(shellBlock{page: "p.md", line: 1, text: "#> x\n"}); err == nil {
		t.Error("a check before any command: no error")
	}
}

func TestDocSubstitutions(t *testing.T) {
	t.Parallel()
	pe := &pageEnv{ports: map[string]string{}, prefix: "docs-1"}
	got := pe.substitute(t, "--addr 127.0.0.1:8085 http://127.0.0.1:8085/x localhost:8080 amqp://guest:guest@127.0.0.1:5672/ --prefix demo --prefix demo2 demo.tasks /demo/turnstile")
	p85, p80 := pe.ports["8085"], pe.ports["8080"]
	if p85 == "" || p80 == "" || p85 == p80 || len(pe.ports) != 2 {
		t.Fatalf("ports %v", pe.ports)
	}
	want := "--addr 127.0.0.1:" + p85 + " http://127.0.0.1:" + p85 + "/x localhost:" + p80 +
		" amqp://guest:guest@127.0.0.1:5672/ --prefix docs-1-demo --prefix docs-1-demo2 docs-1-demo.tasks /demo/turnstile"
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

// Every relative link of README.md, CONTRIBUTING.md and docs/ names a file
// that exists, and an anchor a heading of that page.
func TestDocLinks(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	fence := regexp.MustCompile("(?ms)^```.*?^```")
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading := regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
	anchors := func(page string) map[string]bool {
		src, err := os.ReadFile(page)
		if err != nil {
			return nil
		}
		out := map[string]bool{}
		for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(string(src), ""), -1) {
			a := strings.Map(func(r rune) rune {
				switch {
				case r == ' ':
					return '-'
				case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
					return r
				}
				return -1
			}, strings.ToLower(strings.TrimSpace(m[1])))
			out[a] = true
		}
		return out
	}
	var pages []string
	for _, g := range docPages {
		m, _ := filepath.Glob(filepath.Join(root, g))
		pages = append(pages, m...)
	}
	checked := 0
	for _, page := range pages {
		src, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(fence.ReplaceAllString(string(src), ""), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(target, "#")
			file := page
			if path != "" {
				file = filepath.Join(filepath.Dir(page), path)
			}
			rel, _ := filepath.Rel(root, page)
			if _, err := os.Stat(file); err != nil {
				t.Errorf("%s: link %s: no such file", rel, target)
				continue
			}
			if frag != "" && strings.HasSuffix(file, ".md") && !anchors(file)[frag] {
				t.Errorf("%s: link %s: no heading makes the anchor #%s", rel, target, frag)
			}
			checked++
		}
	}
	if checked < 50 {
		t.Errorf("only %d links checked", checked)
	}
}
