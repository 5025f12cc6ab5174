package captchaq_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/pgtest"
	"github.com/captchaq/captchaq/internal/tasktest"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/provider/createtask"
	"github.com/captchaq/captchaq/sim"
	"github.com/captchaq/captchaq/store/postgres"
)

// refusalLane is one provider of a refusal test: its service's refusal
// of a type and its protocol.
type refusalLane struct {
	refusal    sim.Refusal
	createTask bool
}

// setupRefusals starts a queue (in a synctest bubble: call it there) on
// an in-process simulator per lane, "first" preferred to "second", each
// solving tasktest.BackupMethods; opts change the queue's Config, which
// it returns too.
func setupRefusals(t *testing.T, lanes [2]refusalLane, opts ...func(*captchaq.Config)) (*captchaq.Queue, [2]*sim.Server, captchaq.Config) {
	t.Helper()
	var sims [2]*sim.Server
	var ps []captchaq.ProviderConfig
	for i, ln := range lanes {
		srv, err := sim.New(simDefaults(sim.Config{Methods: tasktest.BackupMethods, Refusal: ln.refusal, Threads: 5}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		cc := provider.ClientConfig{BaseURL: sim.InProcessBaseURL, Key: "test-key", HTTPClient: srv.InProcessClient(), Methods: tasktest.BackupMethods}
		var p captchaq.Provider
		if ln.createTask {
			p, err = createtask.NewClient(cc)
		} else {
			p, err = provider.NewClient(cc)
		}
		if err != nil {
			t.Fatal(err)
		}
		sims[i] = srv
		ps = append(ps, captchaq.ProviderConfig{Name: []string{"first", "second"}[i], Provider: p, Threads: 5, Methods: tasktest.BackupMethods})
	}
	cfg := captchaq.Config{Providers: ps, PollInterval: 10 * time.Millisecond, RetryBackoff: 5 * time.Millisecond, RetryBackoffMax: 20 * time.Millisecond}
	for _, o := range opts {
		o(&cfg)
	}
	q, err := captchaq.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	if err := q.Start(testbound.Context(t)); err != nil {
		t.Fatal(err)
	}
	return q, sims, cfg
}

// hcaptchaTasks are n hCaptcha tasks named prefix-0 … prefix-n-1.
func hcaptchaTasks(prefix string, n int) []captchaq.Task {
	var ts []captchaq.Task
	for i := range n {
		id := prefix + "-" + string(rune('0'+i))
		ts = append(ts, captchaq.Task{ID: id, Method: "hcaptcha", Params: map[string]string{"sitekey": "10000000-ffff", "pageurl": "https://example.com/" + id}})
	}
	return ts
}

// A type the preferred provider withdrew goes to the other one: every
// task is solved there, no client sees an error, and the preferred
// provider is sent one refused submit, whichever service's words it
// refuses in. Five tasks sent at once would draw five without the hold.
func TestWithdrawnTypeGoesToTheOther(t *testing.T) {
	for name, first := range map[string]refusalLane{
		"2captcha in.php": {refusal: sim.Refusal2Captcha}, "captchaai in.php": {refusal: sim.RefusalCaptchaAI},
		"anti-captcha": {refusal: sim.RefusalAntiCaptcha, createTask: true}, "capmonster": {refusal: sim.RefusalCapMonster, createTask: true},
		"capsolver": {refusal: sim.RefusalCapSolver, createTask: true},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q, sims, _ := setupRefusals(t, [2]refusalLane{first, {refusal: sim.RefusalCapMonster, createTask: true}})
				sims[0].Withdraw("hcaptcha")
				for i, r := range waitAll(t, submitAll(t, q, hcaptchaTasks("h", 5)...)) {
					if r.Status != captchaq.StatusSolved || r.Provider != "second" {
						t.Errorf("task %d: %s at %q (%s %s), want solved at second", i, r.Status, r.Provider, r.ErrorCode, r.Error)
					}
				}
				if got := sims[0].Stats().Refused; got != 1 {
					t.Errorf("first provider refused %d submits, want 1", got)
				}
				m := q.Metrics().Providers[0]
				if len(m.Refused) != 1 || m.Refused[0].Method != "hcaptcha" || !m.Refused[0].Until.Equal(m.Refused[0].Since.Add(captchaq.RefusalHoldDefault)) {
					t.Errorf("first provider's refusals %+v, want hcaptcha's for an hour", m.Refused)
				}
				// Types it takes still go to it.
				if r := waitAll(t, submitAll(t, q, task("t", 5)))[0]; r.Provider != "first" {
					t.Errorf("turnstile task solved at %q, want first", r.Provider)
				}
			})
		})
	}
}

