package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/amqp"
	"github.com/captchaq/captchaq/internal/brokertest"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/sim"
)

// A batch on two simulators through --providers: Turnstile on the main
// plan, hCaptcha (which the main plan does not solve) on the per-solve
// backup; each result names its provider and price, and the summary
// gives the spend by provider.
func TestBatchProviders(t *testing.T) {
	t.Parallel()
	mainSim, mainURL := startFastSim(t, sim.Config{Threads: 5})
	backupSim, backupURL := startFastSim(t, sim.Config{Threads: 5, PricePer1000: 2.5,
		Methods: []string{"hcaptcha", "turnstile", "userrecaptcha", "base64"}})
	file := writeFile(t, "providers.json", fmt.Sprintf(`[
 {"name": "main", "url": %q, "key_env": "CAPTCHAAI_KEY", "threads": 5, "methods": ["base64", "turnstile", "userrecaptcha"]},
 {"name": "backup", "url": %q, "key_env": "BACKUP_KEY", "threads": 5,
  "methods": ["hcaptcha", "turnstile", "userrecaptcha", "base64"],
  "price_per_1000": {"default": 2.5}, "spill_after": "1h", "max_spend_per_hour": 3.00}]`, mainURL, backupURL))
	tasks := turnstileTasks("ts", 6)
	for i := range 4 {
		tasks = append(tasks, captchaq.Task{ID: fmt.Sprintf("hc-%d", i), Method: "hcaptcha",
			Params: map[string]string{"sitekey": "10000000-ffff-ffff-ffff-000000000001", "pageurl": fmt.Sprintf("https://shop.example/hc/%d", i)}})
	}
	in := writeFile(t, "tasks.jsonl", jsonl(t, tasks))
	outPath := filepath.Join(t.TempDir(), "out.jsonl")
	vars := map[string]string{"CAPTCHAAI_KEY": batchKey, "BACKUP_KEY": "backup-Secret-Key-123"}
	r := runWith(t, "", vars, append([]string{"batch", in, "--out", outPath, "--store", "memory", "--providers", file}, fastQueue...)...)
	if r.code != 0 {
		t.Fatalf("batch = %+v", r)
	}
	if strings.Contains(r.stderr, "backup-Secret-Key-123") {
		t.Fatal("the backup key is in the output")
	}
	got := readResults(t, outPath)
	if len(got) != 10 {
		t.Fatalf("%d results", len(got))
	}
	for id, res := range got {
		want, price := "main", 0.0
		if strings.HasPrefix(id, "hc-") {
			want, price = "backup", 0.0025
		}
		if res.Status != captchaq.StatusSolved || res.Provider != want || res.Price != price {
			t.Errorf("%s: %s at %q for %v, want solved at %q for %v", id, res.Status, res.Provider, res.Price, want, price)
		}
	}
	if a, b := mainSim.Stats().Accepted, backupSim.Stats().Accepted; a != 6 || b != 4 {
		t.Errorf("main accepted %d, backup %d; want 6 and 4", a, b)
	}
	want := "; spend by provider: main 6 solved, 0 failed, spent 0.0000; backup 4 solved, 0 failed, spent 0.0100 (2.50 per 1,000); total 0.0100"
	if !strings.Contains(r.stderr, want) {
		t.Errorf("summary lacks %q:\n%s", want, r.stderr)
	}
}

func TestBatchProvidersRefusesBadFile(t *testing.T) {
	t.Parallel()
	file := writeFile(t, "providers.json", `[{"name": "main", "url": "https://ocr.captchaai.com", "key": "inline-Secret"}]`)
	r := runWith(t, "", nil, "batch", "--providers", file, "--store", "memory")
	if r.code != 2 || !strings.Contains(r.stderr, `providers[0] (main).key: a key is never read from the providers file`) ||
		!strings.Contains(r.stderr, `providers[0] (main).key_env: required`) || strings.Contains(r.stderr, "inline-Secret") {
		t.Fatalf("batch = %+v", r)
	}
	r = runWith(t, "", nil, "batch", "--providers", file, "--threads", "5")
	if r.code != 2 || !strings.Contains(r.stderr, "--providers: cannot be combined with --threads: each provider in the file has its url and threads") {
		t.Fatalf("batch with --threads = %+v", r)
	}
}

