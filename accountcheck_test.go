package captchaq_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/sim"
)

// refuseOne makes the simulator answer code to every submit of the task
// whose pageurl ends in /id (a task whose content the provider misreads as
// a bad key), counting them.
func refuseOne(id, code string, n *atomic.Int32) func(map[string]string) string {
	return func(p map[string]string) string {
		if strings.HasSuffix(p["pageurl"], "/"+id) {
			n.Add(1)
			return code
		}
		return ""
	}
}

// An account error answered to one task's submit while getbalance with the
// same key works: that task fails alone, the others are solved, and sending
// never pauses.
func TestAccountErrorOfOneTaskFailsItAlone(t *testing.T) {
	t.Parallel()
	var refused atomic.Int32
	var pauses atomic.Int32
	b := setup(t, sim.Config{RefuseSubmit: refuseOne("bad", "ERROR_WRONG_USER_KEY", &refused)},
		captchaq.Config{OnPause: func(error, bool) { pauses.Add(1) }})
	fs := submitAll(t, b.q, task("a", 5), task("bad", 5), task("c", 5))
	b.start(t)
	rs := waitAll(t, fs)
	for i, id := range []string{"a", "c"} {
		r := rs[[]int{0, 2}[i]]
		if r.ID != id || r.Status != captchaq.StatusSolved {
			t.Fatalf("%s: %+v", id, r)
		}
	}
	bad := rs[1]
	if bad.Status != captchaq.StatusFailed || bad.ErrorCode != captchaq.CodeAccountErrorTask || bad.Attempts != 1 {
		t.Fatalf("bad: %+v", bad)
	}
	if !strings.Contains(bad.Error, "ERROR_WRONG_USER_KEY") || !strings.Contains(bad.Error, "getbalance") {
		t.Fatalf("bad's error does not say what happened: %q", bad.Error)
	}
	if got := refused.Load(); got != 1 {
		t.Fatalf("the refused task was submitted %d times, want 1", got)
	}
	if err := b.q.Paused(); err != nil || pauses.Load() != 0 {
		t.Fatalf("paused: %v (OnPause %d times)", err, pauses.Load())
	}
	if m := b.q.Metrics(); m.Paused || m.Failed != 1 {
		t.Fatalf("metrics paused %v failed %d", m.Paused, m.Failed)
	}
}

// When the account check cannot tell (getbalance unreachable), the account
// error pauses sending as before; a task that draws it again after each
// Resume fails alone on the third, and the others are solved.
func TestTaskThatKeepsDrawingAccountErrorsFailsAlone(t *testing.T) {
	t.Parallel()
	var refused atomic.Int32
	b := setup(t, sim.Config{RefuseSubmit: refuseOne("bad", "ERROR_KEY_DOES_NOT_EXIST", &refused)}, captchaq.Config{})
	b.prov.balance = func() error { return provider.ErrNetwork }
	fs := submitAll(t, b.q, task("bad", 1))
	b.start(t)
	for round := 1; round <= 2; round++ {
		testbound.Until(t, "pause", func() bool {
			return b.q.Metrics().RetriesByReason["ERROR_KEY_DOES_NOT_EXIST"] == int64(round)
		})
		err := b.q.Paused()
		var ae *captchaq.AccountError
		if !errors.As(err, &ae) || ae.Code != "ERROR_KEY_DOES_NOT_EXIST" || !errors.Is(err, provider.ErrKeyDoesNotExist) {
			t.Fatalf("round %d: Paused() = %v", round, err)
		}
		b.q.Resume()
	}
	others := submitAll(t, b.q, task("a", 5), task("c", 5))
	r := waitAll(t, fs)[0]
	if r.Status != captchaq.StatusFailed || r.ErrorCode != captchaq.CodeAccountErrorTask || !strings.Contains(r.Error, "3 times") {
		t.Fatalf("bad: %+v", r)
	}
	if got := refused.Load(); got != 3 {
		t.Fatalf("the refused task was submitted %d times, want 3", got)
	}
	for _, r := range waitAll(t, others) {
		if r.Status != captchaq.StatusSolved {
			t.Fatalf("%s: %+v", r.ID, r)
		}
	}
	if err := b.q.Paused(); err != nil {
		t.Fatalf("still paused: %v", err)
	}
}

// A streak of ERROR_ZERO_BALANCE answers pauses sending only when
// getbalance confirms an empty balance: with funds it is a busy thread
// plan, and the task is retried until a thread is free.
func TestZeroBalanceStreakWithFundsDoesNotPause(t *testing.T) {
	t.Parallel()
	var pauses atomic.Int32
	b := setup(t, sim.Config{}, captchaq.Config{Threads: 1, OnPause: func(error, bool) { pauses.Add(1) }})
	busy := &provider.Error{Op: "submit", Code: "ERROR_ZERO_BALANCE", Class: provider.ClassNoSlot, RetryAfter: time.Millisecond, Text: "no free thread"}
	b.prov.inject = func(n int) error {
		if n <= 25 {
			return busy
		}
		return nil
	}
	b.start(t)
	r := waitAll(t, submitAll(t, b.q, task("a", 5)))[0]
	if r.Status != captchaq.StatusSolved || r.Attempts != 1 {
		t.Fatalf("a: %+v", r)
	}
	if pauses.Load() != 0 || b.q.Paused() != nil {
		t.Fatalf("paused %d times", pauses.Load())
	}
	if m := b.q.Metrics(); m.RetriesByReason["ERROR_ZERO_BALANCE"] != 25 {
		t.Fatalf("retries %v, want 25 ERROR_ZERO_BALANCE", m.RetriesByReason)
	}
}
