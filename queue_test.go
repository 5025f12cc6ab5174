package captchaq_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/sim"
)

func TestPriorityThenFIFO(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{Threads: 1}, captchaq.Config{Threads: 1})
	// Accepted before Start, so the whole set is waiting when the first
	// thread frees up.
	fs := submitAll(t, b.q, task("p5a", 5), task("p1a", 1), task("p9", 9), task("p5b", 0), task("p1b", 1), task("p2", 2))
	m := b.q.Metrics()
	if m.QueueDepth != 6 || m.Submitted != 6 || !maps.Equal(m.DepthByPriority, map[int]int{1: 2, 2: 1, 5: 2, 9: 1}) {
		t.Fatalf("before Start: depth %d submitted %d by priority %v", m.QueueDepth, m.Submitted, m.DepthByPriority)
	}
	b.start(t)
	rs := waitAll(t, fs)
	if got := statuses(rs); got[captchaq.StatusSolved] != 6 {
		t.Fatalf("statuses %v", got)
	}
	// Priority 0 means the default, 5.
	want := []string{"p1a", "p1b", "p2", "p5a", "p5b", "p9"}
	if got := b.prov.order(); !slices.Equal(got, want) {
		t.Fatalf("submit order %v, want %v", got, want)
	}
}

func TestAgingLetsOldTaskOvertake(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{Threads: 1}, captchaq.Config{Threads: 1, AgingInterval: time.Minute})
	ctx := context.Background()
	// "old" was accepted 10 minutes ago at priority 9: aged to -1.
	if _, _, err := b.store.Enqueue(ctx, []captchaq.Task{task("old", 9)}, time.Now().Add(-10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	fs := submitAll(t, b.q, task("new1", 1), task("new0", 1))
	b.start(t)
	f, err := b.q.Submit(ctx, task("old", 9)) // known id: the existing task
	if err != nil {
		t.Fatal(err)
	}
	waitAll(t, append(fs, f))
	if got, want := b.prov.order(), []string{"old", "new1", "new0"}; !slices.Equal(got, want) {
		t.Fatalf("submit order %v, want %v", got, want)
	}
}

func TestTenantFairShare(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{Threads: 1}, captchaq.Config{Threads: 1, TenantWeights: map[string]int{"big": 3}})
	var tasks []captchaq.Task
	for _, id := range ids("big", 30) {
		tk := task(id, 5)
		tk.Tenant = "big"
		tasks = append(tasks, tk)
	}
	for _, id := range ids("small", 10) {
		tk := task(id, 5)
		tk.Tenant = "small"
		tasks = append(tasks, tk)
	}
	fs := submitAll(t, b.q, tasks...)
	b.start(t)
	waitAll(t, fs)
	order := b.prov.order()
	counts := map[string]int{}
	for _, id := range order[:20] {
		counts[id[:len(id)-2]]++
	}
	// Weight 3 to 1: 15 and 5 of the first 20, though every "big" task was
	// accepted first.
	if counts["big"] != 15 || counts["small"] != 5 {
		t.Fatalf("first 20 submits by tenant %v (order %v)", counts, order)
	}
	// FIFO within each tenant.
	var big []string
	for _, id := range order {
		if id[:3] == "big" {
			big = append(big, id)
		}
	}
	if !slices.Equal(big, ids("big", 30)) {
		t.Fatalf("big order %v", big)
	}
}

