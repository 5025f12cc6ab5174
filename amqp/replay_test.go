package amqp

import (
	"context"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/pgtest"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/sim"
	"github.com/captchaq/captchaq/store/postgres"
)

// refusingWorker runs a worker whose provider refuses every task for good
// (ERROR_BAD_PARAMETERS) while the returned flag is set; it starts set.
func refusingWorker(r *gatewayRig, owner string) (*sim.Server, *atomic.Bool) {
	refuse := new(atomic.Bool)
	refuse.Store(true)
	srv := r.worker(owner, sim.Config{Instant: true, Seed: 5, PollBan: sim.PollBan{Disabled: true},
		RefuseSubmit: func(map[string]string) string {
			if refuse.Load() {
				return "ERROR_BAD_PARAMETERS"
			}
			return ""
		}}, 2, 4)
	return srv, refuse
}

// TestReplayReachesTheWorkerThatFailedIt: a running worker fails a task
// for good (the provider refuses it) and stays up; Conn.Replay puts it
// back and the same worker solves it, answered under the task's own id.
// A replay that fails again is a dead letter under the task's own id too,
// and replays again.
func TestReplayReachesTheWorkerThatFailedIt(t *testing.T) {
	t.Parallel()
	r := newGatewayRig(t, testConfig(t))
	ctx := testCtx(t)
	srv, refuse := refusingWorker(r, "replay-w")
	p := r.c.NewPublisher()
	defer p.Close()
	if err := p.PublishTask(ctx, TaskMessage{Task: task("p1", 0)}); err != nil {
		t.Fatal(err)
	}
	// collectOne takes one result, failing when none comes within 60 s.
	collectOne := func(what string) captchaq.Result {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		var got []captchaq.Result
		if _, err := r.c.Collect(cctx, 1, func(res captchaq.Result) error {
			got = append(got, res)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 {
			t.Fatalf("%s: no result within 60s", what)
		}
		return got[0]
	}
	failed := r.c.Names().Failed
	deadLetters := func() string {
		t.Helper()
		testbound.Until(t, "the dead letter", func() bool { return depth(t, ctx, r.c, failed) == 1 })
		var ids []string
		if err := r.c.DeadLetters(ctx, func(dl DeadLetter) error {
			ids = append(ids, dl.Task.Task.ID+"/"+dl.Reason+"/"+dl.ErrorCode)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return strings.Join(ids, " ")
	}
	replay := func() {
		t.Helper()
		if n, err := r.c.Replay(ctx, captchaq.DeadLetterFilter{IDs: []string{"p1"}}); n != 1 || err != nil {
			t.Fatalf("Replay = %d, %v; want 1", n, err)
		}
	}

	const dead = "p1/permanent/ERROR_BAD_PARAMETERS"
	if res := collectOne("first solve"); res.ID != "p1" || res.Status != captchaq.StatusFailed || res.ErrorCode != "ERROR_BAD_PARAMETERS" {
		t.Fatalf("first solve: %+v; want p1 failed ERROR_BAD_PARAMETERS", res)
	}
	if got := deadLetters(); got != dead {
		t.Fatalf("dead letters after the first solve: %s; want %s", got, dead)
	}
	// Replayed while the provider still refuses it: it fails again, and is
	// answered and dead-lettered under its own id, not its wire id.
	replay()
	if res := collectOne("first replay"); res.ID != "p1" || res.Status != captchaq.StatusFailed || res.ErrorCode != "ERROR_BAD_PARAMETERS" {
		t.Fatalf("first replay: %+v; want p1 failed ERROR_BAD_PARAMETERS", res)
	}
	if got := deadLetters(); got != dead {
		t.Fatalf("dead letters after the first replay: %s; want %s", got, dead)
	}
	refuse.Store(false)
	replay()
	if res := collectOne("second replay"); res.ID != "p1" || res.Status != captchaq.StatusSolved || res.Token == "" {
		t.Fatalf("second replay: %+v; want p1 solved with a token", res)
	}
	// Solved once: one task accepted by the provider, nothing left queued
	// or dead.
	if st := srv.Stats(); st.Accepted != 1 {
		t.Fatalf("provider accepted %d tasks; want 1", st.Accepted)
	}
	n := r.c.Names()
	for _, q := range []string{n.Results, failed} {
		if d := depth(t, ctx, r.c, q); d != 0 {
			t.Fatalf("%s holds %d messages; want 0", q, d)
		}
	}
}

// TestReplayWireIDFits: a replay's wire id is ID@GEN, cut short at a
// character's start when it would pass a message id's 255 bytes.
func TestReplayWireIDFits(t *testing.T) {
	t.Parallel()
	if got := replayWireID("p1", "abc"); got != "p1@abc" {
		t.Fatalf("short id: %q; want p1@abc", got)
	}
	for _, c := range []struct{ id, want string }{
		// 249 + 2 bytes fit before "@abc": the first é stays.
		{strings.Repeat("x", 249) + "ééé", strings.Repeat("x", 249) + "é@abc"},
		// 250 + 2 do not: the cut goes back to the é's start.
		{strings.Repeat("x", 250) + "ééé", strings.Repeat("x", 250) + "@abc"},
	} {
		if got := replayWireID(c.id, "abc"); got != c.want || len(got) > maxWireID {
			t.Fatalf("replayWireID(%d bytes) = %q (%d bytes); want %q", len(c.id), got, len(got), c.want)
		}
	}
}

// TestFleetReplayOfAGatewayTask: a gateway's task that the running worker
// failed, replayed from the fleet's side (Conn.Replay), is solved by that
// worker and answers the gateway under the task's own id.
func TestFleetReplayOfAGatewayTask(t *testing.T) {
	t.Parallel()
	r := newGatewayRig(t, testConfig(t))
	ctx := testCtx(t)
	_, refuse := refusingWorker(r, "replay-gw-w")
	g, results := r.gateway("gw-replay", nil, nil)
	if err := g.submitTask(ctx, task("g1", 0)); err != nil {
		t.Fatal(err)
	}
	if res := await(t, ctx, results, 1)[0]; res.ID != "g1" || res.Status != captchaq.StatusFailed || res.ErrorCode != "ERROR_BAD_PARAMETERS" {
		t.Fatalf("first solve: %+v; want g1 failed ERROR_BAD_PARAMETERS", res)
	}
	failed := r.c.Names().Failed
	testbound.Until(t, "the dead letter", func() bool { return depth(t, ctx, r.c, failed) == 1 })
	refuse.Store(false)
	if n, err := r.c.Replay(ctx, captchaq.DeadLetterFilter{All: true}); n != 1 || err != nil {
		t.Fatalf("Replay = %d, %v; want 1", n, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if res := await(t, wctx, results, 1)[0]; res.ID != "g1" || res.Status != captchaq.StatusSolved || res.Token == "" {
		t.Fatalf("after replay: %+v; want g1 solved with a token", res)
	}
	if rec, err := g.Get(ctx, "g1"); err != nil || rec.Status != captchaq.StatusSolved {
		t.Fatalf("record: %+v, %v; want solved", rec, err)
	}
}

// TestReplayMovesEachDeadLetterOnce: Conn.Replay moves the dead letters
// the queue held when it began. Here every task published also lands in
// the dead-letter queue at once (bound to the task exchange), as a replay
// refused at once by the provider does: before, Replay took that copy
// again in the same call, and again, until its context ran out.
func TestReplayMovesEachDeadLetterOnce(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	c := setup(t, cfg)
	ctx := testCtx(t)
	n := c.Names()
	ch, _, err := c.channel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(n.Failed, "", n.TasksAll, false, nil); err != nil {
		t.Fatal(err)
	}
	ch.Close()
	p := c.NewPublisher()
	defer p.Close()
	if err := p.PublishTask(ctx, TaskMessage{Task: task("once", 0)}); err != nil {
		t.Fatal(err)
	}
	if d := depth(t, ctx, c, n.Failed); d != 1 {
		t.Fatalf("dead letters before the replay: %d, want 1", d)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if got, err := c.Replay(rctx, captchaq.DeadLetterFilter{IDs: []string{"once"}}); got != 1 || err != nil {
		t.Fatalf("Replay = %d, %v; want 1, nil", got, err)
	}
	// The replay's own copy waits for the next replay; the task queue
	// holds the task and its one replay.
	if d := depth(t, ctx, c, n.Failed); d != 1 {
		t.Errorf("dead letters after the replay: %d, want 1", d)
	}
	if d := depth(t, ctx, c, n.Tasks); d != 2 {
		t.Errorf("tasks queued: %d, want 2", d)
	}
}

// TestFleetReplaySkipsWhatTheGatewayReplayed: a gateway's task failed for
// good is replayed by its gateway (Gateway.Replay: a client's replay) and
// solved; its copy in the fleet's dead-letter queue, published before, is
// then not published again by Conn.Replay (captchaq dlq replay), which
// would have the task solved and paid twice, and it leaves the queue. A
// gateway replay that fails again is a dead letter of its own, which
// Conn.Replay does publish.
func TestFleetReplaySkipsWhatTheGatewayReplayed(t *testing.T) {
	t.Parallel()
	r := newGatewayRig(t, testConfig(t))
	ctx := testCtx(t)
	_, refuse := refusingWorker(r, "replayed-gw-w")
	g, results := r.gateway("gw-replayed", nil, nil)
	failed := r.c.Names().Failed
	submitAwait(t, ctx, g, results, "g1", captchaq.StatusFailed)
	submitAwait(t, ctx, g, results, "g2", captchaq.StatusFailed)
	testbound.Until(t, "the two dead letters", func() bool { return depth(t, ctx, r.c, failed) == 2 })
	// g2's replay fails again (a dead letter of its own); g1's is solved.
	replayAwait(t, ctx, g, results, "g2", captchaq.StatusFailed)
	testbound.Until(t, "g2's second dead letter", func() bool { return depth(t, ctx, r.c, failed) == 3 })
	refuse.Store(false)
	replayAwait(t, ctx, g, results, "g1", captchaq.StatusSolved)
	// The notices (the two gateway replays and g1's answer) outlive a
	// broker restart, as the dead letters they answer for do.
	ns := peek(t, ctx, r.c, r.c.Names().Replayed)
	if len(ns) != 3 {
		t.Fatalf("%s holds %d notices, want 3: g2's and g1's replays, g1's answer", r.c.Names().Replayed, len(ns))
	}
	for _, d := range ns {
		if d.DeliveryMode != amqp091.Persistent {
			t.Errorf("a notice has delivery mode %d, want persistent (%d)", d.DeliveryMode, amqp091.Persistent)
		}
	}
	// Of the three copies only g2's latest is published: g1 is solved, and
	// g2's first copy was replayed by the gateway already.
	if n, err := r.c.Replay(ctx, captchaq.DeadLetterFilter{All: true}); n != 1 || err != nil {
		t.Fatalf("Conn.Replay = %d, %v; want 1 (g2's latest dead letter)", n, err)
	}
	if d := depth(t, ctx, r.c, failed); d != 0 {
		t.Errorf("%s holds %d dead letters after the replay, want 0", failed, d)
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if res := await(t, wctx, results, 1)[0]; res.ID != "g2" || res.Status != captchaq.StatusSolved {
		t.Fatalf("after the fleet's replay: %+v; want g2 solved", res)
	}
	quietFor(t, results, 2*time.Second)
}

// peek returns every message of queue q and leaves them in place.
func peek(t *testing.T, ctx context.Context, c *Conn, q string) []amqp091.Delivery {
	t.Helper()
	ch, _, err := c.channel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close() // puts every message back
	var out []amqp091.Delivery
	for {
		d, ok, err := ch.Get(q, false)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return out
		}
		out = append(out, d)
	}
}

// submitAwait submits task id to g and waits for its result, which must
// have status want.
func submitAwait(t *testing.T, ctx context.Context, g *Gateway, results <-chan captchaq.Result, id string, want captchaq.Status) {
	t.Helper()
	if err := g.submitTask(ctx, task(id, 0)); err != nil {
		t.Fatal(err)
	}
	if res := await(t, ctx, results, 1)[0]; res.ID != id || res.Status != want {
		t.Fatalf("%s at %s: %+v; want %s", id, g.Name(), res, want)
	}
}

// replayAwait replays g's dead letter id (Gateway.Replay) and waits for
// its result, which must have status want.
func replayAwait(t *testing.T, ctx context.Context, g *Gateway, results <-chan captchaq.Result, id string, want captchaq.Status) {
	t.Helper()
	if got, err := g.Replay(ctx, []string{id}); err != nil || len(got) != 1 || got[0] != id {
		t.Fatalf("%s's replay of %s: %v, %v", g.Name(), id, got, err)
	}
	if res := await(t, ctx, results, 1)[0]; res.ID != id || res.Status != want {
		t.Fatalf("%s's replay of %s: %+v; want %s", g.Name(), id, res, want)
	}
}

// TestFleetReplayKeepsAnotherGatewaysDeadLetter: two gateways take tasks
// under one id (their clients' ids), and both fail. The first gateway
// replays its task and it is solved; Conn.Replay (captchaq dlq replay)
// then drops that gateway's copy only and publishes the other's, whose
// gateway gets it solved.
func TestFleetReplayKeepsAnotherGatewaysDeadLetter(t *testing.T) {
	t.Parallel()
	r := newGatewayRig(t, testConfig(t))
	ctx := testCtx(t)
	_, refuse := refusingWorker(r, "two-gw-w")
	ga, resultsA := r.gateway("gw-a", nil, nil)
	gb, resultsB := r.gateway("gw-b", nil, nil)
	failed := r.c.Names().Failed
	submitAwait(t, ctx, ga, resultsA, "x", captchaq.StatusFailed)
	submitAwait(t, ctx, gb, resultsB, "x", captchaq.StatusFailed)
	testbound.Until(t, "the two dead letters", func() bool { return depth(t, ctx, r.c, failed) == 2 })
	refuse.Store(false)
	replayAwait(t, ctx, ga, resultsA, "x", captchaq.StatusSolved)
	wantSuperseded(t, ctx, r.c, map[string]bool{"gw-a/x": true, "gw-b/x": false})
	if n, err := r.c.Replay(ctx, captchaq.DeadLetterFilter{All: true}); n != 1 || err != nil {
		t.Fatalf("Conn.Replay = %d, %v; want 1 (gw-b's x)", n, err)
	}
	if d := depth(t, ctx, r.c, failed); d != 0 {
		t.Errorf("%s holds %d dead letters after the replay, want 0", failed, d)
	}
	if res := await(t, ctx, resultsB, 1)[0]; res.ID != "x" || res.Status != captchaq.StatusSolved {
		t.Fatalf("gw-b after the fleet's replay: %+v; want x solved", res)
	}
}

// wantSuperseded checks that Conn.DeadLetters lists exactly the dead
// letters of want, by wire id, each Superseded as want says.
func wantSuperseded(t *testing.T, ctx context.Context, c *Conn, want map[string]bool) {
	t.Helper()
	got := map[string]bool{}
	if err := c.DeadLetters(ctx, func(dl DeadLetter) error {
		got[dl.Task.Task.ID] = dl.Superseded
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got, want) {
		t.Errorf("dead letters, superseded: %v; want %v", got, want)
	}
}

// publishCopy publishes another copy of g's task id to the fleet, in a
// generation of its own, as a front replica's renew racing another's or
// a republish at Start does: one copy may fail while another is solved.
// It returns the copy's wire id.
func publishCopy(t *testing.T, ctx context.Context, r *gatewayRig, g *Gateway, id string) string {
	t.Helper()
	p := r.c.NewPublisher()
	defer p.Close()
	now := time.Now()
	wire := task(id, 0)
	wire.ID = g.tasks.ids.wireID(id, renewGen(now))
	if err := p.PublishTask(ctx, TaskMessage{Task: wire, Accepted: now, ReplyTo: g.ReplyQueue()}); err != nil {
		t.Fatal(err)
	}
	return wire.ID
}

// TestFleetReplaySkipsWhatTheGatewayAnswered: a gateway's task has a dead
// letter in the fleet's queue, and the gateway has the task solved by
// another copy, after the failure (g1) or before it (g2); it never
// replayed either. Conn.Replay (captchaq dlq replay) publishes neither
// again, which would have each solved (and paid) twice, and both leave the
// queue.
func TestFleetReplaySkipsWhatTheGatewayAnswered(t *testing.T) {
	t.Parallel()
	r := newGatewayRig(t, testConfig(t))
	ctx := testCtx(t)
	_, refuse := refusingWorker(r, "answered-w")
	g, results := r.gateway("gw-answered", nil, nil)
	failed := r.c.Names().Failed
	submitAwait(t, ctx, g, results, "g1", captchaq.StatusFailed)
	refuse.Store(false)
	submitAwait(t, ctx, g, results, "g2", captchaq.StatusSolved)
	publishCopy(t, ctx, r, g, "g1")
	if res := await(t, ctx, results, 1)[0]; res.ID != "g1" || res.Status != captchaq.StatusSolved {
		t.Fatalf("g1's second copy: %+v; want solved", res)
	}
	refuse.Store(true)
	g2copy := publishCopy(t, ctx, r, g, "g2")
	testbound.Until(t, "g2's second copy failed and dropped by the gateway", func() bool {
		return g.Counts().Duplicates == 1 && depth(t, ctx, r.c, failed) == 2
	})
	refuse.Store(false)
	wantSuperseded(t, ctx, r.c, map[string]bool{"gw-answered/g1": true, g2copy: true})
	if n, err := r.c.Replay(ctx, captchaq.DeadLetterFilter{All: true}); n != 0 || err != nil {
		t.Fatalf("Conn.Replay = %d, %v; want 0: g1 and g2 are solved", n, err)
	}
	if d := depth(t, ctx, r.c, failed); d != 0 {
		t.Errorf("%s holds %d dead letters after the replay, want 0", failed, d)
	}
	for _, id := range []string{"g1", "g2"} {
		if rec, err := g.Get(ctx, id); err != nil || rec.Status != captchaq.StatusSolved {
			t.Errorf("%s: %v, %v; want solved", id, rec.Status, err)
		}
	}
}

// TestFleetReplaySkipsAReplayedTaskWithoutItsNotice: a gateway replays a
// failed task and it is solved, and the replay's notice is gone from
// Names.Replayed (the queue keeps the newest ReplayedNoticesMax, and a
// notice whose publish failed is never there). The notice of the answer
// still keeps Conn.Replay from publishing the task's first copy again.
func TestFleetReplaySkipsAReplayedTaskWithoutItsNotice(t *testing.T) {
	t.Parallel()
	r := newGatewayRig(t, testConfig(t))
	ctx := testCtx(t)
	_, refuse := refusingWorker(r, "unnoticed-w")
	g, results := r.gateway("gw-unnoticed", nil, nil)
	n := r.c.Names()
	submitAwait(t, ctx, g, results, "g1", captchaq.StatusFailed)
	testbound.Until(t, "the dead letter", func() bool { return depth(t, ctx, r.c, n.Failed) == 1 })
	refuse.Store(false)
	replayAwait(t, ctx, g, results, "g1", captchaq.StatusSolved)
	// The oldest notice goes, as the queue's length limit takes it.
	ch, _, err := r.c.channel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m, ok, err := ch.Get(n.Replayed, false)
	if err != nil || !ok {
		t.Fatalf("the replay's notice: %v, %v", ok, err)
	}
	if !strings.Contains(string(m.Body), `"id":"g1"`) {
		t.Fatalf("oldest notice %s; want g1's", m.Body)
	}
	if err := ch.Ack(m.DeliveryTag, false); err != nil {
		t.Fatal(err)
	}
	ch.Close()
	if got, err := r.c.Replay(ctx, captchaq.DeadLetterFilter{All: true}); got != 0 || err != nil {
		t.Fatalf("Conn.Replay = %d, %v; want 0: g1 is solved", got, err)
	}
	if d := depth(t, ctx, r.c, n.Failed); d != 0 {
		t.Errorf("%s holds %d dead letters after the replay, want 0", n.Failed, d)
	}
}

// TestFleetReplaySkipsWhatAFrontReplicaAnswered: two replicas of one
// front (one name, one PostgreSQL store) take results from one reply
// queue. A task failed for good is replayed by one replica and solved,
// stored by whichever took the result; with the replay's notice gone
// (as in TestFleetReplaySkipsAReplayedTaskWithoutItsNotice), the notice
// of the answer keeps Conn.Replay from publishing the task's first copy.
func TestFleetReplaySkipsWhatAFrontReplicaAnswered(t *testing.T) {
	t.Parallel()
	r := newGatewayRig(t, testConfig(t))
	ctx := testCtx(t)
	url := pgtest.NewDatabase(t)
	replica := func() (*Gateway, <-chan captchaq.Result) {
		s, err := postgres.Open(ctx, url, postgres.Config{Retention: postgres.RetentionOff})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return r.gateway("gw-front", nil, func(gc *GatewayConfig) { gc.Store = s })
	}
	// The worker refuses the first solve; the replay's waits until the
	// replica marked it published, which the other replica, taking the
	// result of an instant solve, would otherwise race.
	refuse, hold := new(atomic.Bool), make(chan struct{})
	refuse.Store(true)
	r.worker("front-w", sim.Config{Instant: true, Seed: 5, PollBan: sim.PollBan{Disabled: true},
		RefuseSubmit: func(map[string]string) string {
			if refuse.Load() {
				return "ERROR_BAD_PARAMETERS"
			}
			<-hold
			return ""
		}}, 2, 4)
	release := sync.OnceFunc(func() { close(hold) })
	t.Cleanup(release)
	ga, resultsA := replica()
	gb, resultsB := replica()
	// Each result is told by the replica that stored it.
	either := func(want captchaq.Status) {
		t.Helper()
		var res captchaq.Result
		select {
		case res = <-resultsA:
		case res = <-resultsB:
		case <-ctx.Done():
			t.Fatal("no result before the test deadline")
		}
		if res.ID != "g1" || res.Status != want {
			t.Fatalf("result %+v; want g1 %s", res, want)
		}
	}
	n := r.c.Names()
	if err := ga.submitTask(ctx, task("g1", 0)); err != nil {
		t.Fatal(err)
	}
	either(captchaq.StatusFailed)
	testbound.Until(t, "the dead letter", func() bool { return depth(t, ctx, r.c, n.Failed) == 1 })
	refuse.Store(false)
	if got, err := gb.Replay(ctx, []string{"g1"}); err != nil || len(got) != 1 {
		t.Fatalf("replica b's replay of g1: %v, %v", got, err)
	}
	release()
	either(captchaq.StatusSolved)
	ch, _, err := r.c.channel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m, ok, err := ch.Get(n.Replayed, false)
	if err != nil || !ok || !strings.Contains(string(m.Body), `"id":"g1"`) {
		t.Fatalf("the replay's notice: %s, %v, %v", m.Body, ok, err)
	}
	if err := ch.Ack(m.DeliveryTag, false); err != nil {
		t.Fatal(err)
	}
	ch.Close()
	wantSuperseded(t, ctx, r.c, map[string]bool{"gw-front/g1": true})
	if got, err := r.c.Replay(ctx, captchaq.DeadLetterFilter{All: true}); got != 0 || err != nil {
		t.Fatalf("Conn.Replay = %d, %v; want 0: g1 is solved", got, err)
	}
	if d := depth(t, ctx, r.c, n.Failed); d != 0 {
		t.Errorf("%s holds %d dead letters after the replay, want 0", n.Failed, d)
	}
}

// TestFleetReplayKeepsALaterTaskUnderAReplayedID: a gateway replayed
// task x, which left its first copy in the fleet's dead letters and a
// notice; the gateway's store is made again (same file, same name) and a
// client's new task under id x fails. Conn.Replay drops the first x's
// copy and publishes the new one's: a notice covers the copies accepted
// before it only.
func TestFleetReplayKeepsALaterTaskUnderAReplayedID(t *testing.T) {
	t.Parallel()
	r := newGatewayRig(t, testConfig(t))
	ctx := testCtx(t)
	failed := r.c.Names().Failed
	p := r.c.NewPublisher()
	defer p.Close()
	first := task("gw-reused/x", 0)
	accepted := time.Now().Add(-time.Minute)
	if err := p.DeadLetter(ctx, TaskMessage{Task: first, Accepted: accepted, Attempts: 1, LastErrorCode: "ERROR_BAD_PARAMETERS"}, ReasonPermanent); err != nil {
		t.Fatal(err)
	}
	if err := p.noteReplayed(ctx, "gw-reused", "x", accepted.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	_, refuse := refusingWorker(r, "reused-w")
	g, results := r.gateway("gw-reused", nil, nil)
	submitAwait(t, ctx, g, results, "x", captchaq.StatusFailed)
	testbound.Until(t, "the two dead letters", func() bool { return depth(t, ctx, r.c, failed) == 2 })
	refuse.Store(false)
	if n, err := r.c.Replay(ctx, captchaq.DeadLetterFilter{All: true}); n != 1 || err != nil {
		t.Fatalf("Conn.Replay = %d, %v; want 1 (the new x)", n, err)
	}
	if d := depth(t, ctx, r.c, failed); d != 0 {
		t.Errorf("%s holds %d dead letters after the replay, want 0", failed, d)
	}
	if res := await(t, ctx, results, 1)[0]; res.ID != "x" || res.Status != captchaq.StatusSolved {
		t.Fatalf("the new x after the fleet's replay: %+v; want solved", res)
	}
}

// TestFleetReplaySkipsACanceledTask: a client cancels its task at the
// gateway while a worker holds it, and the worker then fails it for
// good. The gateway drops that failure (the task is answered, canceled),
// and Conn.Replay takes the task's dead letter out without publishing it.
func TestFleetReplaySkipsACanceledTask(t *testing.T) {
	t.Parallel()
	r := newGatewayRig(t, testConfig(t))
	ctx := testCtx(t)
	held, hold := make(chan struct{}, 1), make(chan struct{})
	r.worker("canceled-w", sim.Config{Instant: true, Seed: 5, PollBan: sim.PollBan{Disabled: true},
		RefuseSubmit: func(map[string]string) string {
			held <- struct{}{}
			<-hold
			return "ERROR_BAD_PARAMETERS"
		}}, 2, 4)
	release := sync.OnceFunc(func() { close(hold) })
	t.Cleanup(release)
	g, results := r.gateway("gw-canceled", nil, nil)
	failed := r.c.Names().Failed
	if err := g.submitTask(ctx, task("c1", 0)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the worker never submitted c1")
	}
	if err := g.Cancel(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	if res := await(t, ctx, results, 1)[0]; res.ID != "c1" || res.ErrorCode != captchaq.CodeCanceled {
		t.Fatalf("c1: %+v; want canceled", res)
	}
	release()
	testbound.Until(t, "c1's failure dropped by the gateway", func() bool {
		return g.Counts().Duplicates == 1 && depth(t, ctx, r.c, failed) == 1
	})
	wantSuperseded(t, ctx, r.c, map[string]bool{"gw-canceled/c1": true})
	if n, err := r.c.Replay(ctx, captchaq.DeadLetterFilter{All: true}); n != 0 || err != nil {
		t.Fatalf("Conn.Replay = %d, %v; want 0: c1 is canceled", n, err)
	}
	if d := depth(t, ctx, r.c, failed); d != 0 {
		t.Errorf("%s holds %d dead letters after the replay, want 0", failed, d)
	}
}
