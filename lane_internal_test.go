package captchaq

import (
	"context"
	"testing"
	"time"

	"github.com/captchaq/captchaq/internal/lane"
	"github.com/captchaq/captchaq/provider"
)

// idleProvider is never asked: routeDecision only reads the lanes.
type idleProvider struct{}

func (idleProvider) Submit(context.Context, provider.Task, string) (string, error) { return "", nil }
func (idleProvider) PollMany(context.Context, []string) ([]provider.PollResult, error) {
	return nil, nil
}

// routeDecision, exactly: a later provider takes a task an earlier one
// solves at SpillAfter and not a moment before, sooner when the deadline
// is near, at once when the earlier one is out of routing, and never past
// its hourly spend.
func TestRouteDecision(t *testing.T) {
	q, err := New(Config{Providers: []ProviderConfig{
		{Name: "main", Provider: idleProvider{}, Methods: []string{"turnstile"}},
		{Name: "backup", Provider: idleProvider{}, Methods: []string{"turnstile", "hcaptcha"},
			PricePer1000: map[string]float64{"default": 2}, SpillAfter: 5 * time.Second, MaxSpendPerHour: 0.004},
	}})
	if err != nil {
		t.Fatal(err)
	}
	main, backup := q.lanes[0], q.lanes[1]
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	state := func(method string, deadline time.Time) *taskState {
		tk := Task{ID: method, Method: method, Deadline: deadline}
		route := tk.ProviderTask().RouteMethod()
		st := &taskState{rec: Record{Task: tk}, route: route, class: q.routeClass(route), waitingSince: t0}
		st.kind, _ = tk.ProviderTask().KindFor(provider.KnownMethods)
		return st
	}
	ts, hc := state("turnstile", time.Time{}), state("hcaptcha", time.Time{})
	check := func(what string, l *lane.Lane, st *taskState, now time.Time, wantOK bool, wantRetry time.Time) {
		t.Helper()
		ok, retry := q.routeDecision(l, st, now)
		if ok != wantOK || !retry.Equal(wantRetry) {
			t.Errorf("%s: take %v, retry %v; want %v, %v", what, ok, retry, wantOK, wantRetry)
		}
	}
	check("main takes turnstile at once", main, ts, t0, true, time.Time{})
	check("main never takes hcaptcha", main, hc, t0, false, time.Time{})
	check("backup takes hcaptcha at once", backup, hc, t0, true, time.Time{})
	check("backup: turnstile 1 ns before SpillAfter", backup, ts, t0.Add(5*time.Second-1), false, t0.Add(5*time.Second))
	check("backup: turnstile at SpillAfter", backup, ts, t0.Add(5*time.Second), true, time.Time{})
	// Turnstile's median solve is 8 s: a deadline 12 s away would be
	// missed by waiting 5 s first.
	check("backup: deadline near", backup, state("turnstile", t0.Add(12*time.Second)), t0, true, time.Time{})
	check("backup: deadline far", backup, state("turnstile", t0.Add(14*time.Second)), t0, false, t0.Add(5*time.Second))
	// Failing longer than its DownAfter takes main out of routing; a
	// probe that answers brings it back.
	main.TransportFailed(t0.Add(-DownAfterDefault-time.Second), provider.ErrNetwork)
	if down, _ := main.TransportFailed(t0, provider.ErrNetwork); !down {
		t.Fatal("main failing for longer than DownAfter: not down")
	}
	check("backup: main down", backup, ts, t0, true, time.Time{})
	main.ProbeDone(true, t0)
	main.SetPause(&lane.Pause{Code: "ERROR_WRONG_USER_KEY"})
	check("backup: main paused", backup, ts, t0, true, time.Time{})
	main.Resume()
	// Two solves at 0.002 reach the 0.004 cap: the third waits until the
	// first leaves the hour.
	backup.Accepted(t0, 0.002)
	check("backup: one solve reserved", backup, hc, t0.Add(time.Minute), true, time.Time{})
	backup.StartSubmit(0.002)
	check("backup: cap reached with one in progress", backup, hc, t0.Add(time.Minute), false, t0.Add(time.Hour))
	backup.EndSubmit(0.002)
	check("backup: the first solve has left the hour", backup, hc, t0.Add(time.Hour+time.Nanosecond), true, time.Time{})
}
