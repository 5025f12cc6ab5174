package amqp

import (
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/sim"
)

// otherSite is task(id, 0) for another site: the same id, another task.
func otherSite(id string) captchaq.Task {
	t := task(id, 0)
	t.Params = map[string]string{"sitekey": "0x4BBB", "pageurl": "https://other.example/"}
	return t
}

func TestGatewayAndFleetRefuseAnotherTaskUnderAKnownID(t *testing.T) {
	t.Parallel()
	r := newGatewayRig(t, testConfig(t))
	ctx := testCtx(t)
	srv := r.worker("ids-w1", sim.Config{LatencyScale: 0.005, PollBan: sim.PollBan{Disabled: true}}, 4, 4)
	g, results := r.gateway("ids", nil, nil)

	// The gateway's own refusal of another task under a known id is in
	// the Backend suite (server/backendtest); here the worker's.
	if err := g.submitTask(ctx, task("a", 0)); err != nil {
		t.Fatal(err)
	}
	first := await(t, ctx, results, 1)[0]
	if first.ID != "a" || first.Status != captchaq.StatusSolved || first.Token == "" {
		t.Fatalf("a: %+v", first)
	}
	// Fleet: a task published straight to the fleet under an id the
	// worker has solved is dead-lettered as ID_CONFLICT, never answered.
	pub := r.c.NewPublisher()
	defer pub.Close()
	if err := pub.PublishTask(ctx, TaskMessage{Task: otherSite("ids/a")}); err != nil {
		t.Fatal(err)
	}
	var dead []DeadLetter
	testbound.Until(t, "the conflicting task dead-lettered", func() bool {
		if err := r.c.DeadLetters(ctx, func(dl DeadLetter) error { dead = append(dead, dl); return nil }); err != nil {
			t.Fatal(err)
		}
		return len(dead) > 0
	})
	if len(dead) != 1 || dead[0].Task.Task.ID != "ids/a" || dead[0].ErrorCode != captchaq.CodeIDConflict || dead[0].Reason != ReasonInvalid {
		t.Fatalf("dead letters %+v", dead)
	}
	if n := srv.Stats().Accepted; n != 1 {
		t.Fatalf("the provider accepted %d tasks, want 1", n)
	}

	// An expired token is not answered as fresh: the same task submitted
	// again is solved again, under a wire id of a new generation (workers
	// answer a message id once), and answered under its own id.
	rec, _ := g.store.Get(ctx, "a")
	stale := *rec.Result
	stale.ExpiresAt = time.Now().Add(-time.Second)
	if err := g.store.Finish(ctx, stale); err != nil {
		t.Fatal(err)
	}
	if err := g.submitTask(ctx, task("a", 0)); err != nil {
		t.Fatalf("the same task after its token expired: %v", err)
	}
	again := await(t, ctx, results, 1)[0]
	if again.ID != "a" || again.Status != captchaq.StatusSolved || again.Token == "" || again.Token == first.Token {
		t.Fatalf("a solved again: %+v (first token %q)", again, first.Token)
	}
	if rec, err := g.Get(ctx, "a"); err != nil || rec.Result == nil || rec.Result.Token != again.Token {
		t.Fatalf("a after solving again: %+v, %v", rec, err)
	}
	if n := srv.Stats().Accepted; n != 2 {
		t.Fatalf("the provider accepted %d tasks, want 2", n)
	}
	if c := g.Counts(); c.Renewed != 1 || c.Accepted != 2 || c.Results != 2 {
		t.Fatalf("gateway counts %+v, want 1 renewed, 2 accepted, 2 results", c)
	}
	quietFor(t, results, 200*time.Millisecond)
}

// Wire ids and marks carry a solve's generation and read back; a result
// of another generation than the solve in flight does not answer it.
func TestGatewayGenerations(t *testing.T) {
	t.Parallel()
	ids := newWireIDs("gw-1.a")
	for _, c := range []struct{ id, gen, wire string }{
		{"a", "", "gw-1.a/a"},
		{"x/y@z", "", "gw-1.a/x/y@z"},
		{"a", "mi8k2x", "gw-1.a@mi8k2x/a"},
		{"x/y@z", "mi8k2x", "gw-1.a@mi8k2x/x/y@z"},
	} {
		wire := ids.wireID(c.id, c.gen)
		id, gen, ours := ids.storeID(wire)
		if wire != c.wire || id != c.id || gen != c.gen || !ours {
			t.Errorf("%q gen %q: wire %q → %q %q %v", c.id, c.gen, wire, id, gen, ours)
		}
	}
	for _, wire := range []string{"gw-1/a", "gw-1.a@/a", "gw-1.a@g", "other/gw-1.a/a"} {
		if id, gen, ours := ids.storeID(wire); ours {
			t.Errorf("%q read as ours: %q %q", wire, id, gen)
		}
	}
	inflight := func(mark string) captchaq.Record {
		return captchaq.Record{Status: captchaq.StatusInFlight, CaptchaID: mark}
	}
	if name, gen, ok := parseMark(ids.markFor("g2")); name != "gw-1.a" || gen != "g2" || !ok {
		t.Errorf("mark %q reads %q %q %v", ids.markFor("g2"), name, gen, ok)
	}
	for _, c := range []struct {
		rec  captchaq.Record
		gen  string
		want bool
	}{
		{inflight(ids.markFor("")), "", true},
		{inflight(ids.markFor("")), "g2", false},
		{inflight(ids.markFor("g2")), "", false},
		{inflight(ids.markFor("g2")), "g2", true},
		{inflight(""), "g2", true},
		{captchaq.Record{Status: captchaq.StatusQueued}, "g2", true},
	} {
		if got := sameGeneration(c.rec, c.gen); got != c.want {
			t.Errorf("record %s %q, result of %q: %v, want %v", c.rec.Status, c.rec.CaptchaID, c.gen, got, c.want)
		}
	}
}
