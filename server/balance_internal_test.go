package server

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
)

// TestBalanceSharesOneReading: getbalance requests that come while the
// balance is being read (a gateway waiting for its workers) share that
// one reading instead of each waiting in turn; a failed reading is not
// kept (the next request reads again), a good one is, for
// BalanceCacheDefault; a request that gives up does not end the reading
// the others wait for.
func TestBalanceSharesOneReading(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		release := make(chan struct{})
		var fail atomic.Bool
		fail.Store(true)
		s := &balanceCache{read: func(ctx context.Context) (float64, error) {
			calls.Add(1)
			select {
			case <-release:
			case <-ctx.Done():
				return 0, ctx.Err()
			}
			if fail.Load() {
				return 0, errors.New("no worker has reported the provider's balance yet")
			}
			return 42.5, nil
		}}
		const n = 8
		var wg sync.WaitGroup
		errs := make(chan error, n)
		gaveUp, cancel := context.WithCancel(context.Background())
		for i := range n {
			ctx := context.Background()
			if i == 0 {
				ctx = gaveUp // the request that starts the reading leaves
			}
			wg.Go(func() {
				_, err := s.balance(ctx)
				errs <- err
			})
		}
		synctest.Wait() // all n are waiting on the one reading
		cancel()
		synctest.Wait()
		close(release)
		wg.Wait()
		close(errs)
		canceled := 0
		for err := range errs {
			switch {
			case errors.Is(err, context.Canceled):
				canceled++
			case err == nil || err.Error() != "no worker has reported the provider's balance yet":
				t.Errorf("balance: %v, want the reading's error", err)
			}
		}
		if got := calls.Load(); got != 1 || canceled != 1 {
			t.Fatalf("%d readings for %d requests at once (%d gave up), want 1 reading (1 gave up)", got, n, canceled)
		}
		fail.Store(false)
		if v, err := s.balance(context.Background()); err != nil || v != 42.5 || calls.Load() != 2 {
			t.Fatalf("after a failed reading: %v %v, %d readings; want 42.5 read again", v, err, calls.Load())
		}
		if v, err := s.balance(context.Background()); err != nil || v != 42.5 || calls.Load() != 2 {
			t.Fatalf("within the cache: %v %v, %d readings; want 42.5 from the cache", v, err, calls.Load())
		}
	})
}
