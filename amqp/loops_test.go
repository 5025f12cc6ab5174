package amqp

import (
	"context"
	"testing"
	"time"

	"github.com/captchaq/captchaq/internal/startstop"
)

// TestWorkerLoopsStartStop starts and stops the worker's refresher, beater,
// stale sweeper, report forwarder and thread pool, and the gateway's
// balance listener and result receiver, many times, ticking every
// millisecond against a real broker: each Stop returns (the loop ended
// with its context), and -race finds no run racing the next.
func TestWorkerLoopsStartStop(t *testing.T) {
	t.Parallel()
	c := setup(t, testConfig(t))
	pub := c.NewPublisher()
	defer pub.Close()
	store := newWorkerStore(pub, "loops", discardLogger)
	ctx := testCtx(t)
	reports, err := c.Consume(ctx, []string{c.Names().Reports}, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer reports.Close()
	// An empty queue for the gateway's result receiver.
	replies, err := c.Consume(ctx, []string{c.Names().Reports}, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer replies.Close()
	replyTaker := &replyReceiver{prefetch: 4, log: discardLogger}
	if err := c.DeclareThreads(ctx, 2); err != nil {
		t.Fatal(err)
	}
	forward := func(context.Context, string, string, bool, time.Time) error {
		t.Error("forwarded a report no one sent")
		return nil
	}
	loops := map[string]*startstop.Loop{
		"refresher": startstop.New((&refresher{s: store, every: time.Millisecond}).run),
		"beater": startstop.New((&beater{s: store, p: pub, every: time.Millisecond, log: discardLogger,
			bal: &balanceReader{every: time.Millisecond}}).run),
		"sweeper":          startstop.New((&staleSweeper{s: store, every: time.Millisecond}).run),
		"report forwarder": startstop.New((&reportForwarder{k: reports, forward: forward, log: discardLogger}).run),
		"balance listener": newBalanceListener(c).Loop,
		"result receiver":  startstop.New(func(ctx context.Context) { replyTaker.receive(ctx, replies) }),
		"thread pool":      startstop.New(newThreadPool(c, c.Names().PlanThreads(), 2, discardLogger).run),
	}
	for range 100 {
		for name, l := range loops {
			if err := l.Start(ctx); err != nil {
				t.Fatalf("%s: Start: %v", name, err)
			}
		}
		for _, l := range loops {
			l.Stop()
		}
	}
	if n := c.Reconnects(); n != 0 {
		t.Errorf("%d reconnects: a loop broke the connection", n)
	}
}
