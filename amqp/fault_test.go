package amqp

import (
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/sim"
)

// TestFleetKill9: a worker killed while its tasks are at the provider, and
// another killed right after a checkpoint, lose nothing and cost no second
// solve: their checkpoints go to the fleet as their connections close and
// are polled. Each victim stops itself (FreezeAt) at the exact moment, so
// the kill never lands between a submit's answer and its checkpoint,
// however slowly the test sees the broker: the first with every thread
// at the provider and checkpointed, none submitting; the second (one
// thread) with its one task just checkpointed. Every solve takes 5 s, so
// all of the first victim's threads are at the provider at once.
func TestFleetKill9(t *testing.T) {
	cfg := fleetConfig(t)
	solve := sim.Latency{Median: 5 * time.Second, Min: 5 * time.Second, Max: 5 * time.Second}
	f := newFleet(t, cfg, sim.Config{PollBan: sim.PollBan{Disabled: true}, Threads: 60, Seed: 3,
		Latency: map[provider.Kind]sim.Latency{provider.KindTurnstile: solve}},
		childConfig{Threads: 20, Poll: 50 * time.Millisecond, Grace: 5 * time.Second})
	ctx := longCtx(t, 120*time.Second)
	f.start("k9-a", func(c *childConfig) { c.FreezeAt = 20 })
	for _, o := range []string{"k9-b", "k9-c"} {
		f.start(o, nil)
	}
	f.waitConsumers(ctx, 3)
	// 22 for each worker's 20 threads, dealt round robin: k9-a has all
	// of its threads at the provider at once.
	const n = 66
	ids := f.enqueue(ctx, "k9", n, 0)

	// Moment 1: all of k9-a's threads submitted, checkpointed, polling.
	f.frozen(ctx, "k9-a")
	f.until(ctx, "k9-a holding 20 checkpoints", func() bool { return unacked(t, f.c.Names().InflightQueue("k9-a")) == 20 })
	f.signal("k9-a", syscall.SIGKILL)
	if err := f.wait("k9-a", 10*time.Second); err == nil {
		t.Fatal("k9-a exited cleanly after SIGKILL")
	}
	// Moment 2: right after a checkpoint. The first tasks may all be
	// taken before k9-d starts (it starts slowly on a loaded machine), so
	// a second batch comes once it consumes.
	f.start("k9-d", func(c *childConfig) { c.Threads, c.Prefetch, c.FreezeAt = 1, 1, 1 })
	f.waitConsumers(ctx, 3)
	const more = 10
	ids = append(ids, f.enqueue(ctx, "k9-more", more, 0)...)
	f.frozen(ctx, "k9-d")
	f.until(ctx, "k9-d holding a checkpoint", func() bool { return unacked(t, f.c.Names().InflightQueue("k9-d")) == 1 })
	f.signal("k9-d", syscall.SIGKILL)
	if err := f.wait("k9-d", 10*time.Second); err == nil {
		t.Fatal("k9-d exited cleanly after SIGKILL")
	}

	res := f.collect(ctx, ids)
	f.ledger(res, n+more)
}

// unacked is how many messages of queue are delivered and not acked; -1
// while the queue does not exist.
func unacked(t *testing.T, queue string) int { return unackedSum(t, queue) }

// unackedSum is the unacknowledged messages of queues together, from one
// listing (one snapshot: each rabbitmqctl call starts a VM, seconds on a
// busy machine), or -1 when none of them exists.
func unackedSum(t *testing.T, queues ...string) int {
	t.Helper()
	lines, err := queueLines("messages_unacknowledged")
	if err != nil {
		t.Fatal(err)
	}
	sum, found := 0, false
	for _, line := range lines {
		if f := strings.Fields(line); len(f) == 2 && slices.Contains(queues, f[0]) {
			n, _ := strconv.Atoi(f[1])
			sum, found = sum+n, true
		}
	}
	if !found {
		return -1
	}
	return sum
}

// queueLines lists every queue of the broker by name with columns, a line
// each, from one rabbitmqctl call.
func queueLines(columns ...string) ([]string, error) {
	out, err := exec.Command("rabbitmqctl", append([]string{"-q", "list_queues", "name"}, columns...)...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("rabbitmqctl list_queues: %v\n%s", err, out)
	}
	return strings.Split(string(out), "\n"), nil
}

