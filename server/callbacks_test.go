package server_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/simrig"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/server"
	"github.com/captchaq/captchaq/sim"
)

// submitSpy is a Provider that records the pingback URL and the captcha
// id of each submit it passes on.
type submitSpy struct {
	captchaq.Provider
	mu   sync.Mutex
	urls []string
	ids  []string
}

func (s *submitSpy) Submit(ctx context.Context, t provider.Task, pingback string) (string, error) {
	id, err := s.Provider.Submit(ctx, t, pingback)
	if err == nil {
		s.mu.Lock()
		s.urls, s.ids = append(s.urls, pingback), append(s.ids, id)
		s.mu.Unlock()
	}
	return id, err
}

// submitted waits for the spy's nth submit and returns its URL and id.
func (s *submitSpy) submitted(t *testing.T, n int) (string, string) {
	t.Helper()
	var u, id string
	testbound.Until(t, fmt.Sprintf("submit %d", n), func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.ids) < n {
			return false
		}
		u, id = s.urls[n-1], s.ids[n-1]
		return true
	})
	return u, id
}

// siteverify reports the hostname the simulator's Turnstile siteverify
// gives token, "" when it refuses it.
func siteverify(t *testing.T, simURL, token string) string {
	t.Helper()
	host, err := sim.VerifiedHost(context.Background(), http.DefaultClient, simURL, token)
	if err != nil {
		t.Fatal(err)
	}
	return host
}

// The forge of the issue, on two providers on simulators: cheap is given
// its pingback URL (…/pingback/SECRET?provider=cheap&sig=…), renames the
// provider to main and sends main's captcha ids with a token of its own:
// the id of a main task in flight and the id main gives out next. Both
// are refused with 403; the task in flight gets main's token on res.php
// and the next task main's token on getTaskResult, each verified at the
// simulator, both by main's own pingbacks (nothing is polled).
func TestPingbackForgedByAnotherProvider(t *testing.T) {
	t.Parallel()
	start := func(c sim.Config) (*sim.Server, string, *submitSpy) {
		r := simrig.Start(t, simrig.Options{Sim: c, Key: "provider-secret"})
		return r.Sim, r.Base, &submitSpy{Provider: r.Client}
	}
	second := sim.Latency{Median: time.Second, Min: time.Second, Max: time.Second}
	mainSim, mainBase, mainSpy := start(sim.Config{Seed: 1, PollBan: sim.PollBan{Disabled: true}, Latency: map[provider.Kind]sim.Latency{provider.KindTurnstile: second}})
	_, _, cheapSpy := start(sim.Config{Seed: 2, PollBan: sim.PollBan{Disabled: true}, Latency: map[provider.Kind]sim.Latency{provider.KindRecaptchaV2: slowRecaptcha}})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{
		Queue: captchaq.Config{
			Providers: []captchaq.ProviderConfig{
				{Name: "main", Provider: mainSpy, Threads: 5, Methods: []string{"turnstile"}},
				{Name: "cheap", Provider: cheapSpy, Threads: 5, Methods: []string{"userrecaptcha"}},
			},
			PollInterval: time.Hour, // answers come by pingback only
		},
		Clients:   []server.Client{{Name: "qa", Key: keyQA}},
		PublicURL: "http://" + ln.Addr().String(),
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(srv.Handler())
	hs.Listener.Close()
	hs.Listener = ln
	hs.Start()
	t.Cleanup(func() {
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		srv.Shutdown(ctx)
		srv.Queue().Close()
	})
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	b := &bundle{srv: srv, url: hs.URL, http: hs.Client()}

	page := func(host string) url.Values {
		return url.Values{"method": {"turnstile"}, "sitekey": {sim.DemoTurnstile.SiteKey}, "pageurl": {"https://" + host + "/login"}}
	}
	inFlight := b.inOK(t, keyQA, page("a.shop.example"))
	_, mainID := mainSpy.submitted(t, 1)
	b.inOK(t, keyQA, recaptcha())
	cheapURL, _ := cheapSpy.submitted(t, 1)
	if !strings.Contains(cheapURL, "provider=cheap") || !strings.Contains(cheapURL, "&sig=") {
		t.Fatalf("cheap's pingback URL %q names no provider and no secret", redact(cheapURL))
	}
	n, err := strconv.ParseUint(mainID, 10, 64)
	if err != nil {
		t.Fatalf("main's id %q", mainID)
	}
	nextID := strconv.FormatUint(n+1, 10)

	forged := strings.Replace(cheapURL, "provider=cheap", "provider=main", 1)
	for _, id := range []string{mainID, nextID} {
		resp, err := http.Get(forged + "&id=" + id + "&code=FORGED-" + id)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("cheap's URL naming main, id %s: HTTP %d, want 403", id, resp.StatusCode)
		}
	}

	next := b.ctCreate(t, keyQA, `{"type":"TurnstileTaskProxyless","websiteURL":"https://b.shop.example/login","websiteKey":"`+sim.DemoTurnstile.SiteKey+`"}`)
	if _, id := mainSpy.submitted(t, 2); id != nextID {
		t.Fatalf("main gave out %s next, not %s: the test needs the id it forged", id, nextID)
	}
	ans := b.resFinal(t, keyQA, inFlight)
	if tok, ok := strings.CutPrefix(ans, "OK|"); !ok || siteverify(t, mainBase, tok) != "a.shop.example" {
		t.Errorf("res.php of the task in flight at main: %.40q…; want main's token for a.shop.example", ans)
	}
	m := b.ctWait(t, keyQA, next)
	sol, _ := m["solution"].(map[string]any)
	if tok, _ := sol["token"].(string); m["status"] != "ready" || siteverify(t, mainBase, tok) != "b.shop.example" {
		t.Errorf("getTaskResult of main's next task: %.80v; want ready with main's token for b.shop.example", m)
	}
	// The simulator counts a pingback once the server has answered it.
	testbound.Until(t, "main's 2 pingbacks answered", func() bool { return mainSim.Stats().PingbacksSent == 2 })
	if st := mainSim.Stats(); st.PingbacksSent != 2 || st.PingbacksFailed != 0 || st.Calls.PollSingle+st.Calls.PollBulk != 0 {
		t.Errorf("main: %d pingbacks answered, %d failed, %d polls; want 2, 0, 0", st.PingbacksSent, st.PingbacksFailed, st.Calls.PollSingle+st.Calls.PollBulk)
	}
}

// redact cuts a pingback URL before its secret, for messages.
func redact(u string) string {
	before, _, _ := strings.Cut(u, "sig=")
	return before + "…"
}
