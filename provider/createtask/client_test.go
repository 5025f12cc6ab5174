package createtask_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/provider/createtask"
	"github.com/captchaq/captchaq/sim"
)

const (
	simKey = "ct-sim-key-0123456789"
	png    = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)

func startSim(t *testing.T, cfg sim.Config) (*sim.Server, string) {
	t.Helper()
	cfg.Key = simKey
	if cfg.Methods == nil {
		cfg.Methods = provider.KnownMethods
	}
	s, base, err := sim.Start(cfg, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, base
}

func newClient(t *testing.T, base, key string) *createtask.Client {
	t.Helper()
	c, err := createtask.NewClient(provider.ClientConfig{BaseURL: base, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// pollUntil polls id until it is final.
func pollUntil(t *testing.T, c *createtask.Client, id string) provider.PollResult {
	t.Helper()
	var r provider.PollResult
	testbound.Until(t, "task "+id+" final", func() bool {
		rs, err := c.PollMany(context.Background(), []string{id})
		if err != nil {
			t.Fatalf("poll %s: %v", id, err)
		}
		r = rs[0]
		return r.Ready || r.Err != nil
	})
	return r
}

// Each kind through createTask and getTaskResult gives the answer the
// simulator's in.php gives for it.
func TestClientSolvesEveryType(t *testing.T) {
	t.Parallel()
	s, base := startSim(t, sim.Config{LatencyScale: 0.001, PollBan: sim.PollBan{Disabled: true}})
	c := newClient(t, base, simKey)
	for _, task := range []provider.Task{
		provider.Image{Body: []byte("GIF89a-image"), Numeric: 1, MinLen: 5, MaxLen: 5}.Task(),
		provider.RecaptchaV2{SiteKey: "6Le-v2", PageURL: "https://shop.example/signup"}.Task(),
		provider.RecaptchaV3{SiteKey: "6Le-v3", PageURL: "https://shop.example/", Action: "login", MinScore: 0.3}.Task(),
		provider.Turnstile{SiteKey: "0x4AAA", PageURL: "https://shop.example/login"}.Task(),
		provider.GeeTest{GT: "gt1", Challenge: "ch1", PageURL: "https://shop.example/"}.Task(),
		{Method: "hcaptcha", Params: map[string]string{"sitekey": "hk", "pageurl": "https://shop.example/"}},
	} {
		kind, _ := task.KindFor(provider.KnownMethods)
		t.Run(string(kind), func(t *testing.T) {
			id, err := c.Submit(context.Background(), task, "")
			if err != nil {
				t.Fatal(err)
			}
			r := pollUntil(t, c, id)
			if !r.Ready || r.ID != id {
				t.Fatalf("poll: %+v", r)
			}
			switch kind {
			case provider.KindImage:
				if len(r.Answer.Token) != 5 || strings.Trim(r.Answer.Token, "0123456789") != "" {
					t.Errorf("image answer %q: want 5 digits (numeric=1, length 5)", r.Answer.Token)
				}
			case provider.KindRecaptchaV2, provider.KindRecaptchaV3:
				if !strings.HasPrefix(r.Answer.Token, "03A") || len(r.Answer.Token) < 400 {
					t.Errorf("reCAPTCHA answer %q", r.Answer.Token)
				}
			case provider.KindTurnstile:
				if !strings.HasPrefix(r.Answer.Token, "0.") {
					t.Errorf("Turnstile answer %q", r.Answer.Token)
				}
			case provider.KindGeeTest:
				var doc map[string]string
				if json.Unmarshal(r.Answer.JSON, &doc) != nil || !strings.HasPrefix(doc["geetest_challenge"], "ch1") || len(doc["geetest_validate"]) != 32 || !strings.HasSuffix(doc["geetest_seccode"], "|jordan") {
					t.Errorf("GeeTest answer %+v: want the three geetest_ fields", r.Answer)
				}
			}
		})
	}
	st := s.Stats()
	if st.Calls.CreateTask != st.Calls.Submit+st.Calls.PollSingle || st.Calls.Submit != 6 || st.Calls.PollBulk != 0 {
		t.Errorf("calls %+v: want 6 createTask submits and getTaskResult polls, all in the createTask protocol", st.Calls)
	}
	if c.Requests() != st.Calls.CreateTask {
		t.Errorf("client made %d requests, the simulator counted %d", c.Requests(), st.Calls.CreateTask)
	}
}

func TestClientBalanceAndReports(t *testing.T) {
	t.Parallel()
	s, base := startSim(t, sim.Config{Instant: true, Balance: 12.25})
	c := newClient(t, base, simKey)
	if b, err := c.Balance(context.Background()); err != nil || b != 12.25 {
		t.Fatalf("Balance = %v, %v; want 12.25", b, err)
	}
	ids := map[string]string{}
	for name, task := range map[string]provider.Task{
		"image":     provider.Image{Body: []byte("GIF89a")}.Task(),
		"turnstile": provider.Turnstile{SiteKey: "0x4", PageURL: "https://a.example/"}.Task(),
		"recaptcha": provider.RecaptchaV2{SiteKey: "6Le", PageURL: "https://a.example/"}.Task(),
		"good":      provider.RecaptchaV2{SiteKey: "6Le", PageURL: "https://b.example/"}.Task(),
	} {
		id, err := c.Submit(context.Background(), task, "")
		if err != nil {
			t.Fatal(err)
		}
		ids[name] = id
	}
	for name, id := range ids {
		if name == "good" {
			continue
		}
		if err := c.ReportBad(context.Background(), id); err != nil {
			t.Fatalf("ReportBad: %v", err)
		}
	}
	if err := c.ReportGood(context.Background(), ids["good"]); err != nil {
		t.Fatalf("ReportGood: %v", err)
	}
	if err := c.ReportBad(context.Background(), ids["good"]); !errors.Is(err, provider.ErrDuplicateReport) {
		t.Errorf("a second report of a task: %v, want ErrDuplicateReport", err)
	}
	st := s.Stats()
	if st.ReportsBad != 3 || st.ReportsGood != 1 {
		t.Errorf("reports at the simulator: %d bad, %d good; want 3 and 1", st.ReportsBad, st.ReportsGood)
	}
	if err := c.ReportBad(context.Background(), "12345"); !errors.Is(err, provider.ErrWrongCaptchaID) {
		t.Errorf("report of an unknown id: %v, want ErrWrongCaptchaID", err)
	}
}

// The service's error codes come back as the queue's classes, with the
// in.php code of the same meaning; the key shows in none of them.
func TestClientErrorClasses(t *testing.T) {
	t.Parallel()
	s, base := startSim(t, sim.Config{Threads: 1, LatencyScale: 1000, Methods: []string{"turnstile", "userrecaptcha", "base64"}})
	ctx := context.Background()
	turnstile := provider.Turnstile{SiteKey: "0x4", PageURL: "https://a.example/"}.Task()

	bad := newClient(t, base, "not-the-key-"+simKey)
	_, err := bad.Submit(ctx, turnstile, "")
	check := func(what string, err error, code string, class provider.Class) {
		t.Helper()
		var pe *provider.Error
		if !errors.As(err, &pe) || pe.Code != code || pe.Class != class {
			t.Errorf("%s: %v, want %s (%v)", what, err, code, class)
		}
		if err != nil && strings.Contains(err.Error(), simKey) {
			t.Errorf("%s: the key shows in %q", what, err)
		}
	}
	check("wrong key", err, "ERROR_KEY_DOES_NOT_EXIST", provider.ClassAccount)
	_, err = bad.Balance(ctx)
	check("wrong key, balance", err, "ERROR_KEY_DOES_NOT_EXIST", provider.ClassAccount)

	c := newClient(t, base, simKey)
	if _, err := c.Submit(ctx, turnstile, ""); err != nil {
		t.Fatal(err)
	}
	_, err = c.Submit(ctx, turnstile, "")
	check("the one thread is busy", err, "ERROR_NO_SLOT_AVAILABLE", provider.ClassNoSlot)

	_, err = c.Submit(ctx, provider.GeeTest{GT: "g", Challenge: "c", PageURL: "https://a.example/"}.Task(), "")
	check("a type the service does not solve", err, provider.CodeUnsupportedType, provider.ClassTask)

	rs, err := c.PollMany(ctx, []string{"99999999999"})
	if err != nil {
		t.Fatal(err)
	}
	check("unknown id", rs[0].Err, "ERROR_WRONG_CAPTCHA_ID", provider.ClassTask)

	_, err = c.Submit(ctx, provider.Task{Method: "bls", Params: map[string]string{}}, "")
	check("a method no createTask type carries", err, provider.CodeUnsupportedType, provider.ClassTask)
	if st := s.Stats(); st.Calls.Submit != 4 {
		t.Errorf("submits at the simulator: %d, want 4 (an invalid task makes no request)", st.Calls.Submit)
	}

	s.SetAccount(sim.Account{ZeroBalance: true})
	_, err = c.Submit(ctx, provider.RecaptchaV2{SiteKey: "6Le", PageURL: "https://a.example/"}.Task(), "")
	check("zero balance", err, "ERROR_ZERO_BALANCE", provider.ClassNoSlot)
	s.SetAccount(sim.Account{IPBanned: true})
	_, err = c.Balance(ctx)
	check("banned", err, "IP_BANNED", provider.ClassAccount)
}

func TestClientUnsolvable(t *testing.T) {
	t.Parallel()
	_, base := startSim(t, sim.Config{Instant: true, UnsolvableRate: 1})
	c := newClient(t, base, simKey)
	id, err := c.Submit(context.Background(), provider.Turnstile{SiteKey: "0x4", PageURL: "https://a.example/"}.Task(), "")
	if err != nil {
		t.Fatal(err)
	}
	r := pollUntil(t, c, id)
	if !errors.Is(r.Err, provider.ErrCaptchaUnsolvable) || provider.ClassOf(r.Err) != provider.ClassUnsolvable {
		t.Errorf("poll: %+v, want ERROR_CAPTCHA_UNSOLVABLE", r)
	}
}

// Answers a service gives that the simulator does not: string task ids,
// CapMonster's CAPTCHA_NOT_READY, a solution in createTask's answer, 5xx
// pages, 404 for a report method it does not have.
func TestClientServiceVariants(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var calls []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req map[string]any
		json.Unmarshal(body, &req)
		mu.Lock()
		calls = append(calls, r.URL.Path)
		n := len(calls)
		mu.Unlock()
		if req["clientKey"] != simKey || r.Header.Get("Content-Type") != "application/json" {
			w.Write([]byte(`{"errorId":1,"errorCode":"ERROR_KEY_DOES_NOT_EXIST"}`))
			return
		}
		switch r.URL.Path {
		case "/createTask":
			task := req["task"].(map[string]any)
			if task["type"] == "ImageToTextTask" {
				w.Write([]byte(`{"errorId":0,"taskId":"3b4c-img","status":"ready","solution":{"text":"q7x2"}}`))
				return
			}
			w.Write([]byte(`{"errorId":0,"taskId":"37223a89-06ed-442c-a0b8-22067b79c5b4"}`))
		case "/getTaskResult":
			switch {
			case n < 4:
				w.Write([]byte(`{"errorId":1,"errorCode":"CAPTCHA_NOT_READY"}`))
			case n == 4:
				w.WriteHeader(http.StatusBadGateway)
				w.Write([]byte("<html>502</html>"))
			default:
				w.Write([]byte(`{"errorId":0,"status":"ready","solution":{"token":"0.tok","userAgent":"UA"}}`))
			}
		case "/reportIncorrectTokenCaptcha":
			http.NotFound(w, r)
		case "/reportIncorrect":
			w.Write([]byte(`{"errorId":0,"status":"success"}`))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL, simKey)
	ctx := context.Background()
	id, err := c.Submit(ctx, provider.Turnstile{SiteKey: "0x4", PageURL: "https://a.example/"}.Task(), "")
	if err != nil || id != "37223a89-06ed-442c-a0b8-22067b79c5b4" {
		t.Fatalf("Submit = %q, %v", id, err)
	}
	for range 2 { // calls 2 and 3: not ready
		rs, err := c.PollMany(ctx, []string{id})
		if err != nil || rs[0].Ready || rs[0].Err != nil {
			t.Fatalf("CAPTCHA_NOT_READY: %+v, %v; want not ready", rs, err)
		}
	}
	if _, err := c.PollMany(ctx, []string{id}); !errors.Is(err, provider.ErrHTTP5xx) {
		t.Fatalf("502 page: %v, want a transient HTTP_5XX", err)
	}
	rs, err := c.PollMany(ctx, []string{id})
	if err != nil || !rs[0].Ready || rs[0].Answer.Token != "0.tok" || provider.BindingsOf(rs[0].Answer.JSON).UserAgent != "UA" {
		t.Fatalf("ready: %+v, %v; want the token 0.tok bound to the user agent UA", rs, err)
	}
	img, err := c.Submit(ctx, provider.Image{Body: []byte("GIF89a")}.Task(), "")
	if err != nil {
		t.Fatal(err)
	}
	before := c.Requests()
	rs, err = c.PollMany(ctx, []string{img})
	if err != nil || !rs[0].Ready || rs[0].Answer.Token != "q7x2" || c.Requests() != before {
		t.Errorf("an image solved in createTask's answer: %+v, %v, %d requests; want q7x2 with no request", rs, err, c.Requests()-before)
	}
	if err := c.ReportBad(ctx, id); err != nil {
		t.Fatalf("ReportBad: %v", err)
	}
	mu.Lock()
	got := strings.Join(calls[len(calls)-2:], " ")
	mu.Unlock()
	if got != "/reportIncorrectTokenCaptcha /reportIncorrect" {
		t.Errorf("report calls %q: want the token method, then 2captcha's after a 404", got)
	}
	if err := c.ReportGood(ctx, id); err != nil {
		t.Errorf("ReportGood at a service with no method for it: %v, want nil", err)
	}
}

func TestNewClientConfig(t *testing.T) {
	t.Parallel()
	_, err := createtask.NewClient(provider.ClientConfig{BaseURL: "ftp://x", Methods: []string{"bls", "turnstile"}})
	for _, want := range []string{"key is required", "not an absolute http(s) URL", `Methods has "bls"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("NewClient: %v, want %q", err, want)
		}
	}
	if _, err := createtask.NewClient(provider.ClientConfig{Key: "k"}); err == nil || !strings.Contains(err.Error(), "base URL is required") {
		t.Errorf("no base URL: %v", err)
	}
}

// TestPublishedPollGap: each service's own rule for polling one task, by
// its host in any letter case; any other host keeps CapMonster Cloud's 2 s.
func TestPublishedPollGap(t *testing.T) {
	for base, want := range map[string]time.Duration{
		"https://api.2captcha.com":        5 * time.Second,
		"https://API.RuCaptcha.com/":      5 * time.Second,
		"https://api.capsolver.com":       3 * time.Second,
		"https://api.capmonster.cloud":    2 * time.Second,
		"https://api.anti-captcha.com":    2 * time.Second,
		"http://127.0.0.1:8095":           2 * time.Second,
		"https://api.2captcha.com.evil.x": 2 * time.Second,
		"not a url":                       2 * time.Second,
	} {
		if got := createtask.PublishedPollGap(base); got != want {
			t.Errorf("PublishedPollGap(%q) = %v, want %v", base, got, want)
		}
	}
	if got := newClient(t, "https://api.capsolver.com", "k").PollGap(); got != 3*time.Second {
		t.Errorf("a CapSolver client's PollGap = %v, want 3s", got)
	}
}

// TestPublishedPollBudget: CapMonster Cloud and CapSolver publish 120
// getTaskResult calls a task within 5 minutes of its creation; any other
// host publishes no limit.
func TestPublishedPollBudget(t *testing.T) {
	limited := createtask.PollBudget{Polls: 120, Window: 5 * time.Minute}
	for base, want := range map[string]createtask.PollBudget{
		"https://api.capmonster.cloud": limited,
		"https://API.CapSolver.com/":   limited,
		"https://api.2captcha.com":     {},
		"https://api.anti-captcha.com": {},
		"http://127.0.0.1:8080":        {},
	} {
		if got := createtask.PublishedPollBudget(base); got != want {
			t.Errorf("PublishedPollBudget(%q) = %+v, want %+v", base, got, want)
		}
	}
	if got := newClient(t, "https://api.capsolver.com", "k").PollBudget(); got != limited {
		t.Errorf("a CapSolver client's PollBudget = %+v, want %+v", got, limited)
	}
}