func TestDeadlineExpiredNeverSubmitted(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{Threads: 1, Latency: fastLatency(300 * time.Millisecond)}, captchaq.Config{Threads: 1})
	b.start(t)
	slow := submitAll(t, b.q, task("slow", 1))
	late := task("late", 5)
	late.TTL = 50 * time.Millisecond
	fs := submitAll(t, b.q, late)
	r := waitAll(t, fs)[0]
	if r.Status != captchaq.StatusFailed || r.ErrorCode != captchaq.CodeExpired || r.Attempts != 0 {
		t.Fatalf("late: %+v", r)
	}
	waitAll(t, slow)
	if got := b.prov.order(); !slices.Equal(got, []string{"slow"}) {
		t.Fatalf("submitted %v", got)
	}
	if n := b.srv.Stats().Accepted; n != 1 {
		t.Fatalf("simulator accepted %d submits, want 1", n)
	}
	rec, err := b.q.Get(context.Background(), "late")
	if err != nil || rec.Status != captchaq.StatusFailed {
		t.Fatalf("stored %+v %v", rec, err)
	}
}

func TestBackpressureBlocksAtMaxQueued(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{}, captchaq.Config{MaxQueued: 2})
	fs := submitAll(t, b.q, task("a", 5), task("b", 5))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := b.q.Submit(ctx, task("c", 5)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("third Submit before Start: %v, want it blocked until ctx ended", err)
	}
	// A known id does not need room.
	if _, err := b.q.Submit(ctx, task("a", 5)); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
	b.start(t)
	f, err := b.q.Submit(context.Background(), task("c", 5)) // waits for room
	if err != nil {
		t.Fatal(err)
	}
	if got := statuses(waitAll(t, append(fs, f))); got[captchaq.StatusSolved] != 3 {
		t.Fatalf("statuses %v", got)
	}
}

func TestTransientSubmitFailuresRetriedNotCounted(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{}, captchaq.Config{})
	b.prov.inject = func(n int) error {
		if n <= 2 {
			return &provider.Error{Op: "submit", Code: provider.CodeNetwork, Class: provider.ClassTransient, Text: "connection reset"}
		}
		return nil
	}
	b.start(t)
	r := waitAll(t, submitAll(t, b.q, task("a", 5)))[0]
	if r.Status != captchaq.StatusSolved || r.Attempts != 1 || r.Token == "" {
		t.Fatalf("result %+v", r)
	}
	m := b.q.Metrics()
	if m.Retries != 2 || m.RetriesByReason[provider.CodeNetwork] != 2 || m.Solved != 1 || m.Failed != 0 {
		t.Fatalf("metrics retries %d %v solved %d failed %d", m.Retries, m.RetriesByReason, m.Solved, m.Failed)
	}
}

func TestTaskErrorFailsAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{}, captchaq.Config{})
	b.prov.inject = func(n int) error { return provider.Classify("submit", "ERROR_PAGEURL", "") }
	b.start(t)
	r := waitAll(t, submitAll(t, b.q, task("a", 5)))[0]
	if r.Status != captchaq.StatusFailed || r.Attempts != 1 || r.ErrorCode != "ERROR_PAGEURL" {
		t.Fatalf("result %+v", r)
	}
	if m := b.q.Metrics(); m.Retries != 0 || m.Failed != 1 {
		t.Fatalf("retries %d failed %d", m.Retries, m.Failed)
	}
	var dead []string
	b.store.DeadLetters(context.Background(), captchaq.DeadLetterFilter{ErrorCode: "ERROR_PAGEURL"}, func(r captchaq.Record) error {
		dead = append(dead, r.Task.ID)
		return nil
	})
	if !slices.Equal(dead, []string{"a"}) {
		t.Fatalf("dead letters %v", dead)
	}
}

func TestUnsolvableRetriedMaxAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{UnsolvableRate: 1}, captchaq.Config{MaxAttempts: 3})
	b.start(t)
	two := task("two", 5)
	two.MaxAttempts = 2
	rs := waitAll(t, submitAll(t, b.q, task("three", 5), two))
	for i, want := range []int{3, 2} {
		if r := rs[i]; r.Status != captchaq.StatusFailed || r.Attempts != want || r.ErrorCode != "ERROR_CAPTCHA_UNSOLVABLE" {
			t.Fatalf("result %d: %+v", i, r)
		}
	}
	if n := b.srv.Stats().Accepted; n != 5 {
		t.Fatalf("simulator accepted %d, want 5", n)
	}
	if m := b.q.Metrics(); m.RetriesByReason["ERROR_CAPTCHA_UNSOLVABLE"] != 3 {
		t.Fatalf("retries %v", m.RetriesByReason)
	}
}

