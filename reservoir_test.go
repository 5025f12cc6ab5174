package captchaq_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/sim"
)

// turnstileSolves are Turnstile solves as published: 2 to 6 s.
var turnstileSolves = map[provider.Kind]sim.Latency{
	provider.KindTurnstile: {Median: 4 * time.Second, Spread: 0.3, Min: 2 * time.Second, Max: 6 * time.Second},
}

// demoTemplate is the simulator's demo Turnstile page, whose tokens its
// siteverify checks.
func demoTemplate() captchaq.Task {
	return captchaq.Task{Method: "turnstile", Params: map[string]string{
		"sitekey": sim.DemoTurnstile.SiteKey, "pageurl": "https://shop.example/checkout",
	}}
}

// demoTask is a client's task for the demo page, from tenant.
func demoTask(id, tenant string) captchaq.Task {
	t := demoTemplate()
	t.ID, t.Tenant = id, tenant
	return t
}

// setupReservoir is setupInProcess (call it in a bubble) with Turnstile
// at 2–6 s, 20 threads (5 for refills) and reservoir rc on the demo page.
func setupReservoir(t *testing.T, rc captchaq.ReservoirConfig, store *captchaq.MemoryStore) *bundle {
	t.Helper()
	rc.Task = demoTemplate()
	cfg := captchaq.Config{Threads: 20, PollInterval: 250 * time.Millisecond, Reservoirs: []captchaq.ReservoirConfig{rc}}
	if store != nil {
		cfg.Store = store
	}
	b := setupInProcess(t, sim.Config{Threads: 20, Latency: turnstileSolves}, cfg)
	if store != nil {
		b.store = store
	}
	return b
}

// counts is the queue's only reservoir's counts.
func counts(b *bundle) captchaq.ReservoirCounts { return b.q.Reservoirs()[0] }

// TestReservoirSteadyDemand: one task a second for 90 s against an
// auto-sized reservoir. After the first refills the tasks take tokens,
// answered at their submit, each token once and with at least MinLife
// left; refills never take more than their share of the threads (5 of
// 20); when the demand stops, refills stop within one solve time.
func TestReservoirSteadyDemand(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setupReservoir(t, captchaq.ReservoirConfig{Name: "shop"}, nil)
		b.start(t)
		var fs []*captchaq.Future
		maxInFlight := 0
		for i := range 90 {
			fs = append(fs, submitAll(t, b.q, demoTask(fmt.Sprintf("t%02d", i), ""))...)
			testbound.Advance(time.Second)
			maxInFlight = max(maxInFlight, counts(b).InFlight)
		}
		stop := time.Now()
		rs := waitAll(t, fs)

		seen := map[string]string{}
		hitsLate, late := 0, 0
		for i, r := range rs {
			if r.Status != captchaq.StatusSolved || r.Token == "" {
				t.Fatalf("task %s: %+v", r.ID, r)
			}
			if other, dup := seen[r.Token]; dup {
				t.Fatalf("tasks %s and %s got the same token", other, r.ID)
			}
			seen[r.Token] = r.ID
			if r.Reservoir == "" {
				continue
			}
			if r.Reservoir != "shop" || !r.FinishedAt.Equal(r.AcceptedAt) {
				t.Errorf("hit %s: reservoir %q, answered %v after its submit; want shop, at once", r.ID, r.Reservoir, r.FinishedAt.Sub(r.AcceptedAt))
			}
			if left := r.ExpiresAt.Sub(r.AcceptedAt); left < 75*time.Second {
				t.Errorf("hit %s: handed out with %v left, want at least MinLife 75s", r.ID, left)
			}
			if host, err := sim.VerifiedHost(testbound.Context(t), b.srv.InProcessClient(), sim.InProcessBaseURL, r.Token); err != nil || host == "" {
				t.Errorf("hit %s: the demo site refused its token (%q, %v)", r.ID, host, err)
			}
			if i >= 20 {
				hitsLate++
			}
		}
		late = len(rs) - 20
		c := counts(b)
		t.Logf("hits %d of the %d tasks after the first 20 s; counts %+v", hitsLate, late, c)
		if hitsLate < late*95/100 {
			t.Errorf("hits after the first 20 s: %d of %d, want at least 95%%", hitsLate, late)
		}
		if maxInFlight > 5 {
			t.Errorf("refills in flight reached %d, past their share (5 of 20 threads)", maxInFlight)
		}
		if c.Hits+c.Misses != 90 || c.HandedOut != c.Hits || c.TimeToTokenP50 != 0 {
			t.Errorf("counts %+v: want hits+misses 90, handed out = hits, time to token p50 0", c)
		}
		if c.Misses > 0 && c.TimeToTokenP99 < 2*time.Second {
			t.Errorf("time to token p99 %v with %d misses, want a solve time (2 s or more)", c.TimeToTokenP99, c.Misses)
		}
		// A token handed out verifies once at the site: a second check
		// refuses it.
		for _, r := range rs {
			if r.Reservoir != "" {
				if host, _ := sim.VerifiedHost(testbound.Context(t), b.srv.InProcessClient(), sim.InProcessBaseURL, r.Token); host != "" {
					t.Errorf("hit %s: its token verified twice", r.ID)
				}
				break
			}
		}

		// The demand stopped: refills end within one solve (6 s) plus a
		// tick and a poll, and none starts.
		testbound.Advance(stop.Add(8 * time.Second).Sub(time.Now()))
		if c := counts(b); c.InFlight != 0 {
			t.Errorf("%d refills in flight 8 s after the demand stopped", c.InFlight)
		}
		submits := b.srv.Stats().Calls.Submit
		testbound.Advance(time.Minute)
		if got := b.srv.Stats().Calls.Submit; got != submits {
			t.Errorf("%d submits in the minute after the demand stopped, want none", got-submits)
		}
		c = counts(b)
		if c.Solved != c.HandedOut+int64(c.Stock)+c.Expired {
			t.Errorf("solved %d, want handed out %d + stock %d + expired %d", c.Solved, c.HandedOut, c.Stock, c.Expired)
		}
	})
}

