package captchaq_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/simrig"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/provider/createtask"
	"github.com/captchaq/captchaq/sim"
)

// TestCreateTaskProviderKeepsItsPollGap: a queue at its defaults on a
// createTask service that refuses a task polled again within 2 s
// (CapMonster Cloud's rule, the simulator's TaskResultGap) never trips
// it, though a fifth of the calls are answered 700 ms late, so a poll
// round's requests reach the service well apart: each id's gap runs from
// the answer to its last poll, not from the round's start. A fixed
// PollInterval shorter than the rule keeps it too.
func TestCreateTaskProviderKeepsItsPollGap(t *testing.T) {
	t.Parallel()
	for name, interval := range map[string]time.Duration{"defaults": 0, "PollInterval 500ms": 500 * time.Millisecond} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			keepsPollGap(t, interval)
		})
	}
}

func keepsPollGap(t *testing.T, interval time.Duration) {
	lat := map[provider.Kind]sim.Latency{
		provider.KindTurnstile:   {Median: 2500 * time.Millisecond, Spread: 0.5, Min: 500 * time.Millisecond, Max: 6 * time.Second},
		provider.KindRecaptchaV2: {Median: 3 * time.Second, Spread: 0.5, Min: 500 * time.Millisecond, Max: 6 * time.Second},
		provider.KindImage:       {Median: 300 * time.Millisecond, Spread: 0.3, Min: 100 * time.Millisecond, Max: time.Second},
	}
	r := simrig.Start(t, simrig.Options{Sim: sim.Config{
		Threads: 10, Latency: lat, Seed: 7, Methods: createtask.Methods, TaskResultGap: createtask.PollGapDefault,
		Faults: sim.Faults{SlowRate: 0.2, SlowDelay: 700 * time.Millisecond},
	}, CreateTask: true, Key: "ct-key", Timeout: 10 * time.Second})
	q := r.Queue(t, captchaq.Config{Threads: 10, PollInterval: interval})
	var tasks []captchaq.Task
	for i := range 30 {
		tk := task(fmt.Sprintf("t%02d", i), 5)
		switch i % 3 {
		case 1:
			tk.Method, tk.Params = "userrecaptcha", map[string]string{"googlekey": "6Le-x", "pageurl": tk.Params["pageurl"]}
		case 2:
			tk.Method, tk.Params = "base64", map[string]string{"body": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==", "textinstructions": tk.ID}
		}
		tasks = append(tasks, tk)
	}
	b := &bundle{q: q}
	b.start(t)
	rs := waitAll(t, submitAll(t, q, tasks...))
	if got := statuses(rs); got[captchaq.StatusSolved] != 30 {
		t.Fatalf("statuses %v, want 30 solved", got)
	}
	st := r.Sim.Stats()
	if st.TooManyRequests != 0 || st.Bans != 0 {
		t.Errorf("%d getTaskResult calls refused as too soon, %d bans; want none", st.TooManyRequests, st.Bans)
	}
	if st.Calls.PollSingle <= 30 || st.Faults.Slow == 0 {
		t.Errorf("%d getTaskResult calls, %d slow answers: the test needs tasks polled more than once and slow answers", st.Calls.PollSingle, st.Faults.Slow)
	}
	t.Logf("%d getTaskResult calls for 30 tasks, %d slow; ready to fetched %+v", st.Calls.PollSingle, st.Faults.Slow, st.ReadyToFetched)
}
