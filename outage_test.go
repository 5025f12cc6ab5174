package captchaq_test

import (
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

// While the provider cannot be reached its metrics say so (since when,
// how often, the last error, never answered); once it answers again, the
// tasks backing off after its network errors go at once, not after the
// outage's backoff (here 30–60 s).
func TestOutageBackoffEndsWhenTheProviderAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setupInProcess(t, sim.Config{Threads: 5}, captchaq.Config{
			RetryBackoff: time.Minute, RetryBackoffMax: time.Minute, PollInterval: 100 * time.Millisecond,
		})
		var down atomic.Bool
		down.Store(true)
		b.prov.inject = func(int) error {
			if down.Load() {
				return provider.ErrNetwork
			}
			return nil
		}
		b.start(t)
		t0 := time.Now()
		fs := submitAll(t, b.q, task("a", 5), task("b", 5))
		synctest.Wait()
		p := b.q.Metrics().Providers[0]
		if p.Failures != 2 || !p.FailingSince.Equal(t0) || p.EverAnswered || !strings.Contains(p.LastFailure, "could not be reached") {
			t.Fatalf("during the outage: failures %d since %v (want 2 since %v), ever answered %v, last %q",
				p.Failures, p.FailingSince.Sub(t0), time.Duration(0), p.EverAnswered, p.LastFailure)
		}
		for _, id := range []string{"a", "b"} {
			rec, err := b.store.Get(testbound.Context(t), id)
			if err != nil {
				t.Fatal(err)
			}
			if wait := rec.NotBefore.Sub(t0); wait < 30*time.Second {
				t.Fatalf("task %s backs off %v, want at least 30s", id, wait)
			}
		}

		testbound.Advance(time.Second)
		down.Store(false)
		back := time.Now()
		fs = append(fs, submitAll(t, b.q, task("c", 5))...)
		for i, r := range waitAll(t, fs) {
			if r.Status != captchaq.StatusSolved {
				t.Fatalf("task %d: %+v", i, r)
			}
		}
		if took := time.Since(back); took > 5*time.Second {
			t.Errorf("the tasks finished %v after the provider answered again, want within 5s (their backoff was 30s or more)", took)
		}
		p = b.q.Metrics().Providers[0]
		if p.Failures != 0 || !p.FailingSince.IsZero() || !p.EverAnswered || p.LastFailure != "" {
			t.Errorf("after the outage: failures %d, failing since %v, ever answered %v, last %q; want 0, zero, true, empty",
				p.Failures, p.FailingSince, p.EverAnswered, p.LastFailure)
		}
	})
}
