package captchaq_test

import (
	"fmt"
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
