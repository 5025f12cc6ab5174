package server

import (
	"context"
	"errors"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// balanceCache keeps the last balance read through read (Config.Balance)
// for BalanceCacheDefault.
type balanceCache struct {
	read  func(context.Context) (float64, error) // nil: no balance
	reads singleflight.Group

	mu  sync.Mutex
	at  time.Time
	val float64
}

// balance answers getbalance from a short cache. Requests that find it
// stale share one reading: a reading may wait (a gateway without one
// waits up to amqp.BalanceWait for its workers), and the requests must
// not each wait in turn. The reading is not cancelled by the request
// that started it.
func (c *balanceCache) balance(ctx context.Context) (float64, error) {
	if c.read == nil {
		return 0, errors.New("balance is not available on this server")
	}
	c.mu.Lock()
	if !c.at.IsZero() && time.Since(c.at) < BalanceCacheDefault {
		v := c.val
		c.mu.Unlock()
		return v, nil
	}
	c.mu.Unlock()
	reading := c.reads.DoChan("", func() (any, error) {
		v, err := c.read(context.WithoutCancel(ctx))
		if err == nil {
			c.mu.Lock()
			c.val, c.at = v, time.Now()
			c.mu.Unlock()
		}
		return v, err
	})
	select {
	case r := <-reading:
		if r.Err != nil {
			return 0, r.Err
		}
		return r.Val.(float64), nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}
