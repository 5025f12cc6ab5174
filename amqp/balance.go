package amqp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/captchaq/captchaq/internal/startstop"
)

// Balance reading: the gateway holds no provider key, so the workers read
// the provider's balance (WorkerConfig.Balance, every BalanceEvery) and
// send the latest reading in their status beats; the gateway keeps the
// freshest reading it hears and answers getbalance from it.
//
// How old an answer may be: a worker reads the balance at most
// BalanceEvery ago (60 s by default), its beat carries it at most
// BeatInterval later (5 s), so a reading is normally under 65 s old. A
// reading older than balanceStale (5 minutes: every worker stopped, or
// none can reach the provider) is not served.

// Defaults of the balance reading.
const (
	BalanceEveryDefault = 60 * time.Second
	balanceStale        = 5 * time.Minute
	balanceReadTimeout  = 10 * time.Second
	balanceRelisten     = time.Second
)

// balanceReader is a worker's balance, read at most once per every.
type balanceReader struct {
	read  func(ctx context.Context) (float64, error)
	every time.Duration

	value float64
	at    time.Time // when value was read; zero before the first read
	tried time.Time
}

// stamp puts the latest reading on b, reading again when it is due.
func (r *balanceReader) stamp(ctx context.Context, b *StatusBeat) {
	if r == nil || r.read == nil {
		return
	}
	if now := time.Now(); now.Sub(r.tried) >= r.every {
		r.tried = now
		rctx, cancel := context.WithTimeout(ctx, balanceReadTimeout)
		v, err := r.read(rctx)
		cancel()
		if err == nil {
			r.value, r.at = v, now
		}
	}
	if !r.at.IsZero() {
		v := r.value
		b.Balance, b.BalanceAt = &v, r.at
	}
}

// balanceListener hears the status beats and keeps the freshest balance,
// from Start until Stop.
type balanceListener struct {
	*startstop.Loop
	c *Conn

	mu    sync.Mutex
	value float64
	at    time.Time
}

func newBalanceListener(c *Conn) *balanceListener {
	l := &balanceListener{c: c}
	l.Loop = startstop.New(l.run)
	return l
}

// run listens until ctx ends, opening a new channel when one fails.
func (l *balanceListener) run(ctx context.Context) {
	for ctx.Err() == nil {
		_ = l.listen(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(balanceRelisten):
		}
	}
}

func (l *balanceListener) listen(ctx context.Context) error {
	ch, _, err := l.c.channel(ctx)
	if err != nil {
		return err
	}
	defer ch.Close()
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		return err
	}
	if err := ch.QueueBind(q.Name, "", l.c.Names().Status, false, nil); err != nil {
		return err
	}
	beats, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case m, ok := <-beats:
			if !ok {
				return errors.New("status channel closed")
			}
			var b StatusBeat
			if json.Unmarshal(m.Body, &b) == nil && b.Balance != nil {
				l.mu.Lock()
				if b.BalanceAt.After(l.at) {
					l.value, l.at = *b.Balance, b.BalanceAt
				}
				l.mu.Unlock()
			}
		}
	}
}

// balance returns the freshest reading and when it was read.
func (l *balanceListener) balance() (float64, time.Time, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.at.IsZero() {
		return 0, time.Time{}, errors.New("no worker has reported the provider's balance yet (workers read it every minute and send it in their status beats)")
	}
	if age := time.Since(l.at); age > balanceStale {
		return 0, l.at, fmt.Errorf("the latest balance a worker reported is %s old: are the workers running?", age.Round(time.Second))
	}
	return l.value, l.at, nil
}

// Balance answers getbalance for the front: the freshest provider balance
// a worker reported in its status beats (see BalanceEveryDefault for how
// old it may be), or an error saying why there is none.
func (g *Gateway) Balance(ctx context.Context) (float64, error) {
	v, _, err := g.balances.balance()
	return v, err
}