// waitStock advances the bubble's clock until the reservoir holds n
// tokens, at most a minute.
func waitStock(t *testing.T, b *bundle, n int) {
	t.Helper()
	for range 60 {
		if counts(b).Stock >= n {
			return
		}
		testbound.Advance(time.Second)
	}
	t.Fatalf("the reservoir holds %d tokens after a minute, want %d", counts(b).Stock, n)
}

// TestReservoirDraws: only a task with the template's method and params,
// from a tenant in Clients, draws; any other is an ordinary task, solved
// for itself, and leaves the stock as it is.
func TestReservoirDraws(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setupReservoir(t, captchaq.ReservoirConfig{Name: "shop", Size: 2, Clients: []string{"acme"}}, nil)
		b.start(t)
		waitStock(t, b, 2)
		other := demoTask("other-page", "acme")
		other.Params["pageurl"] = "https://shop.example/cart"
		urgent := demoTask("urgent", "acme")
		urgent.Priority = 1 // not a solving param: it draws
		rs := waitAll(t, submitAll(t, b.q, demoTask("stranger", "globex"), other, urgent))
		want := []string{"", "", "shop"}
		for i, r := range rs {
			if r.Status != captchaq.StatusSolved || r.Reservoir != want[i] {
				t.Errorf("task %s: status %s, reservoir %q; want solved, %q", r.ID, r.Status, r.Reservoir, want[i])
			}
			if ordinary := r.Reservoir == ""; ordinary != (r.SolveSeconds > 0) {
				t.Errorf("task %s (reservoir %q) solved in %v s", r.ID, r.Reservoir, r.SolveSeconds)
			}
		}
		rec, err := b.store.Get(testbound.Context(t), "urgent")
		if err != nil || rec.Status != captchaq.StatusSolved || rec.Result.Reservoir != "shop" {
			t.Errorf("stored hit: %+v, %v; want solved from shop", rec, err)
		}
		if c := counts(b); c.Hits != 1 || c.Misses != 0 || c.HandedOut != 1 {
			t.Errorf("counts %+v: want 1 hit, no miss (the others did not match)", c)
		}
	})
}

