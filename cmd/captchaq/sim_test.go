package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestSimServesUntilCancelled runs `captchaq sim` in-process on a free port,
// learns its URL from the first stderr line, uses it and stops it by
// cancelling the context as SIGINT/SIGTERM would.
func TestSimServesUntilCancelled(t *testing.T) {
	// Not parallel: goleak counts every goroutine of the process, and a
	// parallel test's connections would read as this one's leaks.
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lines, code := runSimCmd(ctx, "--addr", "127.0.0.1:0", "--threads", "7", "--key", "k1", "--instant", "--mix", "fast")
	if !lines.Scan() {
		t.Fatalf("no output from captchaq sim: %v", lines.Err())
	}
	first := lines.Text()
	rest := make(chan string, 1)
	go func() {
		var b strings.Builder
		for lines.Scan() {
			b.WriteString(lines.Text() + "\n")
		}
		rest <- b.String()
	}()
	base := regexp.MustCompile(`http://127\.0\.0\.1:\d+`).FindString(first)
	if base == "" {
		t.Fatalf("first line %q carries no base URL", first)
	}
	if !strings.Contains(first, "(threads 7, the fast mix's solve times, latency scale 1,") {
		t.Fatalf("first line %q does not give the threads and the mix", first)
	}
	if strings.Contains(first, "k1") {
		t.Fatalf("the key shows in the output: %q", first)
	}
	if !regexp.MustCompile(`, seed \d+\); demo site at ` + regexp.QuoteMeta(base) + `/demo/$`).MatchString(first) {
		t.Fatalf("first line %q does not end with the seed and the demo site's address", first)
	}
	if resp, err := http.Get(base + "/"); err != nil {
		t.Fatal(err)
	} else {
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(page), `href="/demo/turnstile"`) {
			t.Fatalf("GET / answered %d %.200q, want the demo site's index", resp.StatusCode, page)
		}
	}

	get := func(query string) string {
		resp, err := http.Get(base + "/res.php?" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	var info struct {
		Request struct {
			Threads int `json:"threads"`
		} `json:"request"`
	}
	if err := json.Unmarshal([]byte(get("key=k1&action=threadsinfo&json=1")), &info); err != nil || info.Request.Threads != 7 {
		t.Fatalf("threadsinfo: %+v %v, want 7 threads", info, err)
	}
	if got := get("key=k2&action=getbalance"); got != "ERROR_WRONG_USER_KEY" {
		t.Fatalf("another key: %q", got)
	}

	cancel()
	if c := <-code; c != 0 {
		t.Fatalf("exit code %d", c)
	}
	if out := <-rest; !strings.Contains(out, "stopped") || strings.Contains(out, "warning") {
		t.Fatalf("closing output %q", out)
	}
	http.DefaultClient.CloseIdleConnections()
}

// On an address beyond loopback sim says what anyone who reaches it can
// do, and with CAPTCHAQ_SIM_ADMIN_KEY its /sim/ endpoints need that key.
func TestSimBeyondLoopback(t *testing.T) {
	// Not parallel: goleak counts every goroutine of the process, and a
	// parallel test's connections would read as this one's leaks.
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, adminKey := range []string{"", "sim-admin-secret"} {
		ctx, cancel := context.WithCancel(context.Background())
		pr, pw := io.Pipe()
		getenv := func(k string) string {
			if k == "CAPTCHAQ_SIM_ADMIN_KEY" {
				return adminKey
			}
			return ""
		}
		env := &environment{stdin: strings.NewReader(""), stdout: io.Discard, stderr: pw, getenv: getenv}
		code := make(chan int, 1)
		go func() {
			code <- run(ctx, env, []string{"sim", "--addr", "0.0.0.0:0", "--instant"})
			pw.Close()
		}()
		// The lines as they come; a line that does not come within a
		// minute (a bound, not a measure) reads as empty, so a missing
		// warning fails the test instead of holding it until sim exits.
		lines := make(chan string)
		go func() {
			sc := bufio.NewScanner(pr)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
			io.Copy(io.Discard, pr)
		}()
		next := func() string {
			select {
			case l := <-lines:
				return l
			case <-time.After(time.Minute):
				return ""
			}
		}
		first := next()
		second := next()
		go func() {
			for range lines { // the rest, until sim exits
			}
		}()
		// The listener on every address shows as 0.0.0.0 or [::].
		port := regexp.MustCompile(`http://(0\.0\.0\.0|\[::\]):(\d+)`).FindStringSubmatch(first)
		if port == nil {
			cancel()
			t.Fatalf("first line %q carries no URL of every address", first)
		}
		port = port[1:]
		wantAdmin := "/sim/account, /sim/stats/reset and /sim/unban answer anyone: export CAPTCHAQ_SIM_ADMIN_KEY to require a key there"
		if adminKey != "" {
			wantAdmin = "/sim/ needs the admin key from CAPTCHAQ_SIM_ADMIN_KEY"
		}
		if want := "captchaq sim: warning: listening on " + port[0] + ":" + port[1] + ", beyond loopback: anyone who reaches it can submit tasks, and it calls their pingback URLs, whatever address they name; " + wantAdmin + ". Give --addr 127.0.0.1:PORT unless other machines must reach it."; second != want {
			t.Errorf("second line:\n%s\nwant:\n%s", second, want)
		}
		if strings.Contains(first+second, "sim-admin-secret") {
			t.Errorf("the admin key shows in the output")
		}
		admin := func(method, path, key string) int {
			req, _ := http.NewRequest(method, "http://127.0.0.1:"+port[1]+path, strings.NewReader("bad_key=1"))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			if key != "" {
				req.Header.Set("Authorization", "Bearer "+key)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		wantOpen := http.StatusOK
		if adminKey != "" {
			wantOpen = http.StatusUnauthorized
		}
		if got := admin("GET", "/sim/stats", ""); got != wantOpen {
			t.Errorf("admin key %q: /sim/stats without a key: HTTP %d, want %d", adminKey, got, wantOpen)
		}
		if got := admin("POST", "/sim/account", "wrong-key"); got != wantOpen {
			t.Errorf("admin key %q: POST /sim/account with a wrong key: HTTP %d, want %d", adminKey, got, wantOpen)
		}
		if adminKey != "" {
			if got := admin("GET", "/sim/stats", adminKey); got != http.StatusOK {
				t.Errorf("/sim/stats with the admin key: HTTP %d", got)
			}
		}
		cancel()
		if c := <-code; c != 0 {
			t.Fatalf("exit code %d", c)
		}
		http.DefaultClient.CloseIdleConnections()
	}
}

func TestSimHelpAndBadFlags(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	env := &environment{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, getenv: func(string) string { return "" }}
	if c := run(context.Background(), env, []string{"sim", "--help"}); c != 0 {
		t.Fatalf("--help exit code %d", c)
	}
	for _, flag := range []string{"-no-slot-answer", "-latency-scale", "-unsolvable-rate", "-fault-5xx", "-fault-drop", "-fault-slow", "-no-bulk", "-poll-ban-max", "-seed", "-threads", "-key", "-addr", "-methods", "-price"} {
		if !strings.Contains(stdout.String(), flag) {
			t.Errorf("--help does not list %s", flag)
		}
	}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"sim", "--threads", "0"}, "--threads"},
		{[]string{"sim", "--unsolvable-rate", "2"}, "UnsolvableRate"},
		{[]string{"sim", "--no-slot-answer", "NOPE"}, "NoSlotAnswer"},
		{[]string{"sim", "extra"}, "unexpected argument"},
		{[]string{"sim", "--methods", "hcaptcha,keycaptcha"}, `--methods: "keycaptcha" is not a method the simulator knows`},
		{[]string{"sim", "--price", "-1"}, "--price is -1"},
		{[]string{"sim", "--mix", "slow"}, `--mix "slow": use one of fast, realistic, short`},
	}
	for _, tt := range tests {
		stderr.Reset()
		if c := run(context.Background(), env, tt.args); c != 2 {
			t.Errorf("%v: exit code %d, want 2", tt.args, c)
		}
		if !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("%v: message %q does not name %s", tt.args, stderr.String(), tt.want)
		}
	}
}