// TestFleetSIGTERM: a worker told to stop hands back what it has not
// submitted, finishes what it has, and exits 0; nothing is lost.
func TestFleetSIGTERM(t *testing.T) {
	cfg := fleetConfig(t)
	f := newFleet(t, cfg, sim.Config{PollBan: sim.PollBan{Disabled: true}, Threads: 20, LatencyScale: 0.1, Seed: 4},
		childConfig{Threads: 10, Poll: 50 * time.Millisecond, Grace: 20 * time.Second})
	ctx := longCtx(t, 120*time.Second)
	f.start("term-a", nil)
	f.waitConsumers(ctx, 1)
	const n = 60
	ids := f.enqueue(ctx, "term", n, 0)
	f.until(ctx, "10 accepted submits", func() bool { return f.accepted() >= 10 })
	f.signal("term-a", syscall.SIGTERM)
	if err := f.wait("term-a", 30*time.Second); err != nil {
		t.Fatalf("worker exit after SIGTERM: %v, want status 0", err)
	}
	f.start("term-b", nil)
	res := f.collect(ctx, ids)
	f.ledger(res, n)
}

// TestFleetSharesThreads: three workers that each think they have the
// whole plan share its threads: the provider never runs more than the plan,
// "no free thread" answers stay a small share, and the threads stay busy.
// Measured on a loaded 2-core machine, with and without -race:
// utilization 0.79-0.94, no-slot share 5-10%; the bounds leave room for a
// slower run.
func TestFleetSharesThreads(t *testing.T) {
	cfg := fleetConfig(t)
	const threads = 10
	f := newFleet(t, cfg, sim.Config{PollBan: sim.PollBan{Disabled: true}, Threads: threads, LatencyScale: 0.03, Seed: 5},
		childConfig{Threads: threads, Poll: 20 * time.Millisecond, Grace: 5 * time.Second})
	ctx := longCtx(t, 120*time.Second)
	for _, o := range []string{"aimd-a", "aimd-b", "aimd-c"} {
		f.start(o, nil)
	}
	f.waitConsumers(ctx, 3)
	const n = 240
	ids := f.enqueue(ctx, "aimd", n, 0)
	res := f.collect(ctx, ids)
	st := f.ledger(res, n)
	t.Logf("submits %d, no slot %d, peak %d, utilization %.2f", st.Calls.Submit, st.NoSlot, st.PeakThreadsInUse, st.Utilization)
	if st.PeakThreadsInUse > threads {
		t.Errorf("peak threads in use %d, plan has %d", st.PeakThreadsInUse, threads)
	}
	if share := float64(st.NoSlot) / float64(st.Calls.Submit); share > 0.2 {
		t.Errorf("%d of %d submits answered no free thread (%.0f%%), want at most 20%%", st.NoSlot, st.Calls.Submit, 100*share)
	}
	if st.Utilization < 0.6 {
		t.Errorf("thread utilization %.2f, want at least 0.6", st.Utilization)
	}
}

// rabbitmqctl runs the broker's control tool.
func rabbitmqctl(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("rabbitmqctl", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("rabbitmqctl %v: %v\n%s", args, err, out)
	}
}

// TestFleetBrokerRestart: the broker stops and starts mid-run; workers and
// publishers reconnect, results and publishes wait for the broker, and
// nothing is lost or solved twice. The stop comes when every thread of
// every worker is at the provider with its checkpoint confirmed, and
// lands before any solve ends (checked): every solve takes exactly 30 s,
// longer than the checkpoints and the stop take on a loaded machine (a
// loaded rabbitmqctl takes seconds). Each worker holds at most its 15
// threads' worth, so no submit is between the provider's answer and its
// checkpoint: a stop there can cost a second solve (see "Checkpoints" in
// the package doc), which is the one thing this test does not ask about.
func TestFleetBrokerRestart(t *testing.T) { testFleetBrokerRestart(t, time.Second) }

// TestFleetBrokerRestartLongDown: TestFleetBrokerRestart with the broker
// down longer than the claim window (claimWindow), as a restart under load
// can be: the checkpoints the broker took back go to the fleet
// (Names.Adopt) once it is up, and nothing is lost or solved twice.
func TestFleetBrokerRestartLongDown(t *testing.T) {
	testFleetBrokerRestart(t, claimWindow+4*time.Second)
}

