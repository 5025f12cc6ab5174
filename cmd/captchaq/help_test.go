package main

import (
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
)

// Every way of asking for help prints it on stdout (captchaq batch --help
// | less shows it) and exits 0, with nothing on stderr.
func TestHelpOnStdout(t *testing.T) {
	t.Parallel()
	const top = "captchaq solves captchas through a queue that keeps a plan's threads busy.\n"
	batchHelp := "usage: captchaq batch [FILE|-] "
	for _, c := range []struct {
		args  []string
		opens string
	}{
		{[]string{"--help"}, top},
		{[]string{"-h"}, top},
		{[]string{"help"}, top},
		{[]string{"help", "batch"}, batchHelp},
		{[]string{"batch", "--help"}, batchHelp},
		{[]string{"batch", "-h"}, batchHelp},
		{[]string{"help", "dlq"}, "usage: captchaq dlq list|replay "},
	} {
		r := startBinary(t, nil, "", c.args...)
		if code := r.wait(t); code != 0 || !strings.HasPrefix(r.stdout.String(), c.opens) || r.errText() != "" {
			t.Errorf("captchaq %v: exit %d, stdout:\n%s\nstderr:\n%s\nwant exit 0, stdout opening with %q, stderr empty",
				c.args, code, r.stdout.String(), r.errText(), c.opens)
		}
	}
}

// The top-level help names the key and how it is read, the simulator
// used without one, the exit codes and where the docs are.
func TestTopHelpSaysKeySimulatorExitCodesDocs(t *testing.T) {
	t.Parallel()
	r := runWith(t, "", nil, "--help")
	if r.code != 0 {
		t.Fatalf("captchaq --help: exit %d", r.code)
	}
	for _, want := range []string{
		"The provider key comes from CAPTCHAAI_KEY, else from the file named by CAPTCHAAI_KEY_FILE",
		"batch and solve run on the built-in simulator",
		"Exit codes: 0 done, 1 the tool failed (a file, the store, the broker), 2 bad usage or\ninput, 3 the provider refused the account, 4 some tasks got no answer, 130 interrupted.",
		"Docs: README.md and docs/",
		"\n  batch      solve a file of task JSONL",
		"\n  worker     solve tasks from RabbitMQ",
		"\n  completion print a shell completion script",
		"\n  version    print the module version",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("captchaq --help lacks %q:\n%s", want, r.stdout)
		}
	}
}

// A usage error says what is wrong and where help is, on stderr only,
// and exits 2: no wall of usage.
func TestUsageErrorsSayWhatWasMeant(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"batch", "--thread", "5"}, "captchaq batch: unknown flag --thread; did you mean --threads?\nRun 'captchaq batch --help' for the flags.\n"},
		{[]string{"batch", "-thread", "5"}, "captchaq batch: unknown flag --thread; did you mean --threads?\nRun 'captchaq batch --help' for the flags.\n"},
		{[]string{"serve", "--metric-listen", "x"}, "captchaq serve: unknown flag --metric-listen; did you mean --metrics-listen?\nRun 'captchaq serve --help' for the flags.\n"},
		{[]string{"dlq", "list", "--store", "x.db", "--reasn", "EXPIRED"}, "captchaq dlq: unknown flag --reasn; did you mean --reason?\nRun 'captchaq dlq list --help' for the flags.\n"},
		{[]string{"batch", "--frobnicate"}, "captchaq batch: unknown flag --frobnicate\nRun 'captchaq batch --help' for the flags.\n"},
		{[]string{"batch", "--threads", "x"}, "captchaq batch: invalid value \"x\" for flag -threads: parse error\nRun 'captchaq batch --help' for the flags.\n"},
		{[]string{"bach"}, "captchaq: unknown command \"bach\"; did you mean \"batch\"?\nRun 'captchaq --help' for the commands.\n"},
		{[]string{"wroker", "--amqp", "amqp://x"}, "captchaq: unknown command \"wroker\"; did you mean \"worker\"?\nRun 'captchaq --help' for the commands.\n"},
		{[]string{"frob"}, "captchaq: unknown command \"frob\"\nRun 'captchaq --help' for the commands.\n"},
		{[]string{"help", "bach"}, "captchaq help: unknown command \"bach\"; did you mean \"batch\"?\n"},
		{[]string{"--bogus"}, "captchaq: unknown flag: --bogus\nRun 'captchaq --help' for the flags.\n"},
	} {
		r := runWith(t, "", nil, c.args...)
		if r.code != exitUsage || r.stderr != c.stderr || r.stdout != "" {
			t.Errorf("captchaq %v: exit %d, stdout %q, stderr:\n%s\nwant exit 2, no stdout, stderr:\n%s", c.args, r.code, r.stdout, r.stderr, c.stderr)
		}
	}
}

