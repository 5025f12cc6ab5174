package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/sim"
)

// mixedTasks are n Turnstiles and reCAPTCHAs of the simulator's demo
// sites, each on a host of its own (siteverify names the host a token was
// solved for), and n images each asking for a text of its own length.
func mixedTasks(n int) []captchaq.Task {
	var tasks []captchaq.Task
	for i := range n {
		tasks = append(tasks,
			captchaq.Task{ID: fmt.Sprintf("ts-%d", i), Method: "turnstile",
				Params: map[string]string{"sitekey": sim.DemoTurnstile.SiteKey, "pageurl": fmt.Sprintf("https://ts%d.shop.example/login", i)}},
			captchaq.Task{ID: fmt.Sprintf("rc-%d", i), Method: "userrecaptcha",
				Params: map[string]string{"googlekey": sim.DemoRecaptcha.SiteKey, "pageurl": fmt.Sprintf("https://rc%d.shop.example/signup", i)}},
			captchaq.Task{ID: fmt.Sprintf("img-%d", i), Method: "base64",
				Params: map[string]string{"body": "R0lGODlhAQABAAAAACw=", "numeric": "1", "min_len": fmt.Sprint(4 + i%5), "max_len": fmt.Sprint(4 + i%5)}})
	}
	return tasks
}

// checkOwnTokens asks the simulator's siteverify about every token: each
// is accepted (once) for the host of its own task; each image's text has
// its own task's length.
func checkOwnTokens(t *testing.T, simURL string, tasks []captchaq.Task, got map[string]captchaq.Result) {
	t.Helper()
	for _, task := range tasks {
		res := got[task.ID]
		if task.Method == "base64" {
			if fmt.Sprint(len(res.Token)) != task.Params["min_len"] || strings.Trim(res.Token, "0123456789") != "" {
				t.Errorf("%s: text %q, want %s digits", task.ID, res.Token, task.Params["min_len"])
			}
			continue
		}
		path, secret := "/turnstile/v0/siteverify", sim.DemoTurnstile.Secret
		if task.Method == "userrecaptcha" {
			path, secret = "/recaptcha/api/siteverify", sim.DemoRecaptcha.Secret
		}
		resp, err := http.PostForm(simURL+path, url.Values{"secret": {secret}, "response": {res.Token}})
		if err != nil {
			t.Fatal(err)
		}
		var v struct {
			Success  bool   `json:"success"`
			Hostname string `json:"hostname"`
		}
		err = json.NewDecoder(resp.Body).Decode(&v)
		resp.Body.Close()
		u, _ := url.Parse(task.Params["pageurl"])
		if err != nil || !v.Success || v.Hostname != u.Hostname() {
			t.Errorf("%s: siteverify of its token: %+v (%v), want success for %s", task.ID, v, err, u.Hostname())
		}
	}
}

// batch --providers with a createTask provider: one simulator speaks both
// protocols on one port; images go to the in.php provider, Turnstile and
// reCAPTCHA to the createTask one, and every task gets its own token.
func TestBatchProvidersCreateTask(t *testing.T) {
	t.Parallel()
	s, simURL := startFastSim(t, sim.Config{Threads: 40})
	file := writeFile(t, "providers.json", fmt.Sprintf(`[
 {"name": "captchaai", "url": %q, "key_env": "CAPTCHAAI_KEY", "threads": 10, "methods": ["base64", "post"]},
 {"name": "capmonster", "url": %q, "key_env": "CM_KEY", "protocol": "createtask", "threads": 20, "methods": ["turnstile", "userrecaptcha"]}]`, simURL, simURL))
	tasks := mixedTasks(8)
	in := writeFile(t, "tasks.jsonl", jsonl(t, tasks))
	outPath := filepath.Join(t.TempDir(), "out.jsonl")
	r := runWith(t, "", map[string]string{"CAPTCHAAI_KEY": batchKey, "CM_KEY": "cm-Secret-Key-0042"},
		append([]string{"batch", in, "--out", outPath, "--store", "memory", "--providers", file}, fastQueue...)...)
	if r.code != 0 || strings.Contains(r.stderr, "cm-Secret-Key-0042") {
		t.Fatalf("batch = %+v", r)
	}
	got := readAllSolved(t, outPath, tasks)
	for id, res := range got {
		want := "capmonster"
		if strings.HasPrefix(id, "img-") {
			want = "captchaai"
		}
		if res.Provider != want {
			t.Errorf("%s solved at %q, want %q", id, res.Provider, want)
		}
	}
	checkOwnTokens(t, simURL, tasks, got)
	st := s.Stats()
	if st.Accepted != 24 || st.Calls.CreateTask < 16+16 {
		t.Errorf("simulator: %d accepted, calls %+v; want 24, with the 16 token tasks created and polled by createTask", st.Accepted, st.Calls)
	}
}