// testFleetBrokerRestart is TestFleetBrokerRestart with the broker down
// for down between its stop and its start.
func testFleetBrokerRestart(t *testing.T, down time.Duration) {
	if _, err := exec.LookPath("rabbitmqctl"); err != nil {
		t.Fatal("rabbitmqctl is needed to restart the broker")
	}
	cfg := disruptiveFleetConfig(t)
	solve := sim.Latency{Median: 30 * time.Second, Min: 30 * time.Second, Max: 30 * time.Second}
	f := newFleet(t, cfg, sim.Config{PollBan: sim.PollBan{Disabled: true}, Threads: 45, Seed: 6,
		Latency: map[provider.Kind]sim.Latency{provider.KindTurnstile: solve}},
		childConfig{Threads: 15, Prefetch: 15, Poll: 50 * time.Millisecond, Grace: 5 * time.Second, Verbose: true})
	ctx := longCtx(t, 240*time.Second)
	owners := []string{"br-a", "br-b", "br-c"}
	for _, o := range owners {
		f.start(o, nil)
	}
	f.waitConsumers(ctx, 3)
	ids := f.enqueue(ctx, "br1", 45, 0)
	var inflight []string
	for _, o := range owners {
		inflight = append(inflight, f.c.Names().InflightQueue(o))
	}
	f.until(ctx, "45 confirmed checkpoints held", func() bool { return unackedSum(t, inflight...) == 45 })

	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = exec.Command("rabbitmqctl", "start_app").Run()
		}
	})
	rabbitmqctl(t, "stop_app")
	if st := f.sim.Stats(); st.Fetched != 0 {
		t.Fatalf("%d answers fetched before the broker stopped, want 0: the stop came after solves ended", st.Fetched)
	}
	// Publishing waits for the broker instead of failing.
	late := make(chan error, 1)
	go func() {
		late <- f.pub.PublishTask(ctx, TaskMessage{Task: fleetTask("br-late", 0)})
	}()
	// Paces the fault: the broker stays down for down on purpose.
	time.Sleep(down)
	rabbitmqctl(t, "start_app")
	restarted = true
	if err := <-late; err != nil {
		t.Fatalf("publish across the restart: %v", err)
	}
	ids = append(ids, "br-late")
	// One round of the plan's 45 threads with br-late: the fleet works
	// on after the restart.
	ids = append(ids, f.enqueue(ctx, "br2", 44, 0)...)
	res := f.collect(ctx, ids)
	f.ledger(res, int64(len(ids)))
	if f.c.Reconnects() < 1 {
		t.Errorf("test connection reconnects %d, want at least 1", f.c.Reconnects())
	}
}

// TestFleetDroppedConnection: the broker drops a worker's connection; it
// reconnects and finishes every task once.
func TestFleetDroppedConnection(t *testing.T) {
	if _, err := exec.LookPath("rabbitmqctl"); err != nil {
		t.Fatal("rabbitmqctl is needed to close a connection")
	}
	cfg := disruptiveFleetConfig(t)
	f := newFleet(t, cfg, sim.Config{PollBan: sim.PollBan{Disabled: true}, Threads: 30, LatencyScale: 0.1, Seed: 7},
		childConfig{Threads: 15, Poll: 50 * time.Millisecond, Grace: 5 * time.Second})
	ctx := longCtx(t, 120*time.Second)
	f.start("drop-a", nil)
	f.start("drop-b", nil)
	f.waitConsumers(ctx, 2)
	const n = 100
	ids := f.enqueue(ctx, "drop", n, 0)
	f.until(ctx, "20 accepted submits", func() bool { return f.accepted() >= 20 })
	// Every connection of the topology, the test's own included.
	if n := closeConnections(t, cfg.Prefix); n < 2 {
		t.Fatalf("closed %d connections of %s, want the workers'", n, cfg.Prefix)
	}
	res := f.collect(ctx, ids)
	f.ledger(res, n)
}