// TestReservoirMinLife: a token with less than MinLife left is never
// handed out; it is dropped, counted as expired unused, and refilled.
func TestReservoirMinLife(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Turnstile tokens live 300 s: with 200 s kept back, one is good
		// for 100 s after its solve.
		b := setupReservoir(t, captchaq.ReservoirConfig{Name: "shop", Size: 1, MinLife: 200 * time.Second}, nil)
		b.start(t)
		waitStock(t, b, 1)
		testbound.Advance(110 * time.Second)
		if c := counts(b); c.Expired != 1 || c.Solved != 2 {
			t.Fatalf("110 s on: %+v; want 1 expired unused and a second solved", c)
		}
		var fs []*captchaq.Future
		for i := range 120 {
			fs = append(fs, submitAll(t, b.q, demoTask(fmt.Sprintf("t%03d", i), ""))...)
			testbound.Advance(time.Second)
		}
		hits := 0
		for _, r := range waitAll(t, fs) {
			if r.Reservoir == "" {
				continue
			}
			hits++
			if left := r.ExpiresAt.Sub(r.AcceptedAt); left < 200*time.Second {
				t.Errorf("hit %s handed out with %v left, want at least 200s", r.ID, left)
			}
		}
		if hits == 0 {
			t.Error("no task drew a token")
		}
	})
}

// TestReservoirRestart: refills pending in the Store count in flight
// again at Start, and tokens in the Store are stock: a queue started
// again on it refills only what is missing.
func TestReservoirRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := captchaq.NewMemoryStore(captchaq.MemoryStoreConfig{})
		rc := captchaq.ReservoirConfig{Name: "shop", Size: 3}
		b := setupReservoir(t, rc, store)
		b.start(t)
		synctest.Wait() // the first tick submits 3 refills
		if c := counts(b); c.InFlight != 3 {
			t.Fatalf("in flight after the first tick: %d, want 3", c.InFlight)
		}
		// Each refill says what it is, at the lowest priority: client
		// tasks go first.
		err := store.Pending(testbound.Context(t), func(r captchaq.Record) error {
			if !strings.HasPrefix(r.Task.ID, "reservoir-shop-") || r.Task.Priority != captchaq.PriorityLowest || r.Task.Tenant != "" {
				t.Errorf("refill %q: priority %d, tenant %q; want reservoir-shop-…, %d, none", r.Task.ID, r.Task.Priority, r.Task.Tenant, captchaq.PriorityLowest)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		b.q.Close()

		again := func() *bundle {
			rc.Task = demoTemplate()
			b2 := newBundle(t, b.srv, sim.InProcessBaseURL, b.srv.InProcessClient(), captchaq.Config{
				Threads: 20, PollInterval: 250 * time.Millisecond, Store: store, Reservoirs: []captchaq.ReservoirConfig{rc},
			})
			b2.store = store
			return b2
		}
		b2 := again()
		before := b.srv.Stats().Calls.Submit
		b2.start(t)
		if c := counts(b2); c.InFlight != 3 {
			t.Fatalf("in flight at Start: %d, want the 3 pending in the store", c.InFlight)
		}
		waitStock(t, b2, 3)
		if got := b.srv.Stats().Calls.Submit - before; got != 0 {
			t.Errorf("%d refills submitted after the restart, want none (3 were in flight)", got)
		}
		b2.q.Close()

		b3 := again()
		b3.start(t)
		testbound.Advance(time.Second)
		if c := counts(b3); c.Stock != 3 || c.InFlight != 0 {
			t.Errorf("after a restart: %+v; want the 3 tokens in stock, none in flight", c)
		}
		if r := waitAll(t, submitAll(t, b3.q, demoTask("a", ""))); r[0].Reservoir != "shop" {
			t.Errorf("a task after the restart: %+v, want a token of shop", r[0])
		}
	})
}

