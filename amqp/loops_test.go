package amqp

import (
	"testing"
	"time"

	"github.com/captchaq/captchaq/internal/startstop"
)

// TestWorkerLoopsStartStop starts and stops the worker's refresher, beater
// and stale sweeper, and the gateway's balance listener, many times, ticking every millisecond against a real
// broker: each Stop returns (the loop ended with its context), and -race
// finds no run racing the next.
func TestWorkerLoopsStartStop(t *testing.T) {
	t.Parallel()
	c := setup(t, testConfig(t))
	pub := c.NewPublisher()
	defer pub.Close()
	store := newWorkerStore(pub, "loops", discardLogger)
	loops := map[string]*startstop.Loop{
		"refresher": startstop.New((&refresher{s: store, every: time.Millisecond}).run),
		"beater": startstop.New((&beater{s: store, p: pub, every: time.Millisecond, log: discardLogger,
			bal: &balanceReader{every: time.Millisecond}}).run),
		"sweeper":          startstop.New((&staleSweeper{s: store, every: time.Millisecond}).run),
		"balance listener": newBalanceListener(c).Loop,
	}
	ctx := testCtx(t)
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
