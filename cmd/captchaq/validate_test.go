package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/tasktest"
	"github.com/captchaq/captchaq/sim"
)

// The shared validation table through the CLI's doors: batch, solve and
// enqueue accept and refuse the same tasks with the same codes.

func caseID(i int) string { return fmt.Sprintf("case-%d", i) }

func TestValidateTableBatch(t *testing.T) {
	t.Parallel()
	_, base := startFastSim(t, sim.Config{Threads: 5})
	var lines []string
	for i, c := range tasktest.Cases {
		lines = append(lines, c.Line(caseID(i)))
	}
	in := writeFile(t, "tasks.jsonl", strings.Join(lines, "\n")+"\n")
	r := runWith(t, "", keyEnv, append([]string{"batch", in, "--store", "memory", "--api-url", base}, fastQueue...)...)
	if r.code != exitTasksFailed {
		t.Fatalf("batch = %+v; want exit %d (some lines refused)", r, exitTasksFailed)
	}
	got := parseResults(t, r.stdout)
	for i, c := range tasktest.Cases {
		g := got[caseID(i)]
		switch {
		case c.Code == "" && g.Status != captchaq.StatusSolved:
			t.Errorf("%s: %+v, want solved", c.Name, g)
		case c.Code != "" && (g.Status != captchaq.StatusFailed || g.ErrorCode != c.Code || !strings.Contains(g.Error, c.Field)):
			t.Errorf("%s: %+v, want failed %s naming %q", c.Name, g, c.Code, c.Field)
		}
	}
}

func TestValidateTableSolve(t *testing.T) {
	t.Parallel()
	_, base := startFastSim(t, sim.Config{Threads: 5})
	for _, c := range tasktest.Cases {
		args := []string{"solve", "--api-url", base, "--method", c.Method, "--poll-interval", "20ms"}
		for k, v := range c.Params {
			args = append(args, "--param", k+"="+v)
		}
		r := runWith(t, "", keyEnv, args...)
		switch {
		case c.Code == "" && (r.code != 0 || r.stdout == ""):
			t.Errorf("%s: %+v, want a token", c.Name, r)
		case c.Code != "" && (r.code != exitUsage || !strings.Contains(r.stderr, c.Field)):
			t.Errorf("%s: %+v, want exit 2 naming %q", c.Name, r, c.Field)
		}
	}
}

func TestValidateTableEnqueue(t *testing.T) {
	t.Parallel()
	cfg, ctx := cliTopology(t)
	var lines []string
	valid := 0
	for i, c := range tasktest.Cases {
		lines = append(lines, c.Line(caseID(i)))
		if c.Code == "" {
			valid++
		}
	}
	r := runWith(t, strings.Join(lines, "\n")+"\n", nil, "enqueue", "--amqp", cfg.URL, "--prefix", cfg.Prefix, "-")
	if r.code != exitUsage || !strings.Contains(r.stderr, fmt.Sprintf("enqueued %d tasks", valid)) {
		t.Fatalf("enqueue = %+v; want exit 2 and %d tasks enqueued", r, valid)
	}
	for i, c := range tasktest.Cases {
		if c.Code == "" {
			continue
		}
		want := fmt.Sprintf("stdin:%d: ", i+1)
		line := ""
		for _, l := range strings.Split(r.stderr, "\n") {
			if strings.HasPrefix(l, want) {
				line = l
			}
		}
		if !strings.Contains(line, c.Field) {
			t.Errorf("%s: stderr line %q; want %q naming %q", c.Name, line, want, c.Field)
		}
	}
	// Only the valid tasks are on the broker.
	n := runWith(t, "", nil, "stats", "--amqp", cfg.URL, "--prefix", cfg.Prefix, "--json", "--window", "100ms")
	if n.code != 0 || !strings.Contains(n.stdout, fmt.Sprintf(`"ready":%d`, valid)) || !strings.Contains(n.stderr, "sampling for 100ms") {
		t.Errorf("stats = %+v; want %d ready tasks", n, valid)
	}
	_ = ctx
}