// plainStore is a Store that keeps no reservoir tokens.
type plainStore struct{ captchaq.Store }

func TestReservoirConfigErrors(t *testing.T) {
	image := captchaq.Task{Method: "base64", Params: map[string]string{"body": "iVBORw0KGgo="}}
	for _, c := range []struct {
		name string
		cfg  captchaq.Config
		want string
	}{
		{"unknown method", captchaq.Config{Reservoirs: []captchaq.ReservoirConfig{{Name: "a", Task: captchaq.Task{Method: "nocaptcha", Params: map[string]string{"sitekey": "k"}}}}}, "Reservoirs[0].Task: "},
		{"no token lifetime", captchaq.Config{Reservoirs: []captchaq.ReservoirConfig{{Name: "a", Task: image}}}, "Reservoirs[0].Task.Method: \"base64\" answers with text that does not expire"},
		{"max below size", captchaq.Config{Reservoirs: []captchaq.ReservoirConfig{{Name: "a", Task: demoTemplate(), Size: 5, Max: 3}}}, "Reservoirs[0].Max: 3 is less than Size 5"},
		{"min life past the lifetime", captchaq.Config{Reservoirs: []captchaq.ReservoirConfig{{Name: "a", Task: demoTemplate(), MinLife: 300 * time.Second}}}, "Reservoirs[0].MinLife: must be 0 (default 1m15s) or more and less than the token's lifetime 5m0s"},
		{"same template twice", captchaq.Config{Reservoirs: []captchaq.ReservoirConfig{{Name: "a", Task: demoTemplate()}, {Name: "b", Task: demoTemplate()}}}, "Reservoirs[1].Task: the same method and params as reservoir \"a\""},
		{"same name twice", captchaq.Config{Reservoirs: []captchaq.ReservoirConfig{{Name: "a", Task: demoTemplate()}, {Name: "a", Task: task("x", 0)}}}, "Reservoirs[1].Name: \"a\" is used twice"},
		{"a store without tokens", captchaq.Config{Store: plainStore{captchaq.NewMemoryStore(captchaq.MemoryStoreConfig{})}, Reservoirs: []captchaq.ReservoirConfig{{Name: "a", Task: demoTemplate()}}}, "Store: captchaq_test.plainStore keeps no reservoir tokens"},
		{"no thread for refills", captchaq.Config{Threads: 2, Reservoirs: []captchaq.ReservoirConfig{{Name: "a", Task: demoTemplate()}}}, "ReservoirShare: 0.25 of 2 threads leaves no thread for refills; raise it to at least 0.50"},
	} {
		c.cfg.Provider = &recorder{}
		_, err := captchaq.New(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: New = %v, want an error with %q", c.name, err, c.want)
		}
	}
}

// TestReservoirNoStaleToken: a draw takes the token that expires first
// among those with MinLife left, never one with less, even before the
// refill loop drops it.
func TestReservoirNoStaleToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setupReservoir(t, captchaq.ReservoirConfig{Name: "shop"}, nil)
		b.start(t)
		synctest.Wait() // the loop's first round: nothing to drop, no demand
		ctx := testbound.Context(t)
		now := time.Now()
		for _, tok := range []struct {
			id   string
			left time.Duration
		}{{"stale", 74 * time.Second}, {"fresh", 76 * time.Second}, {"later", 200 * time.Second}} {
			r := captchaq.Result{ID: tok.id, Status: captchaq.StatusSolved, Method: "turnstile", Token: tok.id, ExpiresAt: now.Add(tok.left)}
			if err := b.store.StockToken(ctx, "shop", r); err != nil {
				t.Fatal(err)
			}
		}
		fs := submitAll(t, b.q, demoTask("a", ""), demoTask("b", ""))
		rs := waitAll(t, fs)
		if rs[0].Token != "fresh" || rs[1].Token != "later" {
			t.Errorf("tokens handed out: %q, %q; want fresh, later (stale has less than MinLife 75 s left)", rs[0].Token, rs[1].Token)
		}
	})
}