// Without --seed each run of sim has a seed of its own (printed), so its
// ids and tokens differ from the last run's, as a provider's do; --seed
// gives the same run again.
func TestSimSeedsEachRun(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	seedOf := func(args ...string) string {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		sc, code := runSimCmd(ctx, append([]string{"--addr", "127.0.0.1:0", "--instant"}, args...)...)
		if !sc.Scan() {
			t.Fatalf("no output from captchaq sim: %v", sc.Err())
		}
		m := regexp.MustCompile(`, seed (\d+)\)`).FindStringSubmatch(sc.Text())
		cancel()
		go func() {
			for sc.Scan() {
			}
		}()
		if c := <-code; c != 0 {
			t.Fatalf("exit code %d", c)
		}
		if m == nil {
			t.Fatalf("first line %q names no seed", sc.Text())
		}
		return m[1]
	}
	if a, b := seedOf(), seedOf(); a == b {
		t.Errorf("two runs without --seed both seeded %s", a)
	}
	if s := seedOf("--seed", "42"); s != "42" {
		t.Errorf("--seed 42 ran with seed %s", s)
	}
	http.DefaultClient.CloseIdleConnections()
}

// runSimCmd runs `captchaq sim ARGS` in-process until ctx ends: its stderr
// line by line, and its exit code once it returns.
func runSimCmd(ctx context.Context, args ...string) (*bufio.Scanner, <-chan int) {
	pr, pw := io.Pipe()
	env := &environment{stdin: strings.NewReader(""), stdout: io.Discard, stderr: pw, getenv: func(string) string { return "" }}
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, env, append([]string{"sim"}, args...))
		pw.Close()
	}()
	return bufio.NewScanner(pr), code
}