func TestBadKeyPausesEverythingAndKeepsTasks(t *testing.T) {
	t.Parallel()
	paused := make(chan bool, 10)
	b := setup(t, sim.Config{}, captchaq.Config{OnPause: func(err error, permanent bool) {
		if errors.Is(err, provider.ErrWrongUserKey) {
			paused <- permanent
		}
	}})
	b.srv.SetAccount(sim.Account{BadKey: true})
	// All three wait before Start, so one dispatch pass sends them together.
	fs := submitAll(t, b.q, task("a", 5), task("b", 5), task("c", 5))
	b.start(t)
	// Every submit answered and requeued: none in progress any more.
	testbound.Until(t, "pause", func() bool { return b.q.Metrics().RetriesByReason["ERROR_WRONG_USER_KEY"] == 3 })
	err := b.q.Paused()
	if !errors.Is(err, captchaq.ErrPaused) || !errors.Is(err, provider.ErrWrongUserKey) {
		t.Fatalf("Paused() = %v", err)
	}
	var ae *captchaq.AccountError
	if !errors.As(err, &ae) || ae.Code != "ERROR_WRONG_USER_KEY" || !ae.Until.IsZero() {
		t.Fatalf("AccountError %+v", ae)
	}
	m := b.q.Metrics()
	if !m.Paused || m.Failed != 0 || m.PausedReason == "" {
		t.Fatalf("metrics paused %v failed %d reason %q", m.Paused, m.Failed, m.PausedReason)
	}
	var pending []string
	b.store.Pending(context.Background(), func(r captchaq.Record) error {
		pending = append(pending, r.Task.ID)
		return nil
	})
	if !slices.Equal(pending, []string{"a", "b", "c"}) {
		t.Fatalf("pending %v", pending)
	}
	// Stays paused: no further submits reach the provider.
	calls := b.srv.Stats().Calls.Submit
	b.srv.SetAccount(sim.Account{})
	if b.q.Paused() == nil {
		t.Fatal("pause lifted without Resume")
	}
	if got := b.srv.Stats().Calls.Submit; got != calls {
		t.Fatalf("submits while paused: %d → %d", calls, got)
	}
	b.q.Resume()
	if got := statuses(waitAll(t, fs)); got[captchaq.StatusSolved] != 3 {
		t.Fatalf("after Resume: %v", got)
	}
	if len(paused) != 1 || !<-paused {
		t.Fatal("OnPause not called exactly once with permanent=true")
	}
}

func TestTemporaryBanResumesByItself(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{}, captchaq.Config{})
	ban := &provider.Error{Op: "submit", Code: "IP_BANNED", Class: provider.ClassAccount, RetryAfter: 30 * time.Millisecond, Text: "banned"}
	b.prov.inject = func(n int) error {
		if n == 1 {
			return ban
		}
		return nil
	}
	// The account check sees the ban too: it is the account's, not the task's.
	b.prov.balance = func() error { return ban }
	b.start(t)
	r := waitAll(t, submitAll(t, b.q, task("a", 5)))[0]
	if r.Status != captchaq.StatusSolved || r.Attempts != 1 {
		t.Fatalf("result %+v", r)
	}
	if b.q.Paused() != nil {
		t.Fatal("still paused")
	}
}

func TestNeverMoreThanThreadsInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{Threads: 20}, captchaq.Config{Threads: 3})
	b.start(t)
	var tasks []captchaq.Task
	for _, id := range ids("t", 30) {
		tasks = append(tasks, task(id, 5))
	}
	rs := waitAll(t, submitAll(t, b.q, tasks...))
	if got := statuses(rs); got[captchaq.StatusSolved] != 30 {
		t.Fatalf("statuses %v", got)
	}
	st := b.srv.Stats()
	if st.PeakThreadsInUse != 3 || st.Accepted != 30 || st.NoSlot != 0 {
		t.Fatalf("peak %d accepted %d noslot %d", st.PeakThreadsInUse, st.Accepted, st.NoSlot)
	}
}

