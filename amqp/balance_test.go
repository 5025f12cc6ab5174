package amqp

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/sim"
)

// TestBalanceListenerWait: wait ends when a fresh reading is recorded,
// not for a stale one, and with its context otherwise.
func TestBalanceListenerWait(t *testing.T) {
	t.Parallel()
	l := newBalanceListener(nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if l.wait(ctx) {
		t.Fatal("wait with no reading and an ended context returned true")
	}
	got := make(chan bool, 1)
	go func() { got <- l.wait(context.Background()) }()
	l.record(1.5, time.Now().Add(-2*balanceStale)) // too old to answer
	select {
	case <-got:
		t.Fatal("a stale reading ended the wait")
	case <-time.After(50 * time.Millisecond):
	}
	l.record(2.5, time.Now())
	if !<-got {
		t.Fatal("wait returned false after a fresh reading")
	}
	if v, _, err := l.balance(); err != nil || v != 2.5 {
		t.Fatalf("balance %v %v, want 2.5", v, err)
	}
	l.record(9, time.Now().Add(-time.Minute)) // older than the one held
	if v, _, _ := l.balance(); v != 2.5 {
		t.Fatalf("an older reading replaced a newer one: %v", v)
	}
}

// TestGatewayBalanceFromFirstRequest: a gateway of a fleet without a
// reading answers ErrBalanceUnknown within its bound (never a parameter
// error); once a worker has read the balance, a gateway started after its
// only beat answers it from its first request, from the reading kept on
// the broker.
func TestGatewayBalanceFromFirstRequest(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	r := newGatewayRig(t, cfg)
	before, _ := r.gateway("gw-before", nil, nil)
	ctx, cancel := context.WithTimeout(testCtx(t), 200*time.Millisecond)
	defer cancel()
	if v, err := before.Balance(ctx); !errors.Is(err, ErrBalanceUnknown) {
		t.Fatalf("no worker yet: %v %v, want ErrBalanceUnknown", v, err)
	}

	var reads atomic.Int32
	r.workerWith("bal-worker", sim.Config{LatencyScale: 0.01}, 2, 2, func(wc *WorkerConfig) {
		// One beat, at the start: no later beat can reach a gateway.
		wc.BeatInterval = time.Hour
		wc.Balance = func(context.Context) (float64, error) {
			reads.Add(1)
			return 12.5, nil
		}
	})
	n := NamesFor(cfg.Prefix)
	testbound.Until(t, "the reading kept on the broker", func() bool { return depth(t, testCtx(t), r.c, n.Balance) == 1 })

	after, _ := r.gateway("gw-after", nil, nil)
	if v, err := after.Balance(testCtx(t)); err != nil || v != 12.5 {
		t.Fatalf("a gateway started after the only beat: %v %v, want 12.5", v, err)
	}
	// The kept reading stays for the next gateway: the read puts it back
	// with a nack, which the queue takes in after the reading channel has
	// moved on, so another channel may see it missing for a moment.
	testbound.Until(t, "the kept reading back after a gateway read it", func() bool {
		return depth(t, testCtx(t), r.c, n.Balance) == 1
	})
	if got := reads.Load(); got != 1 {
		t.Fatalf("the worker read the balance %d times, want 1", got)
	}
}
