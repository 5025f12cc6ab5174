package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/sim"
)

// promSample is one series of a Prometheus instant query.
type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

func (s promSample) float(t *testing.T) float64 {
	t.Helper()
	str, _ := s.Value[1].(string)
	v, err := strconv.ParseFloat(str, 64)
	if err != nil {
		t.Fatalf("sample value %v: %v", s.Value, err)
	}
	return v
}

// promAPI asks a Prometheus at base.
type promAPI struct {
	t    *testing.T
	base string
}

func (p promAPI) get(path string, v url.Values, out any) {
	p.t.Helper()
	resp, err := http.Get(p.base + path + "?" + v.Encode())
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil || env.Status != "success" {
		p.t.Fatalf("prometheus %s %v: HTTP %d %s", path, v, resp.StatusCode, body)
	}
	if err := json.Unmarshal(env.Data, out); err != nil {
		p.t.Fatalf("prometheus %s: %v in %s", path, err, env.Data)
	}
}

// query runs an instant query.
func (p promAPI) query(expr string) []promSample {
	p.t.Helper()
	var data struct {
		Result []promSample `json:"result"`
	}
	p.get("/api/v1/query", url.Values{"query": {expr}}, &data)
	return data.Result
}

// waitFor runs expr until want accepts its result (testbound.Until).
func (p promAPI) waitFor(what, expr string, want func([]promSample) bool) []promSample {
	p.t.Helper()
	var got []promSample
	if !testbound.Eventually(func() bool { got = p.query(expr); return want(got) }) {
		p.t.Fatalf("%s: %s still answers %+v after %v", what, expr, got, testbound.Bound)
	}
	return got
}

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestPrometheusScrapesServeAndWorker runs a real Prometheus (Debian's
// package) on loopback with a generated config and the shipped alert
// rules, scraping `captchaq serve --amqp` (with an admin key as Bearer)
// and `captchaq worker` (on the real broker) once a second while 20 tasks
// are solved against the simulator. Prometheus's HTTP API then shows both
// targets up, the solved counters of both moving from 0 to 20, the
// client's and the broker's series, threads taken on the worker at some
// scrape, and every alert rule loaded and evaluated without error.
func TestPrometheusScrapesServeAndWorker(t *testing.T) {
	t.Parallel()
	promBin := needTool(t, "prometheus", "prometheus")
	const owner, workerKey, clientKey, adminKey = "prom-worker", "prom-test-provider-key", "prom-client-key-1", "prom-admin-key-01"
	f := newProcessFleet(t, "test-prom-", sim.Config{Threads: 10, LatencyScale: 0.2, Seed: 41, PollBan: sim.PollBan{Disabled: true}})
	clients := writeFile(t, "clients.json", `[{"name":"qa","key":"`+clientKey+`"},{"name":"ops","key":"`+adminKey+`","admin":true}]`)

	worker, wm := f.worker(owner, workerKey, regexp.MustCompile(`msg="serving metrics" addr=(127\.0\.0\.1:\d+)`),
		"--poll-interval", "50ms", "--metrics-addr", "127.0.0.1:0")
	serve, base, _ := f.serve(filepath.Join(t.TempDir(), "gateway.db"), clients)
	serveAddr, workerAddr := strings.TrimPrefix(base, "http://"), wm[1]

	rules, err := filepath.Abs(filepath.Join(deployDir, "prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: captchaq-serve
    authorization: {type: Bearer, credentials: %q}
    static_configs: [{targets: [%q]}]
  - job_name: captchaq-worker
    static_configs: [{targets: [%q]}]
`, rules, adminKey, serveAddr, workerAddr)
	promAddr := freeAddr(t)
	prom, _ := startProcess(t, promBin, nil, regexp.MustCompile(`Server is ready to receive web requests`),
		"--config.file="+writeFile(t, "prometheus.yml", config), "--storage.tsdb.path="+filepath.Join(t.TempDir(), "tsdb"),
		"--web.listen-address="+promAddr, "--log.level=info")
	api := promAPI{t: t, base: "http://" + promAddr}

	// Both targets up before any task: the counters start at 0 there.
	api.waitFor("both targets up", `up{job=~"captchaq-serve|captchaq-worker"} == 1`, func(r []promSample) bool { return len(r) == 2 })
	api.waitFor("solved counters at 0", `captchaq_tasks_solved_total == 0`, func(r []promSample) bool { return len(r) == 2 })

	// 20 tasks through serve's API; each is solved by the worker.
	var tasks []string
	for i := range 20 {
		tasks = append(tasks, fmt.Sprintf(`{"id":"p-%02d","method":"turnstile","params":{"sitekey":"0x4AAA%02d","pageurl":"https://shop.example/prom/%d"}}`, i, i, i))
	}
	req, _ := http.NewRequest("POST", "http://"+serveAddr+"/v1/tasks", strings.NewReader("["+strings.Join(tasks, ",")+"]"))
	req.Header.Set("Authorization", "Bearer "+clientKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /v1/tasks: HTTP %d %s\n%s", resp.StatusCode, body, serve.output())
	}

	// The series move: from 0 to 20 on both, as Prometheus saw them.
	for _, job := range []string{"captchaq-serve", "captchaq-worker"} {
		api.waitFor(job+" solved 20", `captchaq_tasks_solved_total{job="`+job+`"} == 20`, func(r []promSample) bool { return len(r) == 1 })
		r := api.query(`min_over_time(captchaq_tasks_solved_total{job="` + job + `"}[10m])`)
		if len(r) != 1 || r[0].float(t) != 0 {
			t.Errorf("%s: the lowest solved count Prometheus holds is %+v, want 0 (the series moved from 0 to 20)", job, r)
		}
	}
	api.waitFor("the client's solved count", `captchaq_client_tasks_solved_total{job="captchaq-serve",client="qa"} == 20`, func(r []promSample) bool { return len(r) == 1 })
	if r := api.query(`max_over_time(captchaq_threads_in_use{job="captchaq-worker"}[10m])`); len(r) != 1 || r[0].float(t) < 1 {
		t.Errorf("threads in use on the worker never above 0 at a scrape: %+v", r)
	}
	if r := api.query(`captchaq_provider_requests_total{job="captchaq-worker"}`); len(r) != 1 || r[0].float(t) < 40 {
		t.Errorf("provider requests %+v, want at least 40 (a submit and a poll per task)", r)
	}
	if r := api.query(`captchaq_threads_plan{job="captchaq-worker"}`); len(r) != 1 || r[0].float(t) != 5 {
		t.Errorf("worker's plan %+v, want 5", r)
	}
	if r := api.query(`captchaq_broker_queue_ready{job="captchaq-serve",queue="` + f.prefix + `.tasks"}`); len(r) != 1 {
		t.Errorf("serve's broker series for %s.tasks: %+v", f.prefix, r)
	}
	if r := api.query(`sum(captchaq_http_requests_total{job="captchaq-serve",route="tasks_create",code="202"})`); len(r) != 1 || r[0].float(t) != 1 {
		t.Errorf("serve counted %+v task creations with 202, want 1", r)
	}

	// Every shipped rule is loaded and has been evaluated without error.
	var names, bad []string
	if !testbound.Eventually(func() bool {
		var data struct {
			Groups []struct {
				Rules []struct {
					Name, Health, LastError string
				} `json:"rules"`
			} `json:"groups"`
		}
		api.get("/api/v1/rules", nil, &data)
		names, bad = nil, nil
		for _, g := range data.Groups {
			for _, r := range g.Rules {
				names = append(names, r.Name)
				if r.Health != "ok" {
					bad = append(bad, r.Name+": "+r.Health+" "+r.LastError)
				}
			}
		}
		return len(names) == 7 && len(bad) == 0
	}) {
		t.Fatalf("rules loaded %v, not healthy %v, want the 7 of alerts.yml healthy", names, bad)
	}
	// Nothing is wrong in this run: no alert is firing or pending.
	if r := api.query(`ALERTS`); len(r) != 0 {
		t.Errorf("alerts during a healthy run: %+v", r)
	}

	prom.stop(t)
	serve.stop(t)
	worker.stop(t)
	if s := f.sim.Stats(); s.Accepted != 20 || s.Duplicates != 0 {
		t.Errorf("simulator accepted %d (duplicates %d), want 20 and 0", s.Accepted, s.Duplicates)
	}
	for _, p := range []*process{serve, worker, prom} {
		if strings.Contains(p.output(), workerKey) {
			t.Errorf("the provider key is in the logs:\n%s", p.output())
		}
	}
}
