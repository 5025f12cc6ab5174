package main

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/server"
)

// The operator's files shipped in deploy/: Prometheus alert rules (with
// promtool unit tests) and a Grafana board. These tests check that they
// name only series that serve and the worker really export.

const deployDir = "../../deploy"

// needTool finds a command, or skips (fails under CI=true, where .ci/run
// installs it).
func needTool(t *testing.T, name, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not found: CI needs the Debian package %s (.ci/run installs it)", name, pkg)
		}
		t.Skipf("%s not found (apt-get install %s)", name, pkg)
	}
	return path
}

// depthBackend stands for a gateway: a Backend with broker queues, so the
// server registers the broker's series too. Only what New and a scrape
// call is implemented.
type depthBackend struct{ server.Backend }

func (depthBackend) Attach(map[string]int, func(captchaq.Result)) error { return nil }
func (depthBackend) Metrics() captchaq.Metrics                          { return captchaq.Metrics{} }
func (depthBackend) QueueDepths(context.Context) (map[string]int, error) {
	return map[string]int{"captcha.tasks": 0}, nil
}

type heldSource struct{}

func (heldSource) Metrics() captchaq.Metrics { return captchaq.Metrics{} }

// exportedSeries returns every series name that the registries of serve
// (with a local queue and as a gateway) and of a worker can export: each
// described metric, and a histogram's _bucket, _sum and _count.
func exportedSeries(t *testing.T) map[string]bool {
	t.Helper()
	pc, err := provider.NewClient(provider.ClientConfig{BaseURL: "http://127.0.0.1:1", Key: "deploy-test-key"})
	if err != nil {
		t.Fatal(err)
	}
	clients := []server.Client{{Name: "qa", Key: "deploy-test-client"}}
	local, err := server.New(server.Config{Queue: captchaq.Config{Provider: pc}, Clients: clients})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { local.Queue().Close() })
	gateway, err := server.New(server.Config{Backend: depthBackend{}, Clients: clients})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	for _, reg := range []*prometheus.Registry{local.Registry(), gateway.Registry(), workerRegistry(heldSource{}, func() int { return 0 }, func() (int, int, int, bool) { return 0, 1, 0, true })} {
		ch := make(chan *prometheus.Desc)
		go func() { reg.Describe(ch); close(ch) }()
		for d := range ch {
			m := fqName.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("no name in %s", d)
			}
			names[m[1]] = true
		}
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			if f.GetType() == dto.MetricType_HISTOGRAM {
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					names[f.GetName()+suffix] = true
				}
			}
		}
	}
	// The list is the code's: a few it must hold, as a check on the
	// reading above.
	for _, n := range []string{"captchaq_threads_in_use", "captchaq_client_tasks_inflight", "captchaq_broker_queue_ready", "captchaq_worker_tasks_held", "captchaq_http_request_duration_seconds_bucket"} {
		if !names[n] {
			t.Fatalf("%s missing from the registries' series %v", n, slices.Sorted(maps.Keys(names)))
		}
	}
	return names
}

var seriesName = regexp.MustCompile(`captchaq_[a-zA-Z0-9_]+`)

// unknownSeries returns the captchaq_ series that text names and the code
// does not export.
func unknownSeries(text string, exported map[string]bool) []string {
	var out []string
	for _, n := range seriesName.FindAllString(text, -1) {
		if !exported[n] && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// TestGrafanaBoard: deploy/grafana/captchaq.json is valid JSON, a board
// with panels, every panel has at least one query, and every query (and
// template variable) names at least one series and only series that
// serve or the worker export.
func TestGrafanaBoard(t *testing.T) {
	t.Parallel()
	exported := exportedSeries(t)
	raw, err := os.ReadFile(filepath.Join(deployDir, "grafana", "captchaq.json"))
	if err != nil {
		t.Fatal(err)
	}
	var board struct {
		UID    string `json:"uid"`
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &board); err != nil {
		t.Fatalf("captchaq.json: %v", err)
	}
	if board.UID != "captchaq" || board.Title == "" {
		t.Errorf("board uid %q title %q", board.UID, board.Title)
	}
	queries := 0
	for _, p := range board.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			queries++
			if len(seriesName.FindAllString(q.Expr, -1)) == 0 {
				t.Errorf("panel %q: query %q names no captchaq series", p.Title, q.Expr)
			}
			if u := unknownSeries(q.Expr, exported); len(u) > 0 {
				t.Errorf("panel %q: query %q names %v, which the code does not export", p.Title, q.Expr, u)
			}
		}
	}
	for _, v := range board.Templating.List {
		if u := unknownSeries(v.Definition, exported); len(u) > 0 {
			t.Errorf("variable %q: %q names %v, which the code does not export", v.Name, v.Definition, u)
		}
	}
	if queries < 15 {
		t.Errorf("%d queries on the board, want the 15 or more it was built with", queries)
	}
}

// TestAlertRules: promtool accepts deploy/prometheus/alerts.yml and its
// unit tests (alerts_test.yml) pass; the rules and tests name only series
// the code exports.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	exported := exportedSeries(t)
	dir := filepath.Join(deployDir, "prometheus")
	for _, f := range []string{"alerts.yml", "alerts_test.yml"} {
		raw, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if u := unknownSeries(string(raw), exported); len(u) > 0 {
			t.Errorf("%s names %v, which the code does not export", f, u)
		}
	}
	promtool := needTool(t, "promtool", "prometheus")
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
