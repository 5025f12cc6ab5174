package amqp

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
)

func TestSplitBatchBounds(t *testing.T) {
	t.Parallel()
	reqs := func(n, paramBytes int) []*parkRequest {
		out := make([]*parkRequest, n)
		for i := range out {
			tk := captchaq.Task{ID: fmt.Sprint(i), Method: "base64", Params: map[string]string{"body": strings.Repeat("A", paramBytes)}}
			out[i] = &parkRequest{parkedCopy: parkedCopy{m: TaskMessage{Task: tk}, seq: 1}}
		}
		return out
	}
	sizes := func(groups [][]*parkRequest) []int {
		var out []int
		for _, g := range groups {
			out = append(out, len(g))
		}
		return out
	}
	for _, tc := range []struct {
		name       string
		n, bytes   int
		wantGroups []int
	}{
		{"one", 1, 10, []int{1}},
		{"count", parkBatchMax + 6, 10, []int{parkBatchMax, 6}},
		// 300 KiB images: three fit under parkBatchBytes, the fourth
		// starts the next message.
		{"bytes", 7, 300 << 10, []int{3, 3, 1}},
		// A task larger than the bound travels alone.
		{"huge", 2, 2 << 20, []int{1, 1}},
	} {
		if got := sizes(splitBatch(reqs(tc.n, tc.bytes))); !slices.Equal(got, tc.wantGroups) {
			t.Errorf("%s: messages of %v, want %v", tc.name, got, tc.wantGroups)
		}
	}
}

// TestSharedCheckpointNeverBringsBackAFinishedTask: three tasks parked in
// one message; once one of them is finished, the other two are parked
// again without it, so when their owner dies and the lease runs out, only
// those two come back (split from the recovery queue into task messages
// that keep their captcha ids), and the finished one does not.
func TestSharedCheckpointNeverBringsBackAFinishedTask(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.InflightLease = 300 * time.Millisecond
	c := setup(t, cfg)
	ctx := testCtx(t)
	const owner = "shared-owner"
	if err := c.DeclareInflight(ctx, owner); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = DeleteTopology(context.Background(), cfg, owner) })
	pub := c.NewPublisher()
	defer pub.Close()
	ids := []string{"sh-a", "sh-b", "sh-c"}
	for _, id := range ids {
		if err := pub.PublishTask(ctx, TaskMessage{Task: task(id, 0)}); err != nil {
			t.Fatal(err)
		}
	}

	s := newWorkerStore(pub, owner, slog.New(slog.DiscardHandler))
	tasks, err := c.Consume(ctx, []string{c.Names().Tasks}, len(ids))
	if err != nil {
		t.Fatal(err)
	}
	defer tasks.Close()
	for range ids {
		d := next(t, ctx, tasks)
		m, err := d.Task()
		if err != nil {
			t.Fatal(err)
		}
		if !s.hold(d, m) {
			t.Fatalf("hold %s: not fresh", m.Task.ID)
		}
		if _, _, err := s.Enqueue(ctx, []captchaq.Task{m.Task}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	parked, err := c.consume(ctx, []string{c.Names().InflightQueue(owner)}, -1, gatherAcks)
	if err != nil {
		t.Fatal(err)
	}
	defer parked.Close()
	holding := make(chan struct{})
	go func() {
		defer close(holding)
		for d := range parked.Deliveries() {
			s.holdCheckpoint(d)
		}
	}()

	// The three checkpoints leave in one message.
	errs := make(chan error, len(ids))
	gather(t, ctx, s, len(ids), func() {
		for i, id := range ids {
			go func() { errs <- s.Checkpoint(ctx, id, fmt.Sprint(1000+i), 1, time.Now()) }()
		}
	})
	for range ids {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, ctx, "one shared message held for three tasks", func() bool {
		return unacked(t, c.Names().InflightQueue(owner)) == 1 && s.beat(time.Now()).Parked == 3 && heldSeqs(s) == "sh-a:1 sh-b:1 sh-c:1"
	})
	var first *Delivery
	s.mu.Lock()
	for d := range s.shared {
		first = d
	}
	s.mu.Unlock()
	if ids, _, several := batchCopies(first.Headers); !several || strings.Join(slices.Sorted(slices.Values(ids)), " ") != "sh-a sh-b sh-c" {
		t.Fatalf("held message carries %v, want sh-a sh-b sh-c", ids)
	}
	if n := depth(t, ctx, c, c.Names().Tasks); n != 0 {
		t.Fatalf("task queue holds %d after the checkpoints, want 0", n)
	}

	// sh-a is finished: the message must not outlive it for long. The
	// copies parked again gather into one message too.
	gather(t, ctx, s, 2, func() {
		if err := s.Finish(ctx, captchaq.Result{ID: "sh-a", Status: captchaq.StatusSolved, Token: "T"}); err != nil {
			t.Fatal(err)
		}
	})
	waitFor(t, ctx, "sh-b and sh-c parked again without sh-a", func() bool {
		s.mu.Lock()
		_, kept := s.shared[first]
		s.mu.Unlock()
		return !kept && first.settled.Load() && heldSeqs(s) == "sh-b:2 sh-c:2"
	})

	// The owner dies: nothing it holds is acked any more.
	s.close()
	parked.Close()
	tasks.Close()
	<-holding
	w := &Worker{c: c, pub: pub, store: newWorkerStore(pub, "splitter", slog.New(slog.DiscardHandler)), log: slog.New(slog.DiscardHandler)}
	recov, err := c.Consume(ctx, []string{c.Names().Recover, c.Names().Tasks}, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer recov.Close()
	back := map[string]string{}
	split := 0
	for len(back) < 2 {
		d := next(t, ctx, recov)
		if d.Queue == c.Names().Recover {
			split++
			w.split(ctx, d)
			continue
		}
		m, err := d.Task()
		if err != nil {
			t.Fatal(err)
		}
		back[m.Task.ID] = m.CaptchaID
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	if want := map[string]string{"sh-b": "1001", "sh-c": "1002"}; fmt.Sprint(back) != fmt.Sprint(want) || split != 1 {
		t.Fatalf("came back after the lease: %v from %d split messages, want %v from 1 (sh-a was finished)", back, split, want)
	}
	// Nothing more: sh-a stays finished.
	time.Sleep(2 * cfg.InflightLease)
	select {
	case d := <-recov.Deliveries():
		t.Fatalf("another message came back: %s %s", d.Queue, d.Body)
	default:
	}
	if n := depth(t, ctx, c, c.Names().Failed); n != 0 {
		t.Fatalf("dead letters %d, want 0", n)
	}
}

// gather runs start, which parks n copies, while the parker is (said to
// be) busy, and flushes once all n wait: they leave in one message.
func gather(t *testing.T, ctx context.Context, s *WorkerStore, n int, start func()) {
	t.Helper()
	p := s.parker
	waitFor(t, ctx, "the parker idle", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.busy {
			return false
		}
		p.busy = true
		return true
	})
	start()
	waitFor(t, ctx, fmt.Sprintf("%d copies waiting", n), func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.waiting) == n
	})
	go p.flush()
}

// heldSeqs lists the checkpoint copies s holds, as id:copy.
func heldSeqs(s *WorkerStore) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for id, e := range s.entries {
		for seq := range e.checkpoints {
			out = append(out, fmt.Sprintf("%s:%d", id, seq))
		}
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(5 * time.Millisecond):
		}
	}
}