// version and --version print the module version, the commit and the Go
// version the build recorded, as `go version -m` reads them.
func TestVersionFields(t *testing.T) {
	t.Parallel()
	bin := captchaqBinary(t)
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	// go version -m: "PATH: goVERSION", then "\tmod\tMODULE\tVERSION\t…"
	// and "\tbuild\tKEY=VALUE" lines.
	goVersion := strings.TrimSpace(strings.SplitN(string(out), ": ", 2)[1])
	goVersion, _, _ = strings.Cut(goVersion, "\n")
	bi := &debug.BuildInfo{GoVersion: goVersion}
	for line := range strings.Lines(string(out)) {
		f := strings.Split(strings.TrimSpace(line), "\t")
		switch {
		case len(f) >= 3 && f[0] == "mod":
			bi.Main.Version = f[2]
		case len(f) == 2 && f[0] == "build":
			k, v, _ := strings.Cut(f[1], "=")
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: k, Value: v})
		}
	}
	want := formatVersion(bi, runtime.GOOS+"/"+runtime.GOARCH)
	if !strings.HasPrefix(want, "captchaq "+bi.Main.Version+"\ncommit: ") || !strings.HasSuffix(want, "\ngo: "+goVersion+" "+runtime.GOOS+"/"+runtime.GOARCH+"\n") {
		t.Fatalf("go version -m %s reads as\n%s", bin, want)
	}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		r := startBinary(t, nil, "", args...)
		if code := r.wait(t); code != 0 || r.stdout.String() != want || r.errText() != "" {
			t.Errorf("captchaq %v: exit %d, stdout:\n%s\nstderr: %q\nwant exit 0 and\n%s", args, code, r.stdout.String(), r.errText(), want)
		}
	}
}

// formatVersion says (devel) and an unknown commit of an unstamped build,
// and the commit and its modified flag of a stamped one.
func TestFormatVersion(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{
		{"no build information", nil, "captchaq (devel)\ncommit: unknown (the build has no VCS stamp)\ngo: " + runtime.Version() + " linux/amd64\n"},
		{"not stamped", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/captchaq/captchaq", Version: "(devel)"}},
			"captchaq (devel)\ncommit: unknown (the build has no VCS stamp)\ngo: go1.26.8 linux/amd64\n"},
		{"stamped, modified", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20261207152246-bf2be1234567+dirty"}, Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "bf2be12345678901234567890123456789012345"},
			{Key: "vcs.time", Value: "2026-12-07T15:22:46Z"}, {Key: "vcs.modified", Value: "true"},
		}}, "captchaq v0.0.0-20261207152246-bf2be1234567+dirty\ncommit: bf2be12345678901234567890123456789012345 (modified)\ncommit time: 2026-12-07T15:22:46Z\ngo: go1.26.8 linux/amd64\n"},
		{"release", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.4.0"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"}, {Key: "vcs.modified", Value: "false"},
		}}, "captchaq v1.4.0\ncommit: 0123456789abcdef0123456789abcdef01234567\ngo: go1.26.8 linux/amd64\n"},
	} {
		if got := formatVersion(c.bi, "linux/amd64"); got != c.want {
			t.Errorf("%s:\n%s\nwant\n%s", c.name, got, c.want)
		}
	}
}

