package captchaq_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/sim"
)

// TestPollBudgetEndsTheAttempt: a task whose answer (5 s) outlasts its
// provider's poll budget (5 polls at a 100 ms PollInterval) or its result
// window (1 s) is polled no further and submitted again; once its two
// attempts are spent it fails with the limit's code. The simulator counts
// two submits and 5 polls of one captcha id at most, or 9 within its
// window. Without the limits the task was solved on its first attempt
// after 50 polls.
func TestPollBudgetEndsTheAttempt(t *testing.T) {
	for _, c := range []struct {
		name     string
		budget   int
		window   time.Duration
		code     string
		maxPolls int64
	}{
		{"budget", 5, 0, captchaq.CodePollBudget, 5},
		{"window", 0, time.Second, captchaq.CodeResultWindow, 9},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv, err := sim.New(sim.Config{Latency: fastLatency(5 * time.Second), Seed: 1, PollBan: sim.PollBan{Disabled: true}})
				if err != nil {
					t.Fatal(err)
				}
				defer srv.Close()
				hc := srv.InProcessClient()
				client, err := provider.NewClient(provider.ClientConfig{BaseURL: sim.InProcessBaseURL, Key: "test-key", HTTPClient: hc})
				if err != nil {
					t.Fatal(err)
				}
				q, err := captchaq.New(captchaq.Config{
					Providers:    []captchaq.ProviderConfig{{Name: "p", Provider: client, Threads: 1, PollBudget: c.budget, ResultWindow: c.window}},
					PollInterval: 100 * time.Millisecond, MaxAttempts: 2, RetryBackoff: 10 * time.Millisecond, RetryBackoffMax: 10 * time.Millisecond,
				})
				if err != nil {
					t.Fatal(err)
				}
				defer q.Close()
				if err := q.Start(t.Context()); err != nil {
					t.Fatal(err)
				}
				rs, err := q.SolveBatch(testbound.Context(t), []captchaq.Task{task("slow", 5)})
				if err != nil {
					t.Fatal(err)
				}
				st := srv.Stats()
				if r := rs[0]; r.Status != captchaq.StatusFailed || r.ErrorCode != c.code || r.Attempts != 2 || st.Accepted != 2 || st.MaxPollsPerTask != c.maxPolls {
					t.Fatalf("%s, code %q, %d attempts; %d submits, %d polls at most a task; want failed, %q, 2 attempts, 2 submits, %d polls",
						r.Status, r.ErrorCode, r.Attempts, st.Accepted, st.MaxPollsPerTask, c.code, c.maxPolls)
				}
			})
		})
	}
}
