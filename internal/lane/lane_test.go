package lane

import (
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/captchaq/captchaq/provider"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func newLane(c Config) *Lane {
	c.Logger = slog.New(slog.DiscardHandler)
	c.Threads = max(c.Threads, 1)
	if c.DownAfter == 0 {
		c.DownAfter = 30 * time.Second
	}
	return New(c)
}

// A named provider's ids are stored as "name:id" and its pingback URL
// names it; a queue of one unnamed provider keeps both bare. The sig
// given is added after the name.
func TestStoredIDAndPingbackURL(t *testing.T) {
	named, bare := newLane(Config{Name: "backup"}), newLane(Config{})
	for _, c := range []struct{ got, want string }{
		{named.StoredID("42"), "backup:42"},
		{bare.StoredID("42"), "42"},
		{named.PingbackURL("https://h.example/pb", ""), "https://h.example/pb?provider=backup"},
		{named.PingbackURL("https://h.example/pb?s=1", "ab12"), "https://h.example/pb?s=1&provider=backup&sig=ab12"},
		{named.PingbackURL("", "ab12"), ""},
		{bare.PingbackURL("https://h.example/pb", ""), "https://h.example/pb"},
		{bare.PingbackURL("https://h.example/pb", "ab12"), "https://h.example/pb?sig=ab12"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// A pause with an end lifts by itself at that end, not a moment before;
// one without stays until Resume.
func TestPauseLiftsAtItsEnd(t *testing.T) {
	l := newLane(Config{})
	if !l.Health.SetPause(&Pause{Code: "ERROR_IP_BANNED", Until: t0.Add(time.Minute)}) {
		t.Fatal("first pause: not first")
	}
	if l.Health.Routable(t0.Add(time.Minute - 1)) {
		t.Fatal("routable 1 ns before the pause ends")
	}
	if until, blocked := l.Health.SendHold(t0); !blocked || !until.Equal(t0.Add(time.Minute)) {
		t.Fatalf("SendHold %v %v, want held until the pause ends", until, blocked)
	}
	if !l.Health.Routable(t0.Add(time.Minute)) || l.Health.Paused(t0.Add(time.Minute)) != nil {
		t.Fatal("pause in force at its end")
	}
	l.Health.SetPause(&Pause{Code: "ERROR_WRONG_USER_KEY"})
	if l.Health.Routable(t0.Add(24 * time.Hour)) {
		t.Fatal("a pause with no end lifted by itself")
	}
	if !l.Health.Resume() || l.Health.Paused(t0) != nil {
		t.Fatal("Resume did not lift the pause")
	}
}

// Only a lane that may go down goes down, after failing longer than its
// DownAfter; a probe is due DownAfter later, and one that answers brings
// it back.
func TestDownAndProbe(t *testing.T) {
	alone := newLane(Config{})
	alone.Health.TransportFailed(t0, provider.ErrNetwork)
	if down, _ := alone.Health.TransportFailed(t0.Add(time.Hour), provider.ErrNetwork); down {
		t.Fatal("the only lane went down")
	}
	l := newLane(Config{MayGoDown: true, DownAfter: 10 * time.Second})
	l.Health.TransportFailed(t0, provider.ErrNetwork)
	if down, _ := l.Health.TransportFailed(t0.Add(10*time.Second), provider.ErrNetwork); down {
		t.Fatal("down at DownAfter, want only past it")
	}
	down, wentDown := l.Health.TransportFailed(t0.Add(10*time.Second+1), provider.ErrNetwork)
	if !down || !wentDown || l.Health.Routable(t0.Add(11*time.Second)) {
		t.Fatalf("down %v, went down %v: want both, out of routing", down, wentDown)
	}
	if _, wentDown := l.Health.TransportFailed(t0.Add(11*time.Second), provider.ErrNetwork); wentDown {
		t.Fatal("went down twice")
	}
	if start, next := l.Health.ProbeDue(t0.Add(11 * time.Second)); start || !next.Equal(t0.Add(20*time.Second+1)) {
		t.Fatalf("probe start %v, next %v; want next at DownAfter after going down", start, next)
	}
	if start, _ := l.Health.ProbeDue(t0.Add(20*time.Second + 1)); !start {
		t.Fatal("probe not started when due")
	}
	if start, next := l.Health.ProbeDue(t0.Add(time.Hour)); start || !next.IsZero() {
		t.Fatal("a second probe while one runs")
	}
	l.Health.ProbeDone(false, t0.Add(21*time.Second))
	if _, next := l.Health.ProbeDue(t0.Add(21 * time.Second)); !next.Equal(t0.Add(31 * time.Second)) {
		t.Fatalf("after a failed probe the next is at %v, want DownAfter later", next)
	}
	l.Health.ProbeDone(true, t0.Add(31*time.Second))
	if !l.Health.Routable(t0.Add(31 * time.Second)) {
		t.Fatal("a probe answered and the lane is still out of routing")
	}
}

// The hourly bound counts solves accepted in the last hour and those in
// progress.
func TestAffords(t *testing.T) {
	l := newLane(Config{PricePer1000: map[string]float64{"default": 2, "turnstile": 1}, MaxSpendPerHour: 0.004})
	if p := l.PriceOf("turnstile"); p != 0.001 {
		t.Fatalf("turnstile price %v, want 0.001", p)
	}
	if p := l.PriceOf("hcaptcha"); p != 0.002 {
		t.Fatalf("default price %v, want 0.002", p)
	}
	l.Ledger.Accepted(t0, 0.002)
	if ok, _ := l.Ledger.Affords(t0.Add(time.Minute), 0.002); !ok {
		t.Fatal("one solve reserved of two: refused")
	}
	l.Ledger.StartSubmit(0.002)
	if ok, retry := l.Ledger.Affords(t0.Add(time.Minute), 0.002); ok || !retry.Equal(t0.Add(time.Hour)) {
		t.Fatalf("cap reached: ok %v, retry %v; want refused until the first leaves the hour", ok, retry)
	}
	l.Ledger.EndSubmit(0.002)
	if s := l.Stats(t0.Add(time.Minute)); s.Submitted != 1 || s.SpendLastHour != 0.002 {
		t.Fatalf("stats %+v, want 1 submitted, 0.002 in the last hour", s)
	}
	if ok, _ := l.Ledger.Affords(t0.Add(time.Hour+1), 0.002); !ok {
		t.Fatal("the first solve left the hour: refused")
	}
}

// Ten zero-balance refusals in a row, with nothing in flight, pause; one
// with a task in flight, or another code, starts the count again.
func TestZeroBalanceStreak(t *testing.T) {
	l := newLane(Config{})
	zero := provider.ErrZeroBalance.Code
	for i := range ZeroBalanceStreak - 1 {
		if l.Ledger.ZeroBalance(zero, 0) {
			t.Fatalf("paused after %d refusals", i+1)
		}
	}
	if l.Ledger.ZeroBalance(zero, 1) {
		t.Fatal("paused with a task in flight")
	}
	for i := range ZeroBalanceStreak {
		if got := l.Ledger.ZeroBalance(zero, 0); got != (i == ZeroBalanceStreak-1) {
			t.Fatalf("refusal %d: pause %v", i+1, got)
		}
	}
}

func TestTransportFailure(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("in.php: %w", provider.ErrNetwork), true},
		{provider.ErrHTTP5xx, true},
		{provider.ErrBadAnswer, true},
		{provider.ErrZeroBalance, false},
		{errors.New("other"), false},
	} {
		if got := TransportFailure(c.err); got != c.want {
			t.Errorf("TransportFailure(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// Pauses: sending stops for good when every lane is paused, and OnPause's
// news (All) comes once; an answer to a request sent before a Resume is
// stale; an expired pause lifts itself, and with it the "every lane".
func TestPausesTellEveryLanePausedOnce(t *testing.T) {
	a, b := newLane(Config{Name: "a"}), newLane(Config{Name: "b"})
	ps := NewPauses([]*Lane{a, b})
	key := &Pause{Code: "ERROR_KEY_DOES_NOT_EXIST"}
	ban := &Pause{Code: "ERROR_IP_BANNED", Until: t0.Add(time.Minute)}

	if got := ps.Set(a, key, ps.Epoch(), t0); got != (Paused{First: true}) {
		t.Fatalf("a paused alone: %+v, want first only", got)
	}
	if l, p := ps.All(t0); l != nil || p != nil {
		t.Fatalf("one lane of two paused: All = %v, %v, want none", l, p)
	}
	if got := ps.Set(b, ban, ps.Epoch(), t0); got != (Paused{First: true, All: true}) {
		t.Fatalf("b paused too: %+v, want first and all, not permanent (b's lifts)", got)
	}
	if l, p := ps.All(t0); l != a || p != key {
		t.Fatalf("All = %v, %v, want a's pause (the first lane's)", l, p)
	}
	if got := ps.Set(b, ban, ps.Epoch(), t0); got != (Paused{}) {
		t.Fatalf("b paused again: %+v, want nothing new", got)
	}
	// b's ban runs out: not every lane is paused any more.
	if l, p := ps.All(t0.Add(time.Minute)); l != nil || p != nil {
		t.Fatalf("after b's ban: All = %v, %v, want none", l, p)
	}

	sent := ps.Epoch()
	if !ps.Resume() {
		t.Fatal("Resume with a paused: want was")
	}
	if got := ps.Set(a, key, sent, t0); got != (Paused{Stale: true}) || a.Health.Paused(t0) != nil {
		t.Fatalf("an answer to a request sent before Resume: %+v, a paused %v; want stale, a sending", got, a.Health.Paused(t0))
	}
	ps.Set(a, key, ps.Epoch(), t0)
	if got := ps.Set(b, key, ps.Epoch(), t0); !got.All || !got.Permanent {
		t.Fatalf("both paused by account errors that do not lift: %+v, want all, permanent", got)
	}
	if ps.Resume(); ps.Resume() {
		t.Fatal("a second Resume: want nothing lifted")
	}
}