// TestReservoirFailedRefills: a refill that fails is counted, goes to no
// client (OnResult is not called), and holds the next refills back (1 s,
// 2 s, 4 s … after failures in a row) rather than failing every second.
func TestReservoirFailedRefills(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var results atomic.Int64
		b := setupInProcess(t, sim.Config{Threads: 20, Latency: turnstileSolves}, captchaq.Config{
			Threads: 20, PollInterval: 250 * time.Millisecond, MaxAttempts: 1,
			Reservoirs: []captchaq.ReservoirConfig{{Name: "shop", Task: demoTemplate(), Size: 1}},
			OnResult:   func(captchaq.Result) { results.Add(1) },
		})
		b.prov.inject = func(int) error {
			return &provider.Error{Op: "submit", Code: "ERROR_CAPTCHA_UNSOLVABLE", Class: provider.ClassUnsolvable, Text: "unsolvable"}
		}
		b.start(t)
		testbound.Advance(20 * time.Second)
		c := counts(b)
		// Failures at about 0, 1, 3, 7 and 15 s: 5, not 20.
		if c.Failed < 4 || c.Failed > 6 || c.Solved != 0 || c.Stock != 0 {
			t.Errorf("after 20 s of failing refills: %+v; want 4 to 6 failed, none solved", c)
		}
		if n := results.Load(); n != 0 {
			t.Errorf("OnResult saw %d refill results, want none (they go to no client)", n)
		}
	})
}

// TestReservoirSetReservoirs: SetReservoirs refuses a bad set and keeps
// the old one; a reservoir kept by name and captcha keeps its stock and
// counts beside one added, which fills; one removed loses its stock, and
// its captcha's tasks are ordinary again.
func TestReservoirSetReservoirs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := captchaq.NewMemoryStore(captchaq.MemoryStoreConfig{})
		b := setupReservoir(t, captchaq.ReservoirConfig{Name: "shop", Size: 2}, store)
		b.start(t)
		waitStock(t, b, 2)
		waitAll(t, submitAll(t, b.q, demoTask("first", "acme")))
		cart := demoTemplate()
		cart.Params["pageurl"] = "https://shop.example/cart"
		if err := b.q.SetReservoirs([]captchaq.ReservoirConfig{{Name: "shop", Task: demoTemplate(), MinLife: time.Hour}}); err == nil ||
			!strings.Contains(err.Error(), "Reservoirs[0].MinLife") {
			t.Errorf("SetReservoirs(a min life past the lifetime) = %v, want a Reservoirs[0].MinLife error", err)
		}
		if err := b.q.SetReservoirs([]captchaq.ReservoirConfig{{Name: "shop", Task: demoTemplate(), Size: 3}, {Name: "cart", Task: cart, Size: 1}}); err != nil {
			t.Fatal(err)
		}
		for range 60 {
			if cs := b.q.Reservoirs(); cs[0].Stock == 3 && cs[1].Stock == 1 {
				break
			}
			testbound.Advance(time.Second)
		}
		cs := b.q.Reservoirs()
		if len(cs) != 2 || cs[0].Name != "shop" || cs[0].Hits != 1 || cs[0].Stock != 3 || cs[1].Name != "cart" || cs[1].Stock != 1 {
			t.Fatalf("after SetReservoirs: %+v, want shop (its hit kept, 3 in stock) and cart (1)", cs)
		}
		if err := b.q.SetReservoirs([]captchaq.ReservoirConfig{{Name: "cart", Task: cart, Size: 1}}); err != nil {
			t.Fatal(err)
		}
		if n, err := store.TokenCounts(testbound.Context(t)); err != nil || n["shop"] != 0 || n["cart"] != 1 {
			t.Errorf("tokens after shop's removal: %v, %v; want none of shop's, cart's 1", n, err)
		}
		if r := waitAll(t, submitAll(t, b.q, demoTask("after", "acme")))[0]; r.Status != captchaq.StatusSolved || r.Reservoir != "" {
			t.Errorf("a task of removed shop's captcha: %s from %q, want solved for itself", r.Status, r.Reservoir)
		}
	})
}