// TestFleetFailures: 5xx answers never dead-letter; an invalid task
// dead-letters at once with its reason; a task that waits past its TTL
// dead-letters as expired; replay brings both kinds back.
func TestFleetFailures(t *testing.T) {
	cfg := fleetConfig(t)
	cfg.TaskTTL = 300 * time.Millisecond
	// The worker takes every task at once (prefetch), so only the tasks
	// enqueued while no worker runs can wait past the short TTL.
	f := newFleet(t, cfg, sim.Config{PollBan: sim.PollBan{Disabled: true}, Threads: 20, LatencyScale: 0.02, Seed: 8, Faults: sim.Faults{HTTP5xxRate: 0.3}},
		childConfig{Threads: 10, Prefetch: 100, Poll: 20 * time.Millisecond, Grace: 5 * time.Second})
	ctx := longCtx(t, 120*time.Second)

	// No worker yet: these wait past the TTL.
	expired := f.enqueue(ctx, "ttl", 3, 0)
	f.until(ctx, "3 expired dead letters", func() bool { return f.depth(f.c.Names().Failed) == 3 })

	f.start("fail-a", nil)
	f.waitConsumers(ctx, 1)
	bad := captchaq.Task{ID: "bad-pageurl", Method: "turnstile", Params: map[string]string{"sitekey": "0x4AAA", "pageurl": "not a url"}}
	if err := f.pub.PublishTask(ctx, TaskMessage{Task: bad}); err != nil {
		t.Fatal(err)
	}
	ids := f.enqueue(ctx, "flaky", 40, 0)
	res := f.collect(ctx, append(ids, bad.ID))
	if r := res[bad.ID]; r.Status != captchaq.StatusFailed || r.ErrorCode != captchaq.CodeInvalidTask {
		t.Fatalf("bad task result %+v, want failed INVALID_TASK", r)
	}
	delete(res, bad.ID)
	st := f.sim.Stats()
	if st.Faults.HTTP5xx == 0 {
		t.Fatal("the simulator injected no 5xx answers; the test proves nothing")
	}

	reasons := map[string]string{}
	codes := map[string]string{}
	if err := f.c.DeadLetters(ctx, func(dl DeadLetter) error {
		reasons[dl.Task.Task.ID], codes[dl.Task.Task.ID] = dl.Reason, dl.ErrorCode
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{bad.ID: ReasonPermanent}
	for _, id := range expired {
		want[id] = "expired"
	}
	if len(reasons) != len(want) {
		t.Fatalf("dead letters %v, want %v (no flaky task may be there)", reasons, want)
	}
	for id, r := range want {
		if reasons[id] != r {
			t.Errorf("dead letter %s reason %q, want %q", id, reasons[id], r)
		}
	}
	if codes[bad.ID] != captchaq.CodeInvalidTask {
		t.Errorf("dead letter %s code %q, want %s", bad.ID, codes[bad.ID], captchaq.CodeInvalidTask)
	}

	// Replay the expired ones: now a worker takes them in time.
	n, err := f.c.Replay(ctx, captchaq.DeadLetterFilter{ErrorCode: "EXPIRED"})
	if err != nil || n != 3 {
		t.Fatalf("Replay: %d, %v; want 3", n, err)
	}
	again := f.collect(ctx, expired)
	for id, r := range again {
		res[id] = r
	}
	// Only the bad task is left among the dead letters.
	if d := f.depth(f.c.Names().Failed); d != 1 {
		t.Fatalf("dead letters after replay %d, want 1", d)
	}
	if st := f.sim.Stats(); st.Duplicates != 0 || st.Accepted != 43 {
		t.Errorf("simulator accepted %d (duplicates %d), want 43 and 0", st.Accepted, st.Duplicates)
	}
	for id, r := range res {
		if r.Status != captchaq.StatusSolved {
			t.Errorf("task %s: %s %q", id, r.Status, r.Error)
		}
	}
}

// TestFleetKill9RestartSameOwner: a worker killed with its tasks at the
// provider and started again under the same owner name (--owner) finds
// its old checkpoints in its queue: they are the dead run's, not its own,
// so they go back to the fleet at once, to be polled, not dropped.
func TestFleetKill9RestartSameOwner(t *testing.T) {
	cfg := fleetConfig(t)
	cfg.InflightLease = time.Minute // the old checkpoints must not come back by their lease
	solve := sim.Latency{Median: 5 * time.Second, Min: 5 * time.Second, Max: 5 * time.Second}
	f := newFleet(t, cfg, sim.Config{PollBan: sim.PollBan{Disabled: true}, Threads: 10, Seed: 9,
		Latency: map[provider.Kind]sim.Latency{provider.KindTurnstile: solve}},
		childConfig{Threads: 5, Poll: 50 * time.Millisecond, Grace: 5 * time.Second})
	ctx := longCtx(t, 60*time.Second)
	f.start("same", func(c *childConfig) { c.FreezeAt = 5 })
	f.waitConsumers(ctx, 1)
	const n = 5
	ids := f.enqueue(ctx, "same", n, 0)
	f.frozen(ctx, "same")
	f.until(ctx, "5 checkpoints held", func() bool { return unacked(t, f.c.Names().InflightQueue("same")) == n })
	f.signal("same", syscall.SIGKILL)
	if err := f.wait("same", 10*time.Second); err == nil {
		t.Fatal("same exited cleanly after SIGKILL")
	}
	f.start("same", nil)
	res := f.collect(ctx, ids)
	f.ledger(res, n)
}
