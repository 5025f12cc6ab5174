package lane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/captchaq/captchaq/provider"
)

// newSet builds a Set of cs with a discarding logger and the queue's
// defaults for Threads and DownAfter.
func newSet(cs ...Config) *Set {
	for i := range cs {
		cs[i].Logger = slog.New(slog.DiscardHandler)
		cs[i].Threads = max(cs[i].Threads, 1)
		if cs[i].DownAfter == 0 {
			cs[i].DownAfter = 30 * time.Second
		}
	}
	return NewSet(cs)
}

// NewSet places each lane by its index; only a set of several lets a lane
// go down, and only one unnamed lane is single.
func TestNewSet(t *testing.T) {
	one := newSet(Config{Index: 5, MayGoDown: true})
	if l := one.Lanes()[0]; l.Index() != 0 || l.MayGoDown() || !one.Single() {
		t.Fatalf("one unnamed lane: index %d, may go down %v, single %v; want 0, false, true", l.Index(), l.MayGoDown(), one.Single())
	}
	if newSet(Config{Name: "only"}).Single() {
		t.Fatal("one named lane: single")
	}
	two := newSet(Config{Name: "a"}, Config{Name: "b"})
	for i, l := range two.Lanes() {
		if l.Index() != i || !l.MayGoDown() {
			t.Fatalf("lane %d of two: index %d, may go down %v", i, l.Index(), l.MayGoDown())
		}
	}
	if two.Single() || two.Named("b") != two.Lanes()[1] || two.Named("c") != nil {
		t.Fatal("Named: want b found, c not")
	}
}

// A stored id finds its lane by its "name:" prefix; an id with no known
// prefix is the first lane's, whole; a valid name the set lacks is no
// lane's. A single lane's ids are never split.
func TestSetOf(t *testing.T) {
	two := newSet(Config{Name: "main"}, Config{Name: "backup"})
	one := newSet(Config{})
	for _, c := range []struct {
		set    *Set
		stored string
		lane   int // -1: none
		id     string
	}{
		{two, "backup:42", 1, "42"},
		{two, "main:42", 0, "42"},
		{two, "42", 0, "42"},
		{two, "gone:42", -1, ""},
		{two, "a b:42", 0, "a b:42"},
		{two, ":42", 0, ":42"},
		{one, "backup:42", 0, "backup:42"},
	} {
		l, id, ok := c.set.Of(c.stored)
		if c.lane < 0 {
			if ok || l != nil {
				t.Errorf("Of(%q) = %v, %q, %v; want no lane", c.stored, l, id, ok)
			}
			continue
		}
		if !ok || l != c.set.Lanes()[c.lane] || id != c.id {
			t.Errorf("Of(%q) = lane %v, %q, %v; want lane %d, %q", c.stored, l, id, ok, c.lane, c.id)
		}
	}
}

// Route, exactly: a task goes to the first lane that solves it; a later
// lane takes it at its SpillAfter and not a moment before, sooner when the
// deadline is near, at once when every earlier lane that solves it is out
// of routing, and never past its hourly spend.
func TestSetRoute(t *testing.T) {
	s := newSet(
		Config{Name: "main", Methods: []string{"turnstile"}},
		Config{Name: "backup", Methods: []string{"turnstile", "hcaptcha"},
			PricePer1000: map[string]float64{"default": 2}, SpillAfter: 5 * time.Second, MaxSpendPerHour: 0.004},
		Config{Name: "last", Methods: []string{"turnstile"}, SpillAfter: 10 * time.Second},
	)
	main, backup, last := s.Lanes()[0], s.Lanes()[1], s.Lanes()[2]
	task := func(method string, deadline time.Time) Waiting {
		return Waiting{Class: s.Class(method), Route: method, Kind: provider.Kind(method), Since: t0, Deadline: deadline}
	}
	ts, hc := task("turnstile", time.Time{}), task("hcaptcha", time.Time{})
	if ts.Class != 0b111 || hc.Class != 0b010 {
		t.Fatalf("classes %b, %b; want 111, 010", ts.Class, hc.Class)
	}
	check := func(what string, l *Lane, w Waiting, now time.Time, wantOK bool, wantRetry time.Time) {
		t.Helper()
		ok, retry := s.Route(l, w, now)
		if ok != wantOK || !retry.Equal(wantRetry) {
			t.Errorf("%s: take %v, retry %v; want %v, %v", what, ok, retry, wantOK, wantRetry)
		}
	}
	check("main takes turnstile at once", main, ts, t0, true, time.Time{})
	check("main never takes hcaptcha", main, hc, t0, false, time.Time{})
	check("backup takes hcaptcha at once", backup, hc, t0, true, time.Time{})
	check("backup: turnstile 1 ns before SpillAfter", backup, ts, t0.Add(5*time.Second-1), false, t0.Add(5*time.Second))
	check("backup: turnstile at SpillAfter", backup, ts, t0.Add(5*time.Second), true, time.Time{})
	check("last: turnstile at backup's SpillAfter", last, ts, t0.Add(5*time.Second), false, t0.Add(10*time.Second))
	// Turnstile's median solve is 8 s: a deadline 12 s away would be
	// missed by waiting 5 s first.
	check("backup: deadline near", backup, task("turnstile", t0.Add(12*time.Second)), t0, true, time.Time{})
	check("backup: deadline far", backup, task("turnstile", t0.Add(14*time.Second)), t0, false, t0.Add(5*time.Second))

	// Fail-over: main failing longer than its DownAfter leaves routing;
	// backup takes its tasks at once, last still waits for backup.
	main.Health.TransportFailed(t0.Add(-31*time.Second), provider.ErrNetwork)
	if down, _ := main.Health.TransportFailed(t0, provider.ErrNetwork); !down {
		t.Fatal("main failing for longer than DownAfter: not down")
	}
	check("backup: main down", backup, ts, t0, true, time.Time{})
	check("last: main down, backup up", last, ts, t0, false, t0.Add(10*time.Second))
	backup.Health.SetPause(&Pause{Code: "ERROR_WRONG_USER_KEY"})
	check("last: main down, backup paused", last, ts, t0, true, time.Time{})
	backup.Health.Resume()
	main.Health.ProbeDone(true, t0)
	check("backup: main back", backup, ts, t0, false, t0.Add(5*time.Second))

	// Two solves at 0.002 reach the 0.004 cap: the third waits until the
	// first leaves the hour.
	backup.Ledger.Accepted(t0, 0.002)
	check("backup: one solve reserved", backup, hc, t0.Add(time.Minute), true, time.Time{})
	backup.Ledger.StartSubmit(0.002)
	check("backup: cap reached with one in progress", backup, hc, t0.Add(time.Minute), false, t0.Add(time.Hour))
	backup.Ledger.EndSubmit(0.002)
	check("backup: the first solve has left the hour", backup, hc, t0.Add(time.Hour+time.Nanosecond), true, time.Time{})
}