func TestAIMDUnderNoSlot(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{Threads: 3}, captchaq.Config{Threads: 12})
	// Keep the simulator's advice (wait ≥5 s) but short for the test.
	inner := b.prov.Provider
	b.prov.Provider = shortNoSlot{inner}
	b.start(t)
	var tasks []captchaq.Task
	for _, id := range ids("t", 30) {
		tasks = append(tasks, task(id, 5))
	}
	rs := waitAll(t, submitAll(t, b.q, tasks...))
	for _, r := range rs {
		if r.Status != captchaq.StatusSolved || r.Attempts != 1 {
			t.Fatalf("result %+v", r)
		}
	}
	st := b.srv.Stats()
	m := b.q.Metrics()
	if st.NoSlot == 0 || m.RetriesByReason["ERROR_NO_SLOT_AVAILABLE"] != st.NoSlot {
		t.Fatalf("simulator no-slot %d, queue retries %v", st.NoSlot, m.RetriesByReason)
	}
	// A no-slot answer halves the window: far fewer refusals than submits.
	if st.NoSlot >= st.Accepted {
		t.Fatalf("no-slot %d vs accepted %d: window did not shrink", st.NoSlot, st.Accepted)
	}
}

type shortNoSlot struct{ captchaq.Provider }

func (s shortNoSlot) Submit(ctx context.Context, t provider.Task, pb string) (string, error) {
	id, err := s.Provider.Submit(ctx, t, pb)
	var pe *provider.Error
	if errors.As(err, &pe) && pe.Class == provider.ClassNoSlot {
		c := *pe
		c.RetryAfter = 20 * time.Millisecond
		return "", &c
	}
	return id, err
}

func (s shortNoSlot) Requests() int64 { return s.Provider.(interface{ Requests() int64 }).Requests() }

// The clock is synctest's: the count of poll requests does not depend on
// how fast the machine submits.
func TestInFlightTasksShareBulkPolls(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupInProcess(t, sim.Config{Threads: 20, Latency: fastLatency(100 * time.Millisecond)}, captchaq.Config{Threads: 20, PollInterval: 40 * time.Millisecond})
		var tasks []captchaq.Task
		for _, id := range ids("b", 20) {
			tasks = append(tasks, task(id, 5))
		}
		fs := submitAll(t, b.q, tasks...)
		b.start(t)
		if got := statuses(waitAll(t, fs)); got[captchaq.StatusSolved] != 20 {
			t.Fatalf("statuses %v", got)
		}
		st := b.srv.Stats()
		polls := st.Calls.PollBulk + st.Calls.PollSingle
		// Each task is polled at least once, yet the polls are shared: fewer
		// poll requests than tasks.
		if st.Fetched != 20 || st.IDsPolled < 20 || polls >= 20 || st.Calls.PollBulk == 0 {
			t.Fatalf("fetched %d, ids polled %d in %d bulk + %d single requests", st.Fetched, st.IDsPolled, st.Calls.PollBulk, st.Calls.PollSingle)
		}
		m := b.q.Metrics()
		if m.Solved != 20 || m.Failed != 0 || m.SuccessRate != 1 || m.QueueDepth != 0 || m.ThreadsInUse != 0 || m.Threads != 20 {
			t.Fatalf("metrics %+v", m)
		}
		if m.Requests != st.Calls.Submit+polls {
			t.Fatalf("queue counted %d requests, simulator saw %d", m.Requests, st.Calls.Submit+polls)
		}
	})
}

