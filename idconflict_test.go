package captchaq_test

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/sim"
)

func TestFingerprintIgnoresQueueFieldsAndKeepsCase(t *testing.T) {
	t.Parallel()
	a := task("a", 1)
	b := a
	b.ID, b.Priority, b.Tenant, b.MaxAttempts, b.Pingback = "b", 9, "other", 3, "https://cb.example/x"
	b.Deadline = time.Now()
	if a.Fingerprint() != b.Fingerprint() {
		t.Fatal("queue fields changed the fingerprint")
	}
	c := task("a", 1)
	c.Params = map[string]string{"SiteKey": c.Params["sitekey"], "pageurl": c.Params["pageurl"]}
	if a.Fingerprint() == c.Fingerprint() {
		t.Fatal("a param key in other letter case gave the same fingerprint")
	}
	d := task("a", 1)
	d.Proxy = "u:secret@1.2.3.4:8080"
	err := captchaq.Record{Task: a}.Conflict(d)
	var ce *captchaq.IDConflictError
	if !errors.As(err, &ce) || ce.ID != "a" || ce.Differs != "proxy is new" {
		t.Fatalf("Conflict = %v", err)
	}
	if strings.Contains(err.Error(), "secret") {
		t.Fatalf("the conflict names a secret: %v", err)
	}
}

// The id rule, pinned where it is written (captchaqtype/fingerprint.go), which every
// door applies: another task under a known id is refused naming what
// differs, by fingerprint or, for a record without one, by task; the same
// task is the known one, pending, answered, or expired and so solved again.
func TestIDRule(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	same, other := task("a", 0), task("a", 0)
	other.Params["sitekey"] = "0x4BBBBBBBB"
	solved := func(expires time.Time) captchaq.Record {
		r := captchaq.Result{ID: "a", Status: captchaq.StatusSolved, Token: "tok", ExpiresAt: expires}
		return captchaq.Record{Task: same, Fingerprint: same.Fingerprint(), Status: captchaq.StatusSolved, Result: &r}
	}
	failed := captchaq.Record{Task: same, Status: captchaq.StatusFailed, Result: &captchaq.Result{ID: "a", Status: captchaq.StatusFailed}}
	for _, c := range []struct {
		name string
		rec  captchaq.Record
		want captchaq.Known
	}{
		{"queued", captchaq.Record{Task: same, Fingerprint: same.Fingerprint(), Status: captchaq.StatusQueued}, captchaq.KnownPending},
		{"in flight, no fingerprint stored", captchaq.Record{Task: same, Status: captchaq.StatusInFlight}, captchaq.KnownPending},
		{"solved, no expiry", solved(time.Time{}), captchaq.KnownAnswered},
		{"solved, expiring after now", solved(now.Add(time.Nanosecond)), captchaq.KnownAnswered},
		{"solved, expired at now", solved(now), captchaq.KnownExpired},
		{"failed", failed, captchaq.KnownAnswered},
	} {
		if got, err := c.rec.Known(same, now); err != nil || got != c.want {
			t.Errorf("%s: Known(the same task) = %v, %v; want %v", c.name, got, err, c.want)
		}
		_, err := c.rec.Known(other, now)
		var ce *captchaq.IDConflictError
		if !errors.As(err, &ce) || ce.ID != "a" || ce.Differs != "params.sitekey differs" || err.Error() != c.rec.Conflict(other).Error() {
			t.Errorf("%s: Known(another task) = %v; want the IDConflictError of Conflict, params.sitekey differs", c.name, err)
		}
	}
	// A record holding another task's fingerprint is another task, whatever
	// its task says.
	if err := (captchaq.Record{Task: same, Fingerprint: other.Fingerprint()}).Conflict(same); !errors.Is(err, captchaq.ErrIDConflict) {
		t.Errorf("Conflict with a record of another fingerprint = %v", err)
	}
	// A door that keeps fingerprints only says what it knows of the task.
	if err := captchaq.ConflictByFingerprint(same, same.Fingerprint(), "x"); err != nil {
		t.Errorf("ConflictByFingerprint(the same task) = %v", err)
	}
	err := captchaq.ConflictByFingerprint(other, same.Fingerprint(), "line 1 has it with another method, params or proxy")
	if want := `captchaq: id "a" already names another task (line 1 has it with another method, params or proxy): give this task its own id, or resubmit the first task unchanged`; err == nil || err.Error() != want {
		t.Errorf("ConflictByFingerprint(another task) = %v, want %s", err, want)
	}
}

func TestSameIDSameTaskSolvedOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{}, captchaq.Config{})
	b.start(t)
	first := waitAll(t, submitAll(t, b.q, task("a", 0)))[0]
	again := waitAll(t, submitAll(t, b.q, task("a", 0)))[0]
	if first.Status != captchaq.StatusSolved || again.Token != first.Token {
		t.Fatalf("first %+v, again %+v", first, again)
	}
	if got := b.prov.order(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("provider was asked for %v, want [a]", got)
	}
}

func TestSameIDOtherTaskRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{}, captchaq.Config{})
	ctx := testbound.Context(t)
	other := func(id string) captchaq.Task {
		tk := task(id, 0)
		tk.Params["sitekey"] = "0x4BBBBBBBB"
		return tk
	}
	// Unfinished: the task is held by the queue.
	held := submitAll(t, b.q, task("held", 0))
	if _, err := b.q.Submit(ctx, other("held")); !errors.Is(err, captchaq.ErrIDConflict) ||
		!strings.Contains(err.Error(), `"held"`) || !strings.Contains(err.Error(), "params.sitekey differs") {
		t.Fatalf("Submit of another task under a held id: %v", err)
	}
	b.start(t)
	first := waitAll(t, append(held, submitAll(t, b.q, task("done", 0))...))
	// Finished: the task is only in the Store.
	f, err := b.q.Submit(ctx, other("done"))
	if !errors.Is(err, captchaq.ErrIDConflict) || f != nil {
		t.Fatalf("Submit of another task under a finished id: %v, %v", f, err)
	}
	rs, err := b.q.SolveBatch(ctx, []captchaq.Task{other("done"), task("done", 0)})
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].Status != captchaq.StatusFailed || rs[0].ErrorCode != captchaq.CodeIDConflict || rs[0].Token != "" {
		t.Fatalf("SolveBatch gave the other task %+v", rs[0])
	}
	if rs[1].Token != first[1].Token {
		t.Fatalf("SolveBatch gave the same task %+v, want the stored token", rs[1])
	}
	if got := b.prov.order(); len(got) != 2 {
		t.Fatalf("provider was asked for %v, want held and done once each", got)
	}
}

// clock is a settable Config.Now.
type clock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.off += d
	c.mu.Unlock()
}

func TestExpiredTokenSolvedAgain(t *testing.T) {
	t.Parallel()
	var clk clock
	b := setup(t, sim.Config{}, captchaq.Config{Now: clk.now})
	b.start(t)
	first := waitAll(t, submitAll(t, b.q, task("a", 0)))[0]
	if first.ExpiresAt.IsZero() {
		t.Fatalf("a turnstile result has no expires_at: %+v", first)
	}
	if !first.Expired(first.ExpiresAt) || first.Expired(first.ExpiresAt.Add(-time.Nanosecond)) {
		t.Fatal("Expired is wrong at the boundary")
	}
	clk.advance(first.ExpiresAt.Sub(clk.now()) + time.Second)
	again := waitAll(t, submitAll(t, b.q, task("a", 0)))[0]
	if again.Status != captchaq.StatusSolved || again.Expired(clk.now()) || !again.ExpiresAt.After(first.ExpiresAt) {
		t.Fatalf("after expiry got %+v (first expired at %v)", again, first.ExpiresAt)
	}
	if got := b.prov.order(); !slices.Equal(got, []string{"a", "a"}) {
		t.Fatalf("provider was asked for %v, want a twice", got)
	}
	if m := b.q.Metrics(); m.Renewed != 1 {
		t.Fatalf("Metrics.Renewed = %d, want 1", m.Renewed)
	}
}

func BenchmarkFingerprint(b *testing.B) {
	tk := task("bench", 0)
	tk.Proxy, tk.ProxyType = "u:p@10.0.0.1:3128", "HTTP"
	for b.Loop() {
		_ = tk.Fingerprint()
	}
}

// Adopt comes in by the queue's one intake: another task under the id of a
// task the queue holds is refused by the id rule, as Submit refuses it;
// the same task waits for the held one's result.
func TestAdoptAppliesTheIDRule(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{}, captchaq.Config{})
	ctx := testbound.Context(t)
	held := submitAll(t, b.q, task("held", 0))
	other := task("held", 0)
	other.Params["sitekey"] = "0x4BBBBBBBB"
	if f, err := b.q.Adopt(ctx, captchaq.Record{Task: other, Status: captchaq.StatusQueued}); !errors.Is(err, captchaq.ErrIDConflict) || f != nil {
		t.Fatalf("Adopt of another task under a held id: %v, %v", f, err)
	}
	same, err := b.q.Adopt(ctx, captchaq.Record{Task: task("held", 0), Status: captchaq.StatusQueued, Attempts: 2})
	if err != nil {
		t.Fatal(err)
	}
	b.start(t)
	first := waitAll(t, held)[0]
	if again := waitAll(t, []*captchaq.Future{same})[0]; again.Token != first.Token || first.Attempts != 1 {
		t.Fatalf("held %+v, adopted %+v: want one solve at its first attempt", first, again)
	}
	if got := b.prov.order(); !slices.Equal(got, []string{"held"}) {
		t.Fatalf("provider was asked for %v, want [held]", got)
	}
}