// Spill-over from an in.php provider to a createTask one at spill_after:
// tasks that wait for the main plan's two threads longer go to the
// createTask provider, exactly as between two in.php providers.
func TestBatchProvidersSpillToCreateTask(t *testing.T) {
	t.Parallel()
	s, simURL := startFastSim(t, sim.Config{Threads: 40, LatencyScale: 0.02})
	file := writeFile(t, "providers.json", fmt.Sprintf(`[
 {"name": "main", "url": %q, "key_env": "CAPTCHAAI_KEY", "threads": 2, "methods": ["turnstile"]},
 {"name": "spill", "url": %q, "key_env": "CM_KEY", "protocol": "createtask", "threads": 20, "spill_after": "20ms", "price_per_1000": {"default": 1.2}}]`, simURL, simURL))
	tasks := turnstileTasks("sp", 16)
	in := writeFile(t, "tasks.jsonl", jsonl(t, tasks))
	outPath := filepath.Join(t.TempDir(), "out.jsonl")
	r := runWith(t, "", map[string]string{"CAPTCHAAI_KEY": batchKey, "CM_KEY": "cm-key-77"},
		append([]string{"batch", in, "--out", outPath, "--store", "memory", "--providers", file}, fastQueue...)...)
	if r.code != 0 {
		t.Fatalf("batch = %+v", r)
	}
	by := map[string]int{}
	for id, res := range readAllSolved(t, outPath, tasks) {
		by[res.Provider]++
		if res.Provider == "spill" && res.Price != 0.0012 || res.Provider == "main" && res.Price != 0 {
			t.Errorf("%s at %s cost %v", id, res.Provider, res.Price)
		}
	}
	if by["main"] < 2 || by["spill"] < 1 || by["main"]+by["spill"] != 16 {
		t.Errorf("solved by provider %v: want main's two threads busy and the rest spilled to the createTask provider", by)
	}
	if st := s.Stats(); st.Accepted != 16 || st.Calls.CreateTask < 2*int64(by["spill"]) {
		t.Errorf("simulator: %d accepted, calls %+v for %v; want each spilled task created and polled by createTask", st.Accepted, st.Calls, by)
	}
}

// serve --public-url with a createTask provider: the provider is sent the
// service's pingback URL as callbackUrl, POSTs getTaskResult's JSON there,
// and the answers reach serve's clients with nothing polled at the
// provider.
func TestServeCreateTaskProviderCallbacks(t *testing.T) {
	t.Parallel()
	s, simURL := startFastSim(t, sim.Config{Threads: 10, LatencyScale: 0.02})
	providers := writeFile(t, "providers.json", fmt.Sprintf(`[
 {"name": "capmonster", "url": %q, "key_env": "CM_KEY", "protocol": "createtask", "threads": 10, "methods": ["turnstile"]}]`, simURL))
	clients := writeFile(t, "clients.json", fmt.Sprintf(`[{"name":"qa","key":%q}]`, frontClient))
	addr := freeAddr(t)
	_, m := startProcess(t, captchaqBinary(t), []string{"CM_KEY=cm-key-0077"}, servingRE,
		"serve", "--providers", providers, "--clients", clients, "--store", filepath.Join(t.TempDir(), "serve.db"),
		"--listen", addr, "--public-url", "http://"+addr)
	base := "http://" + m[1]
	ids := map[int]string{}
	for i := range 4 {
		id, err := inPHP(base, frontTask(i))
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	for i, id := range ids {
		answer, err := resPHPAnswer(t, base, id)
		if err != nil {
			t.Fatal(err)
		}
		tok, ok := strings.CutPrefix(answer, "OK|")
		if !ok {
			t.Fatalf("task %d: res.php %q", i, answer)
		}
		if host := siteverifyHost(t, simURL, tok); host != fmt.Sprintf("t%d.shop.example", i) {
			t.Errorf("task %d: its token is for %q", i, host)
		}
	}
	// The simulator counts a callback once serve has answered it.
	testbound.Eventually(func() bool { return s.Stats().PingbacksSent >= 4 })
	st := s.Stats()
	if st.Accepted != 4 || st.PingbacksSent != 4 || st.PingbacksFailed != 0 || st.Calls.PollSingle+st.Calls.PollBulk != 0 {
		t.Errorf("at the provider: %d accepted, %d callbacks sent (%d failed), %d polls; want 4, 4, 0 and none",
			st.Accepted, st.PingbacksSent, st.PingbacksFailed, st.Calls.PollSingle+st.Calls.PollBulk)
	}
}