// serve --providers: in.php takes a type only the backup solves, the
// answer comes back through res.php, and /metrics has each provider's
// series.
func TestServeProviders(t *testing.T) {
	t.Parallel()
	_, mainURL := startFastSim(t, sim.Config{Threads: 5})
	_, backupURL := startFastSim(t, sim.Config{Threads: 5, PricePer1000: 2, Methods: []string{"hcaptcha", "turnstile"}})
	file := writeFile(t, "providers.json", fmt.Sprintf(`[
 {"name": "main", "url": %q, "key_env": "MAIN_KEY", "methods": ["turnstile", "userrecaptcha"]},
 {"name": "backup", "url": %q, "key_file": %q, "methods": ["hcaptcha", "turnstile"], "price_per_1000": {"default": 2}, "spill_after": "1h"}]`,
		mainURL, backupURL, writeFile(t, "backup.key", "backup-file-key\n")))
	clients := writeFile(t, "clients.json", `[{"name":"qa","key":"client-key-1"},{"name":"ops","key":"admin-key-1","admin":true}]`)
	p, m := startProcess(t, captchaqBinary(t), []string{"MAIN_KEY=main-env-key"}, regexp.MustCompile(`msg=serving addr=(127\.0\.0\.1:\d+)`),
		"serve", "--store", "memory", "--clients", clients, "--providers", file, "--listen", "127.0.0.1:0", "--poll-interval", "10ms")
	defer p.stop(t)
	base := "http://" + m[1]
	call := func(path string, v url.Values) string {
		t.Helper()
		resp, err := http.PostForm(base+path, v)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	id, ok := strings.CutPrefix(call("/in.php", url.Values{"key": {"client-key-1"}, "method": {"hcaptcha"},
		"sitekey": {"10000000-ffff-ffff-ffff-000000000001"}, "pageurl": {"https://shop.example/signup"}}), "OK|")
	if !ok {
		t.Fatalf("in.php refused hcaptcha: %s", id)
	}
	var answer string
	testbound.Until(t, "res.php to answer", func() bool {
		answer = call("/res.php", url.Values{"key": {"client-key-1"}, "action": {"get"}, "id": {id}})
		return answer != "CAPCHA_NOT_READY"
	})
	if !strings.HasPrefix(answer, "OK|") {
		t.Fatalf("res.php: %s", answer)
	}
	req, _ := http.NewRequest("GET", base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer admin-key-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`captchaq_provider_tasks_solved_total{provider="backup"} 1`,
		`captchaq_provider_spend_total{provider="backup"} 0.002`,
		`captchaq_provider_healthy{provider="main"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if out := p.output(); strings.Contains(out, "backup-file-key") || strings.Contains(out, "main-env-key") {
		t.Errorf("a key is in the output:\n%s", out)
	}
}

// The fleet on two providers, through the commands: enqueue --providers
// takes hCaptcha (which only the backup solves) and refuses FunCaptcha
// (which none does), naming them; two workers with the same --providers
// file solve every task once, hCaptcha at the backup, Turnstile at main
// (spill_after 1h); a worker without --providers on their prefix exits 2,
// naming both routings; each result names its provider and price; together
// they never have more tasks at a provider than its threads; a worker's
// /metrics has each provider's series.
func TestWorkerProviders(t *testing.T) {
	t.Parallel()
	brokerURL := brokertest.Use(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "test-cli-providers-" + hex.EncodeToString(b[:])
	owners := []string{"prov-cli-1", "prov-cli-2", "prov-cli-plan"}
	t.Cleanup(func() {
		cfg := amqp.Config{URL: brokerURL, Prefix: prefix}
		_ = amqp.DeleteTopology(context.Background(), cfg, owners...)
		_ = amqp.DeleteProviderThreads(context.Background(), cfg, "main", "backup")
	})
	// Both simulators allow far more than the file's threads: only the
	// fleet's pools keep it within them. The same seed: the same ids.
	mainSim, mainURL := startFastSim(t, sim.Config{Threads: 50, Seed: 5, LatencyScale: 0.01})
	backupSim, backupURL := startFastSim(t, sim.Config{Threads: 50, Seed: 5, LatencyScale: 0.01, PricePer1000: 2.5,
		Methods: []string{"hcaptcha", "turnstile", "userrecaptcha", "base64"}})
	file := writeFile(t, "providers.json", fmt.Sprintf(`[
 {"name": "main", "url": %q, "key_env": "CAPTCHAAI_KEY", "threads": 2, "methods": ["base64", "turnstile", "userrecaptcha"]},
 {"name": "backup", "url": %q, "key_env": "BACKUP_KEY", "threads": 3,
  "methods": ["hcaptcha", "turnstile", "userrecaptcha", "base64"],
  "price_per_1000": {"default": 2.5}, "spill_after": "1h"}]`, mainURL, backupURL))
	vars := map[string]string{"CAPTCHAAI_KEY": batchKey, "BACKUP_KEY": "backup-Secret-Key-123"}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	tasks := turnstileTasks("ts", 8)
	for i := range 6 {
		tasks = append(tasks, captchaq.Task{ID: fmt.Sprintf("hc-%d", i), Method: "hcaptcha",
			Params: map[string]string{"sitekey": "10000000-ffff-ffff-ffff-000000000001", "pageurl": fmt.Sprintf("https://shop.example/hc/%d", i)}})
	}
	tasks = append(tasks, captchaq.Task{ID: "fun", Method: "funcaptcha",
		Params: map[string]string{"publickey": "69A21A01-CC7B-B9C6-0F9A-E7FA06677FFC", "pageurl": "https://shop.example/fun"}})
	r := runWith(t, jsonl(t, tasks), nil, "enqueue", "--amqp", brokerURL, "--prefix", prefix, "--providers", file, "-")
	if r.code != exitUsage || !strings.Contains(r.stderr, "enqueued 14 tasks") ||
		!strings.Contains(r.stderr, `stdin:15: captchaq: task "fun": unsupported captcha type`) || !strings.Contains(r.stderr, "(main: base64, turnstile, userrecaptcha; backup: hcaptcha") {
		t.Fatalf("enqueue --providers = %+v", r)
	}

	metricsRE := regexp.MustCompile(`msg="serving metrics" addr=(127\.0\.0\.1:\d+)`)
	metricsAddr := startCommand(t, ctx, vars, metricsRE, "worker", "--amqp", brokerURL, "--prefix", prefix, "--providers", file,
		"--poll-interval", "20ms", "--owner", owners[0], "--metrics-addr", "127.0.0.1:0")
	startCommand(t, ctx, vars, metricsRE, "worker", "--amqp", brokerURL, "--prefix", prefix, "--providers", file,
		"--poll-interval", "20ms", "--owner", owners[1], "--metrics-addr", "127.0.0.1:0")

	// A worker without --providers would use the plan's pool, not theirs:
	// refused, naming both routings and the fix.
	r = runWith(t, "", vars, "worker", "--amqp", brokerURL, "--prefix", prefix, "--api-url", mainURL, "--threads", "2", "--owner", owners[2])
	if r.code != exitUsage || !strings.Contains(r.stderr, "route by providers main (2 threads; base64 turnstile userrecaptcha), backup (3 threads; base64 hcaptcha turnstile userrecaptcha; spill_after 1h0m0s), but this worker by one provider of 2 threads (no --providers)") ||
		!strings.Contains(r.stderr, "rabbitmqctl delete_queue "+prefix+".routing") {
		t.Fatalf("worker without --providers on their prefix = %+v", r)
	}

	r = runWith(t, "", nil, "collect", "--amqp", brokerURL, "--prefix", prefix, "--count", "14")
	if r.code != 0 {
		t.Fatalf("collect = %+v", r)
	}
	got := parseResults(t, r.stdout)
	if len(got) != 14 {
		t.Fatalf("%d results, want 14", len(got))
	}
	for id, res := range got {
		want, price := "main", 0.0
		if strings.HasPrefix(id, "hc-") {
			want, price = "backup", 0.0025
		}
		if res.Status != captchaq.StatusSolved || res.Provider != want || res.Price != price || res.Attempts != 1 {
			t.Errorf("%s: %s at %q for %v in %d attempts, want solved at %q for %v in 1", id, res.Status, res.Provider, res.Price, res.Attempts, want, price)
		}
	}
	ms, bs := mainSim.Stats(), backupSim.Stats()
	if ms.Accepted != 8 || bs.Accepted != 6 || ms.Duplicates != 0 || bs.Duplicates != 0 {
		t.Errorf("main accepted %d, backup %d (duplicates %d, %d); want 8 and 6, none twice", ms.Accepted, bs.Accepted, ms.Duplicates, bs.Duplicates)
	}
	if ms.PeakThreadsInUse > 2 || bs.PeakThreadsInUse > 3 {
		t.Errorf("peak threads at main %d, at backup %d; the file gives them 2 and 3", ms.PeakThreadsInUse, bs.PeakThreadsInUse)
	}

	// A gateway on the same file, with no key: it takes hCaptcha, refuses
	// FunCaptcha, and its store keeps the result's provider and price.
	clients := writeFile(t, "clients.json", `[{"name":"qa","key":"client-key-1"}]`)
	t.Cleanup(func() {
		_ = amqp.DeleteReplies(context.Background(), amqp.Config{URL: brokerURL, Prefix: prefix}, "provgw")
	})
	base := "http://" + startCommand(t, ctx, nil, regexp.MustCompile(`msg=serving addr=(127\.0\.0\.1:\d+)`),
		"serve", "--amqp", brokerURL, "--prefix", prefix, "--providers", file, "--gateway", "provgw", "--store", "memory",
		"--clients", clients, "--listen", "127.0.0.1:0")
	inPHP := func(method string, params url.Values) string {
		t.Helper()
		params.Set("key", "client-key-1")
		params.Set("method", method)
		resp, err := http.PostForm(base+"/in.php", params)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if ans := inPHP("funcaptcha", url.Values{"publickey": {"69A21A01-CC7B-B9C6-0F9A-E7FA06677FFC"}, "pageurl": {"https://shop.example/fun"}}); ans != "ERROR_BAD_PARAMETERS" {
		t.Errorf("in.php funcaptcha through the gateway: %q, want ERROR_BAD_PARAMETERS", ans)
	}
	id, ok := strings.CutPrefix(inPHP("hcaptcha", url.Values{"sitekey": {"10000000-ffff-ffff-ffff-000000000001"}, "pageurl": {"https://shop.example/gw"}}), "OK|")
	if !ok {
		t.Fatalf("in.php hcaptcha through the gateway refused: %s", id)
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/v1/tasks/"+id+"?wait=30s", nil)
	req.Header.Set("Authorization", "Bearer client-key-1")
	gresp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Result captchaq.Result `json:"result"`
	}
	if err := json.NewDecoder(gresp.Body).Decode(&rec); err != nil {
		t.Fatal(err)
	}
	gresp.Body.Close()
	if res := rec.Result; res.Status != captchaq.StatusSolved || res.Provider != "backup" || res.Price != 0.0025 {
		t.Errorf("the gateway's result: %s at %q for %v, want solved at \"backup\" for 0.0025", res.Status, res.Provider, res.Price)
	}

	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`captchaq_provider_healthy{provider="main"} 1`,
		`captchaq_provider_healthy{provider="backup"} 1`,
		`captchaq_provider_threads_in_use{provider="backup"}`,
		`captchaq_fleet_threads_plan 5`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("worker /metrics lacks %s:\n%s", want, body)
		}
	}
}

// A batch on two providers whose main simulator, a process of its own, is
// killed with SIGKILL mid-run: every task still gets its answer, the ones
// in flight there from backup with "abandoned": ["main"].
func TestBatchProvidersMainKilled(t *testing.T) {
	t.Parallel()
	batchMainKilled(t, "in.php", "in.php")
}

// The same with a createTask main and an in.php backup, and the other way
// round: failover between protocols is failover between lanes.
func TestBatchProvidersCreateTaskMainKilled(t *testing.T) {
	t.Parallel()
	batchMainKilled(t, "createtask", "in.php")
}

func TestBatchProvidersMainKilledCreateTaskBackup(t *testing.T) {
	t.Parallel()
	batchMainKilled(t, "in.php", "createtask")
}

// batchMainKilled runs a batch on two providers of the given protocols
// and kills the main one's simulator process mid-run.
func batchMainKilled(t *testing.T, mainProtocol, backupProtocol string) {
	mainProc, m := startProcess(t, captchaqBinary(t), nil, regexp.MustCompile(`listening on (http://127\.0\.0\.1:\d+)`),
		"sim", "--addr", "127.0.0.1:0", "--threads", "4", "--latency-scale", "0.05", "--no-poll-ban")
	backupSim, backupURL := startFastSim(t, sim.Config{Threads: 20, PricePer1000: 1, Methods: []string{"turnstile"}})
	file := writeFile(t, "providers.json", fmt.Sprintf(`[
 {"name": "main", "url": %q, "key_env": "CAPTCHAAI_KEY", "threads": 4, "methods": ["turnstile"], "down_after": "300ms", "protocol": %q},
 {"name": "backup", "url": %q, "key_env": "BACKUP_KEY", "threads": 20, "methods": ["turnstile"], "price_per_1000": {"default": 1}, "spill_after": "1h", "protocol": %q}]`,
		m[1], mainProtocol, backupURL, backupProtocol))
	tasks := turnstileTasks("kill", 24)
	in := writeFile(t, "tasks.jsonl", jsonl(t, tasks))
	outPath := filepath.Join(t.TempDir(), "out.jsonl")
	done := make(chan cliRun, 1)
	go func() {
		done <- runWith(t, "", map[string]string{"CAPTCHAAI_KEY": batchKey, "BACKUP_KEY": "backup-key-1"},
			append([]string{"batch", in, "--out", outPath, "--store", filepath.Join(t.TempDir(), "q.db"), "--providers", file}, fastQueue...)...)
	}()
	// Mid-run: once main has accepted its first tasks.
	for accepted := 0; accepted < 6; {
		resp, err := http.Get(m[1] + "/sim/stats")
		if err != nil {
			t.Fatal(err)
		}
		var st sim.Stats
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		accepted = int(st.Accepted)
		select {
		case r := <-done:
			t.Fatalf("batch ended before main accepted 6 tasks (%d): %+v", accepted, r)
		case <-time.After(5 * time.Millisecond):
		}
	}
	if err := mainProc.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.code != 0 {
		t.Fatalf("batch = %+v", r)
	}
	got := readAllSolved(t, outPath, tasks)
	moved := 0
	for id, res := range got {
		if res.Abandoned != nil {
			moved++
			if len(res.Abandoned) != 1 || res.Abandoned[0] != "main" || res.Provider != "backup" {
				t.Errorf("%s: abandoned %v, solved at %q", id, res.Abandoned, res.Provider)
			}
		}
	}
	want := "[out of routing]"
	if moved > 0 {
		want = fmt.Sprintf("%d moved away when it went down [out of routing]", moved)
	}
	if !strings.Contains(r.stderr, want) {
		t.Errorf("summary lacks %q:\n%s", want, r.stderr)
	}
	if st := backupSim.Stats(); (backupProtocol == "createtask") != (st.Calls.CreateTask > 0) || st.Accepted == 0 {
		t.Errorf("backup (%s) took %d tasks with %d createTask calls", backupProtocol, st.Accepted, st.Calls.CreateTask)
	}
	t.Logf("%d tasks in flight at main when it was killed were solved by backup", moved)
}

// startCommand runs a long-running subcommand in-process until the test
// ends, and returns the first submatch of the first log line that
// matches ready. At the end it must exit 0, and no key of vars may be in
// its log.
func startCommand(t *testing.T, ctx context.Context, vars map[string]string, ready *regexp.Regexp, args ...string) string {
	t.Helper()
	cctx, stop := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	env := &environment{stdin: strings.NewReader(""), stdout: io.Discard, stderr: pw, getenv: func(k string) string { return vars[k] }}
	exit := make(chan int, 1)
	go func() {
		exit <- run(cctx, env, args)
		pw.Close()
	}()
	found, logs := make(chan string, 1), make(chan string, 1)
	go func() {
		var all strings.Builder
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			all.WriteString(sc.Text() + "\n")
			if m := ready.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
		logs <- all.String()
	}()
	t.Cleanup(func() {
		stop()
		code := <-exit
		text := <-logs
		if code != 0 {
			t.Errorf("%s exit %d after cancel, want 0:\n%s", args[0], code, text)
		}
		for _, k := range vars {
			if strings.Contains(text, k) {
				t.Errorf("a key is in the log of %s", args[0])
			}
		}
	})
	select {
	case m := <-found:
		return m
	case code := <-exit:
		pw.Close()
		t.Fatalf("%s exited with %d before it was ready:\n%s", args[0], code, <-logs)
	case <-ctx.Done():
		t.Fatalf("%s never logged a line matching %s", args[0], ready)
	}
	return ""
}

// solve --providers: hCaptcha, which only the backup solves, is solved
// there; Turnstile on main; a type no provider solves is refused with
// exit code 2, naming the providers.
func TestSolveProviders(t *testing.T) {
	t.Parallel()
	mainSim, mainURL := startFastSim(t, sim.Config{Threads: 5})
	backupSim, backupURL := startFastSim(t, sim.Config{Threads: 5, PricePer1000: 2.5, Methods: []string{"hcaptcha", "turnstile"}})
	file := writeFile(t, "providers.json", fmt.Sprintf(`[
 {"name": "main", "url": %q, "key_env": "CAPTCHAAI_KEY", "methods": ["turnstile", "userrecaptcha"]},
 {"name": "backup", "url": %q, "key_env": "BACKUP_KEY", "methods": ["hcaptcha", "turnstile"], "price_per_1000": {"default": 2.5}, "spill_after": "1h"}]`,
		mainURL, backupURL))
	vars := map[string]string{"CAPTCHAAI_KEY": batchKey, "BACKUP_KEY": "backup-Secret-Key-123"}
	r := runWith(t, "", vars, "solve", "--providers", file, "--poll-interval", "10ms", "--method", "hcaptcha",
		"--param", "sitekey=10000000-ffff-ffff-ffff-000000000001", "--param", "pageurl=https://shop.example/signup")
	if r.code != 0 || strings.TrimSpace(r.stdout) == "" || strings.Contains(r.stdout, "\n\n") || !strings.Contains(r.stderr, "solved by backup for 0.0025") {
		t.Fatalf("solve hcaptcha = %+v", r)
	}
	r = runWith(t, "", vars, "solve", "--providers", file, "--poll-interval", "10ms", "--method", "turnstile",
		"--param", "sitekey=0x4AAAAAAAB3x", "--param", "pageurl=https://shop.example/login")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "0.") || !strings.Contains(r.stderr, "solved by main for 0") {
		t.Fatalf("solve turnstile = %+v", r)
	}
	if a, b := mainSim.Stats().Accepted, backupSim.Stats().Accepted; a != 1 || b != 1 {
		t.Errorf("main accepted %d, backup %d; want 1 each", a, b)
	}
	r = runWith(t, "", vars, "solve", "--providers", file, "--method", "funcaptcha",
		"--param", "publickey=69A21A01-CC7B-B9C6-0F9A-E7FA06677FFC", "--param", "pageurl=https://shop.example/fun")
	if r.code != 2 || !strings.Contains(r.stderr, "(main: turnstile, userrecaptcha; backup: hcaptcha, turnstile)") {
		t.Fatalf("solve funcaptcha = %+v", r)
	}
	if r := runWith(t, "", vars, "solve", "--providers", file, "--api-url", mainURL, "--method", "turnstile"); r.code != 2 || !strings.Contains(r.stderr, "--providers: cannot be combined with --api-url: each provider in the file has its url and threads") {
		t.Fatalf("solve --providers --api-url = %+v", r)
	}
}

// Every command that takes --providers refuses it beside each flag its file
// replaces, naming exactly the ones given (even at their default values),
// with the usage exit code; --providers alone gets past that check to
// reading its file, whatever CAPTCHAAI_URL and the key say.
func TestProvidersReplacedFlags(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "providers.json")
	clients := writeFile(t, "clients.json", `[{"name":"qa","key":"client-key-1"}]`)
	base := map[string][]string{
		"batch":  {"batch", "--store", "memory", "--providers", missing},
		"solve":  {"solve", "--method", "turnstile", "--param", "sitekey=0x4AAAAAAAB3x", "--param", "pageurl=https://shop.example/login", "--providers", missing},
		"serve":  {"serve", "--store", "memory", "--clients", clients, "--providers", missing},
		"worker": {"worker", "--amqp", "amqp://guest:guest@127.0.0.1:1/", "--providers", missing},
	}
	const why = ": each provider in the file has its url and threads"
	tests := []struct {
		cmd   string
		extra []string
		named string // the flags the message names; "" for none
	}{
		{"batch", nil, ""},
		{"batch", []string{"--api-url", "http://127.0.0.1:1"}, "--api-url"},
		{"batch", []string{"--threads", "5"}, "--threads"},
		{"batch", []string{"--plan", "BASIC"}, "--plan"},
		{"batch", []string{"--sim"}, "--sim"},
		{"batch", []string{"--sim=false"}, "--sim"},
		{"batch", []string{"--threads", "0", "--api-url="}, "--api-url, --threads"},
		{"batch", []string{"--sim", "--plan", "VIP-1", "--threads", "9", "--api-url", "http://127.0.0.1:1"}, "--api-url, --threads, --plan, --sim"},
		{"solve", nil, ""},
		{"solve", []string{"--api-url", "http://127.0.0.1:1"}, "--api-url"},
		{"solve", []string{"--api-url="}, "--api-url"},
		{"serve", nil, ""},
		{"serve", []string{"--api-url", "http://127.0.0.1:1"}, "--api-url"},
		{"serve", []string{"--threads", "5"}, "--threads"},
		{"serve", []string{"--plan", "BASIC"}, "--plan"},
		{"serve", []string{"--plan", "", "--threads", "0"}, "--threads, --plan"},
		{"worker", nil, ""},
		{"worker", []string{"--api-url", "http://127.0.0.1:1"}, "--api-url"},
		{"worker", []string{"--threads", "5"}, "--threads"},
		{"worker", []string{"--plan", "BASIC"}, "--plan"},
		{"worker", []string{"--api-url", "http://127.0.0.1:1", "--threads", "5", "--plan", "BASIC"}, "--api-url, --threads, --plan"},
	}
	vars := map[string]string{"CAPTCHAAI_KEY": batchKey, "CAPTCHAAI_URL": "http://127.0.0.1:1"}
	for _, tc := range tests {
		args := append(append([]string{}, base[tc.cmd]...), tc.extra...)
		r := runWith(t, "", vars, args...)
		if r.code != 2 {
			t.Errorf("%v: exit %d, want 2; stderr: %s", args, r.code, r.stderr)
			continue
		}
		if tc.named == "" {
			if want := "--providers: cannot read"; !strings.Contains(r.stderr, want) || strings.Contains(r.stderr, "cannot be combined") {
				t.Errorf("%v: stderr %q, want %q and no conflict", args, r.stderr, want)
			}
			continue
		}
		if want := "captchaq " + tc.cmd + ": --providers: cannot be combined with " + tc.named + why + "\n"; r.stderr != want {
			t.Errorf("%v: stderr\n%q, want\n%q", args, r.stderr, want)
		}
	}
}

// An empty --providers is no file: it replaces nothing.
func TestCheckProvidersAloneEmptyFile(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("batch", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	p := addProvidersFlag(fs, "threads")
	fs.Int("threads", 0, "")
	if err := fs.Parse([]string{"--providers=", "--threads", "5"}); err != nil {
		t.Fatal(err)
	}
	if err := p.alone(); err != nil {
		t.Fatalf("alone = %v, want nil", err)
	}
}
