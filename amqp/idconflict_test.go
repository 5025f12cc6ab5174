package amqp

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
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

	// Gateway: same id + same task is one solve; another task is refused.
	if err := g.Submit(ctx, task("a", 0)); err != nil {
		t.Fatal(err)
	}
	first := await(t, ctx, results, 1)[0]
	if first.ID != "a" || first.Status != captchaq.StatusSolved || first.Token == "" {
		t.Fatalf("a: %+v", first)
	}
	if err := g.Submit(ctx, task("a", 0)); err != nil {
		t.Fatalf("the same task again: %v", err)
	}
	err := g.Submit(ctx, otherSite("a"))
	if !errors.Is(err, captchaq.ErrIDConflict) || !strings.Contains(err.Error(), `"a"`) || strings.Contains(err.Error(), first.Token) {
		t.Fatalf("another task under a: %v", err)
	}
	if rec, err := g.Get(ctx, "a"); err != nil || rec.Result == nil || rec.Result.Token != first.Token || rec.Task.Params["sitekey"] != "0x4AAA" {
		t.Fatalf("a after the refusal: %+v, %v", rec, err)
	}
	if n := srv.Stats().Accepted; n != 1 {
		t.Fatalf("the provider accepted %d tasks, want 1", n)
	}
	// An expired token is not answered as fresh: the fleet solves an id
	// once, so the gateway asks for a new id.
	rec, _ := g.store.Get(ctx, "a")
	stale := *rec.Result
	stale.ExpiresAt = time.Now().Add(-time.Second)
	if err := g.store.Finish(ctx, stale); err != nil {
		t.Fatal(err)
	}
	if err := g.Submit(ctx, task("a", 0)); !errors.Is(err, captchaq.ErrInvalidTask) || !strings.Contains(err.Error(), "submit the task under a new id") {
		t.Fatalf("the same task after its token expired: %v", err)
	}

	// Fleet: a task published straight to the fleet under an id the
	// worker has solved is dead-lettered as ID_CONFLICT, never answered.
	pub := r.c.NewPublisher()
	defer pub.Close()
	if err := pub.PublishTask(ctx, TaskMessage{Task: otherSite("ids/a")}); err != nil {
		t.Fatal(err)
	}
	var dead []DeadLetter
	for deadline := time.Now().Add(30 * time.Second); len(dead) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the conflicting task was not dead-lettered")
		}
		if err := r.c.DeadLetters(ctx, func(dl DeadLetter) error { dead = append(dead, dl); return nil }); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(dead) != 1 || dead[0].Task.Task.ID != "ids/a" || dead[0].ErrorCode != captchaq.CodeIDConflict || dead[0].Reason != ReasonInvalid {
		t.Fatalf("dead letters %+v", dead)
	}
	if n := srv.Stats().Accepted; n != 1 {
		t.Fatalf("the provider accepted %d tasks, want 1", n)
	}
	quietFor(t, results, 200*time.Millisecond)
}
