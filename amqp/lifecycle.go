package amqp

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/startstop"
)

// lifecycle is a gateway's run, under one lock: whether it started and
// whether it shut down, the function told of each result, and what Start
// started (the reply consumer, the result receiver and, on a shared
// store, the resyncer), which Shutdown stops.
type lifecycle struct {
	mu       sync.Mutex
	started  bool
	closed   bool
	onResult func(captchaq.Result)
	results  *Consumer
	receiver *startstop.Loop // receive, from Start until Shutdown
	resyncer *startstop.Loop // resync, on a shared store: from Start until Shutdown
}

// beforeStart calls set under the lock, unless the gateway started:
// then it says that what (Attach, AttachReplicas) came after Start.
func (l *lifecycle) beforeStart(what string, set func()) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started {
		return fmt.Errorf("amqp: gateway: %s after Start", what)
	}
	set()
	return nil
}

// begin marks the gateway started, unless it started or shut down before.
func (l *lifecycle) begin() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started || l.closed {
		return errors.New("amqp: gateway: Start called twice or after Shutdown")
	}
	l.started = true
	return nil
}

// fail marks a gateway whose Start failed closed: it takes no tasks.
func (l *lifecycle) fail() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
}

// serve keeps k and the loops Start made and starts the loops, under the
// lock, so a Shutdown that saw k stops them; resyncer may be nil.
func (l *lifecycle) serve(k *Consumer, receiver, balances, resyncer *startstop.Loop) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.results, l.receiver, l.resyncer = k, receiver, resyncer
	_ = receiver.Start(context.Background())
	_ = balances.Start(context.Background())
	if resyncer != nil {
		_ = resyncer.Start(context.Background())
	}
}

// shut marks the gateway shut down and returns what Start started (k nil
// when it started nothing); first is false when it was shut down before.
func (l *lifecycle) shut() (k *Consumer, receiver, resyncer *startstop.Loop, first bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, nil, nil, false
	}
	l.closed = true
	return l.results, l.receiver, l.resyncer, true
}

// open says whether tasks may be taken now.
func (l *lifecycle) open() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.closed:
		return captchaq.ErrClosed
	case !l.started:
		return errors.New("amqp: gateway not started: call Start first (its reply queue must exist before a task names it)")
	}
	return nil
}

// deliver tells r to the function Attach set.
func (l *lifecycle) deliver(r captchaq.Result) {
	l.mu.Lock()
	fn := l.onResult
	l.mu.Unlock()
	if fn != nil {
		fn(r)
	}
}
