package amqp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/captchaq/captchaq/internal/startstop"
)

// Balance reading: the gateway holds no provider key, so the workers read
// the provider's balance (WorkerConfig.Balance, at their start and then
// every BalanceEvery) and send the latest reading in their status beats;
// the gateway keeps the freshest reading it hears and answers getbalance
// from it.
//
// From a gateway's first request: each new reading is also kept on the
// broker, in the queue Names.Balance (one message: the newest replaces
// the one before; it expires after balanceStale). A gateway reads it when
// it starts, and again when asked while it holds no fresh reading; when
// none is kept either (a fleet whose workers have not read the balance
// yet) it waits up to BalanceWait for a beat that carries one, and
// otherwise answers ErrBalanceUnknown, which the front turns into a code
// clients treat as "try again later", never a parameter error.
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
	// BalanceWait bounds a getbalance's wait for a reading when the
	// gateway holds none and the broker keeps none: a beat interval and a
	// second, so a worker that has a reading is heard.
	BalanceWait = BeatIntervalDefault + time.Second
)

// ErrBalanceUnknown: no worker's balance reading reached the gateway in
// time (the workers have not read it yet, or none runs).
var ErrBalanceUnknown = errors.New("amqp: the provider's balance is not known yet")

// balanceReader is a worker's balance, read at most once per every.
type balanceReader struct {
	read  func(ctx context.Context) (float64, error)
	every time.Duration

	value float64
	at    time.Time // when value was read; zero before the first read
	tried time.Time
	kept  time.Time // the reading last kept on the broker
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

// keep puts a reading b carries on the broker for gateways that start
// later (Names.Balance), once per reading: persistent, unconfirmed (the
// next reading replaces it).
func (r *balanceReader) keep(ctx context.Context, p *Publisher, b StatusBeat) {
	if r == nil || b.Balance == nil || !b.BalanceAt.After(r.kept) {
		return
	}
	body, err := json.Marshal(balanceReading{Balance: *b.Balance, At: b.BalanceAt})
	if err != nil {
		return
	}
	ch, _, err := p.channel(ctx)
	if err != nil {
		return
	}
	_, err = ch.PublishWithDeferredConfirmWithContext(ctx, "", p.c.Names().Balance, false, false, amqp091.Publishing{
		ContentType: contentTypeJSON, DeliveryMode: amqp091.Persistent, Timestamp: b.BalanceAt, Body: body,
	})
	if err == nil {
		r.kept = b.BalanceAt
	}
}

// balanceReading is the message kept in Names.Balance.
type balanceReading struct {
	Balance float64   `json:"balance"`
	At      time.Time `json:"at"`
}

// balanceListener hears the status beats and keeps the freshest balance,
// from Start until Stop.
type balanceListener struct {
	*startstop.Loop
	c *Conn

	mu    sync.Mutex
	value float64
	at    time.Time
	// heard is closed (and replaced) when a fresher reading arrives.
	heard chan struct{}
}

func newBalanceListener(c *Conn) *balanceListener {
	l := &balanceListener{c: c, heard: make(chan struct{})}
	l.Loop = startstop.New(l.run)
	return l
}

// run reads the reading kept on the broker (getbalance answers from the
// first request), then listens until ctx ends, opening a new channel when
// one fails.
func (l *balanceListener) run(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, balanceReadTimeout)
	_ = l.readKept(rctx)
	cancel()
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
				l.record(*b.Balance, b.BalanceAt)
			}
		}
	}
}

// record keeps a reading if it is fresher than the one held.
func (l *balanceListener) record(v float64, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if at.After(l.at) {
		l.value, l.at = v, at
		close(l.heard)
		l.heard = make(chan struct{})
	}
}

// readKept records the reading kept on the broker, if there is one: a
// get that puts the message back at once.
func (l *balanceListener) readKept(ctx context.Context) error {
	ch, _, err := l.c.channel(ctx)
	if err != nil {
		return err
	}
	defer ch.Close()
	m, ok, err := ch.Get(l.c.Names().Balance, false)
	if err != nil || !ok {
		return err
	}
	var r balanceReading
	if json.Unmarshal(m.Body, &r) == nil && !r.At.IsZero() {
		l.record(r.Balance, r.At)
	}
	return m.Nack(false, true)
}

// wait waits until a fresh reading is held or ctx ends.
func (l *balanceListener) wait(ctx context.Context) bool {
	for {
		l.mu.Lock()
		fresh, heard := !l.at.IsZero() && time.Since(l.at) <= balanceStale, l.heard
		l.mu.Unlock()
		if fresh {
			return true
		}
		select {
		case <-heard:
		case <-ctx.Done():
			return false
		}
	}
}

// balance returns the freshest reading and when it was read.
func (l *balanceListener) balance() (float64, time.Time, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.at.IsZero() {
		return 0, time.Time{}, errors.New("no worker has reported the provider's balance yet (workers read it when they start and every minute)")
	}
	if age := time.Since(l.at); age > balanceStale {
		return 0, l.at, fmt.Errorf("the latest balance a worker reported is %s old: are the workers running?", age.Round(time.Second))
	}
	return l.value, l.at, nil
}

// Balance answers getbalance for the front: the freshest provider balance
// a worker reported (see BalanceEveryDefault for how old it may be). With
// none held it reads the one kept on the broker, then waits up to
// BalanceWait (or until ctx ends) for a beat that carries one; without
// one then, the error is ErrBalanceUnknown, saying why.
func (g *Gateway) Balance(ctx context.Context) (float64, error) {
	if v, _, err := g.balances.balance(); err == nil {
		return v, nil
	}
	if err := g.balances.readKept(ctx); err != nil {
		g.log.Debug("kept balance reading not read", "err", err)
	}
	wctx, cancel := context.WithTimeout(ctx, BalanceWait)
	defer cancel()
	g.balances.wait(wctx)
	v, _, err := g.balances.balance()
	if err != nil {
		return 0, balanceUnknown{err.Error()}
	}
	return v, nil
}

// balanceUnknown is ErrBalanceUnknown with the reason, which is its text
// (a client reads it).
type balanceUnknown struct{ why string }

func (e balanceUnknown) Error() string        { return e.why }
func (e balanceUnknown) Is(target error) bool { return target == ErrBalanceUnknown }