// Probes starts the probe of each lane that is due, once, and tells when
// the next is due.
func TestSetProbes(t *testing.T) {
	s := newSet(Config{Name: "a", DownAfter: 20 * time.Second}, Config{Name: "b", DownAfter: 10 * time.Second}, Config{Name: "c"})
	a, b := s.Lanes()[0], s.Lanes()[1]
	for _, l := range []*Lane{a, b} {
		l.Health.TransportFailed(t0, provider.ErrNetwork)
		l.Health.TransportFailed(t0.Add(21*time.Second), provider.ErrNetwork) // down; probe due DownAfter later
	}
	var started []string
	start := func(l *Lane) { started = append(started, l.Name()) }
	if next := s.Probes(t0.Add(21*time.Second), start); len(started) != 0 || !next.Equal(t0.Add(31*time.Second)) {
		t.Fatalf("before any is due: started %v, next %v; want none, b's at +31s", started, next)
	}
	if next := s.Probes(t0.Add(31*time.Second), start); !slices.Equal(started, []string{"b"}) || !next.Equal(t0.Add(41*time.Second)) {
		t.Fatalf("b due: started %v, next %v; want b, a's at +41s", started, next)
	}
	if next := s.Probes(t0.Add(41*time.Second), start); !slices.Equal(started, []string{"b", "a"}) || !next.IsZero() {
		t.Fatalf("a due, b's running: started %v, next %v; want b then a, none next", started, next)
	}
}

// balanceProvider answers getbalance with funds or err.
type balanceProvider struct {
	pollOnly
	funds float64
	err   error
}

func (p balanceProvider) Balance(context.Context) (float64, error) { return p.funds, p.err }

// pollOnly is a provider with no Balance: a poll answers pollErr.
type pollOnly struct{ pollErr error }

func (p pollOnly) Submit(context.Context, provider.Task, string) (string, error) { return "", nil }

func (p pollOnly) PollMany(context.Context, []string) ([]provider.PollResult, error) {
	return nil, p.pollErr
}

// A probe brings a lane back on getbalance's answer (with funds, for a
// priced lane), or, with no Balance, on any answer to a poll.
func TestProbe(t *testing.T) {
	priced := map[string]float64{"default": 1}
	for _, c := range []struct {
		what  string
		prov  Provider
		price map[string]float64
		want  bool
	}{
		{"balance answers, flat rate, no funds", balanceProvider{}, nil, true},
		{"balance answers, priced, no funds", balanceProvider{}, priced, false},
		{"balance answers, priced, funds", balanceProvider{funds: 1}, priced, true},
		{"balance refused", balanceProvider{funds: 1, err: provider.ErrWrongUserKey}, nil, false},
		{"balance unreachable", balanceProvider{funds: 1, err: provider.ErrNetwork}, nil, false},
		{"no balance, poll answers", pollOnly{}, nil, true},
		{"no balance, poll fails", pollOnly{pollErr: provider.ErrHTTP5xx}, nil, false},
	} {
		l := newLane(Config{Provider: c.prov, PricePer1000: c.price})
		if got := l.Probe(context.Background()); got != c.want {
			t.Errorf("%s: up %v, want %v", c.what, got, c.want)
		}
	}
}

// PauseFor keeps the provider's code and pauses for the longer of d and
// the error's RetryAfter; with neither, until Resume.
func TestPauseFor(t *testing.T) {
	ban := fmt.Errorf("submit: %w", provider.ErrIPBanned)
	for _, c := range []struct {
		err       error
		d         time.Duration
		code      string
		untilFrom time.Duration // 0: no end
	}{
		{provider.ErrWrongUserKey, 0, "ERROR_WRONG_USER_KEY", 0},
		{ban, 0, "IP_BANNED", provider.IPBannedRetryAfter},
		{ban, provider.IPBannedRetryAfter + time.Minute, "IP_BANNED", provider.IPBannedRetryAfter + time.Minute},
		{provider.ErrZeroBalance, time.Second, "ERROR_ZERO_BALANCE", provider.ZeroBalanceRetryAfter},
		{errors.New("no code"), time.Minute, "", time.Minute},
	} {
		p := PauseFor(c.err, c.d, t0)
		want := time.Time{}
		if c.untilFrom > 0 {
			want = t0.Add(c.untilFrom)
		}
		if p.Code != c.code || !p.Until.Equal(want) || p.Err != c.err {
			t.Errorf("PauseFor(%v, %v) = %q until %v; want %q until %v", c.err, c.d, p.Code, p.Until, c.code, want)
		}
	}
}