// `completion bash` prints a script that, run by bash, completes the
// command names and a command's flags (cobra's script asks the binary
// through its __complete command).
func TestCompletionBash(t *testing.T) {
	t.Parallel()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	r := startBinary(t, nil, "", "completion", "bash")
	if code := r.wait(t); code != 0 || !strings.Contains(r.stdout.String(), "complete -o default -F __start_captchaq captchaq") {
		t.Fatalf("captchaq completion bash: exit %d, stderr %q; want 0 and a script that registers __start_captchaq", code, r.errText())
	}
	// bash-completion's _init_completion, reduced to what the script uses.
	const driver = `
_init_completion() { cur=${COMP_WORDS[COMP_CWORD]}; prev=${COMP_WORDS[COMP_CWORD-1]}; words=("${COMP_WORDS[@]}"); cword=$COMP_CWORD; }
comp() { COMP_WORDS=("$BIN" "$@"); COMP_CWORD=$#; COMP_LINE="${COMP_WORDS[*]}"; COMP_POINT=${#COMP_LINE}; __start_captchaq 2>/dev/null; printf '%s\n' "${COMPREPLY[@]}"; }
`
	complete := func(words ...string) []string {
		t.Helper()
		script := r.stdout.String() + driver + "comp " + shellQuote(words) + "\n"
		cmd := exec.Command(bash, "--norc", "--noprofile", "-s")
		cmd.Stdin = strings.NewReader(script)
		cmd.Env = append(cmd.Environ(), "BIN="+captchaqBinary(t))
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("bash completing %q: %v", words, err)
		}
		return strings.Fields(string(out))
	}
	names := append(sortedCommands(), "completion", "help", "version")
	slices.Sort(names)
	if got := complete(""); !slices.Equal(got, names) {
		t.Errorf("captchaq <TAB> = %q, want %q", got, names)
	}
	if got := complete("ba"); !slices.Equal(got, []string{"batch"}) {
		t.Errorf("captchaq ba<TAB> = %q, want batch", got)
	}
	if got := complete("batch", "--thr"); !slices.Equal(got, []string{"--threads"}) {
		t.Errorf("captchaq batch --thr<TAB> = %q, want --threads", got)
	}
	if got := complete("worker", "--metrics-"); !slices.Equal(got, []string{"--metrics-addr"}) {
		t.Errorf("captchaq worker --metrics-<TAB> = %q, want --metrics-addr", got)
	}
	if got := complete("dlq", ""); !slices.Equal(got, []string{"list", "replay"}) {
		t.Errorf("captchaq dlq <TAB> = %q, want list replay", got)
	}
	// dlq's flags are both back ends'.
	if got := complete("dlq", "list", "--a"); !slices.Equal(got, []string{"--all", "--amqp"}) {
		t.Errorf("captchaq dlq list --a<TAB> = %q, want --all --amqp", got)
	}
	if got := complete("dlq", "list", "--s"); !slices.Equal(got, []string{"--sim", "--store"}) {
		t.Errorf("captchaq dlq list --s<TAB> = %q, want --sim --store", got)
	}
}

// shellQuote quotes words for bash.
func shellQuote(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// The zsh and fish scripts are cobra's too, for captchaq.
func TestCompletionZshFish(t *testing.T) {
	t.Parallel()
	for shell, want := range map[string]string{"zsh": "#compdef captchaq\n", "fish": "complete -c captchaq "} {
		r := runWith(t, "", nil, "completion", shell)
		if r.code != 0 || !strings.Contains(r.stdout, want) || r.stderr != "" {
			t.Errorf("captchaq completion %s: exit %d, stderr %q; want 0 and a script with %q", shell, r.code, r.stderr, want)
		}
	}
}