// The clock is synctest's: rounds are counted against fake time.
func TestPollRequestRateBounded(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		spread := map[provider.Kind]sim.Latency{provider.KindTurnstile: {Median: 100 * time.Millisecond, Spread: 0.8, Min: 20 * time.Millisecond, Max: 400 * time.Millisecond}}
		const interval = 40 * time.Millisecond
		b := setupInProcess(t, sim.Config{Threads: 30, Latency: spread}, captchaq.Config{Threads: 30, PollInterval: interval})
		var tasks []captchaq.Task
		for _, id := range ids("r", 30) {
			tasks = append(tasks, task(id, 5))
		}
		fs := submitAll(t, b.q, tasks...)
		start := time.Now()
		b.start(t)
		if got := statuses(waitAll(t, fs)); got[captchaq.StatusSolved] != 30 {
			t.Fatalf("statuses %v", got)
		}
		elapsed := time.Since(start)
		st := b.srv.Stats()
		polls := st.Calls.PollBulk + st.Calls.PollSingle
		// Rounds start at least interval/4 apart and each is one request here
		// (fewer than 100 ids).
		if limit := int64(elapsed/(interval/4)) + 1; polls > limit {
			t.Fatalf("%d poll requests in %v, more than one per %v (%d)", polls, elapsed, interval/4, limit)
		}
		if st.Fetched != 30 {
			t.Fatalf("fetched %d", st.Fetched)
		}
	})
}

func TestZeroBalanceStreakPauses(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{}, captchaq.Config{Threads: 1})
	b.srv.SetAccount(sim.Account{ZeroBalance: true})
	b.prov.Provider = shortNoSlot{b.prov.Provider}
	b.start(t)
	fs := submitAll(t, b.q, task("a", 5))
	testbound.Until(t, "pause", func() bool { return b.q.Paused() != nil })
	var ae *captchaq.AccountError
	if err := b.q.Paused(); !errors.As(err, &ae) || ae.Code != "ERROR_ZERO_BALANCE" || ae.Until.IsZero() {
		t.Fatalf("Paused() = %v", err)
	}
	if n := b.srv.Stats().Calls.Submit; n != 10 {
		t.Fatalf("refused submits before the pause: %d, want 10", n)
	}
	b.srv.SetAccount(sim.Account{})
	b.q.Resume()
	if r := waitAll(t, fs)[0]; r.Status != captchaq.StatusSolved || r.Attempts != 1 {
		t.Fatalf("after Resume: %+v", r)
	}
}

// TestAdmitHoldsBackTasksWithoutAttempts: a task its Fleet does not admit is not
// sent and counts no attempt; it is asked about again until admitted.
// The clock is synctest's: the free task's submit ends before the held
// one is admitted, however slow the machine.
func TestAdmitHoldsBackTasksWithoutAttempts(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		asks := map[string]int{}
		b := setupInProcess(t, sim.Config{}, captchaq.Config{Threads: 2}, testFleet{admit: func(id string) bool {
			mu.Lock()
			defer mu.Unlock()
			asks[id]++
			return id != "held" || asks[id] > 3
		}})
		b.start(t)
		rs := waitAll(t, submitAll(t, b.q, task("held", 1), task("free", 5)))
		for _, r := range rs {
			if r.Status != captchaq.StatusSolved || r.Attempts != 1 {
				t.Errorf("%s: status %s attempts %d, want solved on attempt 1", r.ID, r.Status, r.Attempts)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if asks["held"] != 4 || asks["free"] != 1 {
			t.Errorf("Admit asked %v, want held 4 times and free once", asks)
		}
		if got := b.prov.order(); !slices.Equal(got, []string{"free", "held"}) {
			t.Errorf("submit order %v, want [free held]", got)
		}
		if m := b.q.Metrics(); m.Retries != 0 || m.Submitted != 2 || m.Solved != 2 {
			t.Errorf("metrics retries %d submitted %d solved %d, want 0 2 2", m.Retries, m.Submitted, m.Solved)
		}
	})
}
