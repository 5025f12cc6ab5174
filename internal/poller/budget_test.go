package poller

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/captchaq/captchaq/internal/lane"
	"github.com/captchaq/captchaq/provider"
)

// slowProvider answers one task's polls: ready once solve has passed since
// start (never, when solve is 0). It counts the polls.
type slowProvider struct {
	start time.Time
	solve time.Duration

	mu    sync.Mutex
	polls int
}

func (p *slowProvider) Submit(context.Context, provider.Task, string) (string, error) { return "", nil }

func (p *slowProvider) PollMany(_ context.Context, ids []string) ([]provider.PollResult, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.polls += len(ids)
	res := make([]provider.PollResult, len(ids))
	if p.solve > 0 && time.Since(p.start) >= p.solve {
		for i := range res {
			res[i] = provider.PollResult{Ready: true, Answer: provider.Answer{Token: "tok"}}
		}
	}
	return res, nil
}

// outcome records how the one task left the poller.
type outcome struct {
	mu      sync.Mutex
	readyAt time.Duration
	err     error
	errAt   time.Duration
	start   time.Time
	forget  func() // as the task table does once it has the answer
}

func (o *outcome) Ready(_ string, _ string, _ provider.Answer, at, _ time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.readyAt == 0 {
		o.readyAt = at.Sub(o.start)
	}
	o.forget()
	return true
}
func (o *outcome) Expired(_ string, _ string, err error, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.err, o.errAt = err, at.Sub(o.start)
}
func (*outcome) Refused(string, string, error, time.Time, int) {}
func (*outcome) RoundFailed(error, time.Time, int)             {}
func (*outcome) Recovered()                                    {}
func (*outcome) Epoch() int                                    { return 0 }

// One task polled every 2 s (a fixed PollInterval, the gap of CapMonster
// Cloud) under CapMonster's limits: 120 polls, 5 minutes. An 80 s answer
// takes 40 polls, untouched by the budget. Past 60 polls (at 120 s) the
// other 60 are spread over the 180 s left, one every 180 s / 61 = 2.95 s:
// a 280 s answer (140 polls at 2 s) is fetched at 282.3 s with 115, one
// that never comes stops at exactly 120, at 297.05 s (ErrPollBudget). A
// budget without a window stops at it too; a task past its window is not
// polled again (ErrResultWindow). Without the budget the 280 s task took
// 140 polls and the others were polled for as long as the test ran.
func TestPollBudgetAndWindow(t *testing.T) {
	for _, c := range []struct {
		name           string
		solve          time.Duration
		budget         int
		window         time.Duration
		polls          int
		readyAt, errAt time.Duration
		err            error
	}{
		{name: "80s", solve: 80 * time.Second, budget: 120, window: 5 * time.Minute, polls: 40, readyAt: 80 * time.Second},
		{name: "280s", solve: 280 * time.Second, budget: 120, window: 5 * time.Minute, polls: 115, readyAt: 282295081962},
		{name: "never", budget: 120, window: 5 * time.Minute, polls: 120, err: ErrPollBudget, errAt: 297049180327},
		{name: "budget-only", budget: 10, polls: 10, err: ErrPollBudget, errAt: 20 * time.Second},
		{name: "window", solve: time.Minute, window: 30 * time.Second, polls: 14, err: ErrResultWindow, errAt: 30 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				prov := &slowProvider{start: start, solve: c.solve}
				out := &outcome{start: start}
				log := slog.New(slog.DiscardHandler)
				l := lane.New(lane.Config{Provider: prov, Threads: 1, Methods: provider.CaptchaAIMethods, DownAfter: time.Minute, Logger: log})
				gap := 2 * time.Second
				p := New(Config{
					Lane: l, PollInterval: gap, PollGap: gap, Rule: gap, Repoll: gap, Budget: c.budget, Window: c.window,
					Backoff: func(int) time.Duration { return gap }, Requests: context.Background(), Now: time.Now, Logger: log,
				}, Sink[string](out))
				out.forget = func() { p.Forget("t") }
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() { p.Run(ctx); close(done) }()
				p.Track("t", "t", "c1", provider.KindRecaptchaV2, start, time.Time{}, start.Add(gap), false, false)
				time.Sleep(10 * time.Minute) // the fake clock: every poll there is to make is made
				synctest.Wait()
				cancel()
				<-done
				out.mu.Lock()
				defer out.mu.Unlock()
				if prov.polls != c.polls || out.readyAt != c.readyAt || !errors.Is(out.err, c.err) || out.errAt != c.errAt {
					t.Fatalf("%d polls, ready at %v, err %v at %v (%d ns); want %d polls, ready at %v, err %v at %v",
						prov.polls, out.readyAt, out.err, out.errAt, int64(out.errAt), c.polls, c.readyAt, c.err, c.errAt)
				}
			})
		})
	}
}