// With no provider taking a type, its tasks fail with CodeUnsupportedType
// and a text naming the refusals, each provider having been sent one
// refused submit; later tasks fail with none sent. After the hold, the
// next task probes the preferred provider, which takes the type again,
// and the tasks after it go there.
func TestWithdrawnEverywhereFailsThenAProbeRestores(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, sims, _ := setupRefusals(t, [2]refusalLane{{refusal: sim.Refusal2Captcha}, {refusal: sim.RefusalCapSolver, createTask: true}})
		sims[0].Withdraw("hcaptcha")
		sims[1].Withdraw("hcaptcha")
		check := func(rs []captchaq.Result) {
			t.Helper()
			for i, r := range rs {
				if r.Status != captchaq.StatusFailed || r.ErrorCode != captchaq.CodeUnsupportedType ||
					!strings.Contains(r.Error, "no provider takes hcaptcha tasks now: first answered ERROR_METHOD_CALL") ||
					!strings.Contains(r.Error, "second answered ERROR_BAD_PARAMETERS") {
					t.Errorf("task %d: %s %s %q, want failed %s naming both refusals", i, r.Status, r.ErrorCode, r.Error, captchaq.CodeUnsupportedType)
				}
			}
		}
		check(waitAll(t, submitAll(t, q, hcaptchaTasks("a", 3)...)))
		check(waitAll(t, submitAll(t, q, hcaptchaTasks("b", 2)...)))
		if a, b := sims[0].Stats().Refused, sims[1].Stats().Refused; a != 1 || b != 1 {
			t.Errorf("refused submits %d and %d, want 1 at each provider", a, b)
		}

		sims[0].Withdraw()
		testbound.Advance(captchaq.RefusalHoldDefault)
		probe := hcaptchaTasks("c", 3)
		rs := waitAll(t, submitAll(t, q, probe[0]))
		rs = append(rs, waitAll(t, submitAll(t, q, probe[1:]...))...)
		for i, r := range rs {
			if r.Status != captchaq.StatusSolved || r.Provider != "first" {
				t.Errorf("after the hold, task %d: %s at %q (%s), want solved at first", i, r.Status, r.Provider, r.Error)
			}
		}
		if a, b := sims[0].Stats().Refused, sims[1].Stats().Refused; a != 1 || b != 1 {
			t.Errorf("after the probe, refused submits %d and %d, want still 1 and 1", a, b)
		}
		if m := q.Metrics().Providers[0]; len(m.Refused) != 0 {
			t.Errorf("first provider's refusals after its probe was accepted: %+v, want none", m.Refused)
		}
	})
}

// memStateStore is a memory Store that keeps the queue's state (LoadState,
// SaveState) as store/sqlite does.
type memStateStore struct {
	captchaq.Store
	mu    sync.Mutex
	state map[string][]byte
}

func (s *memStateStore) LoadState(_ context.Context, name string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state[name], nil
}

func (s *memStateStore) SaveState(_ context.Context, name string, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state[name] = value
	return nil
}

// refusalsKept runs a queue on the Store that store sets, which learns
// that the preferred provider withdrew hCaptcha, closes it, and starts
// another on a Store that store sets again (given the Config with the
// first): the second queue routes hCaptcha to the other provider from
// the start, sending the first no submit.
func refusalsKept(t *testing.T, store func(*captchaq.Config)) {
	t.Helper()
	q, sims, cfg := setupRefusals(t, [2]refusalLane{{refusal: sim.Refusal2Captcha}, {refusal: sim.RefusalCapMonster, createTask: true}}, store)
	sims[0].Withdraw("hcaptcha")
	if r := waitAll(t, submitAll(t, q, hcaptchaTasks("a", 1)...))[0]; r.Status != captchaq.StatusSolved || r.Provider != "second" {
		t.Fatalf("first queue: %s at %q (%s), want solved at second", r.Status, r.Provider, r.Error)
	}
	q.Close()
	submits := sims[0].Stats().Calls.Submit

	store(&cfg)
	again, err := captchaq.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if err := again.Start(testbound.Context(t)); err != nil {
		t.Fatal(err)
	}
	for i, r := range waitAll(t, submitAll(t, again, hcaptchaTasks("b", 3)...)) {
		if r.Status != captchaq.StatusSolved || r.Provider != "second" {
			t.Errorf("second queue, task %d: %s at %q (%s), want solved at second", i, r.Status, r.Provider, r.Error)
		}
	}
	if got := sims[0].Stats().Calls.Submit - submits; got != 0 {
		t.Errorf("the second queue sent the first provider %d submits, want 0 (its refusal forgotten)", got)
	}
	if got := sims[0].Stats().Refused; got != 1 {
		t.Errorf("first provider refused %d submits over both queues, want 1", got)
	}
}

// A queue started again on a Store that keeps state knows the refusals
// of the one before.
func TestRefusalsSurviveARestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &memStateStore{Store: captchaq.NewMemoryStore(captchaq.MemoryStoreConfig{}), state: map[string][]byte{}}
		refusalsKept(t, func(c *captchaq.Config) { c.Store = store })
	})
}

// A queue on PostgreSQL that takes over the database of a closed one (a
// standby of serve, with a Store of its own) knows the refusals the
// first learned.
func TestRefusalsSurviveATakeoverOnPostgres(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	refusalsKept(t, func(c *captchaq.Config) {
		if c.Store != nil {
			if err := c.Store.Close(); err != nil {
				t.Fatal(err)
			}
		}
		s, err := postgres.Open(t.Context(), url, postgres.Config{Owner: "serve"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		c.Store = s
	})
}
