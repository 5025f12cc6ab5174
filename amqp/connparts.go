package amqp

import (
	"context"
	"fmt"
	"sync"
)

// blockGate is whether the broker blocks publishes (a resource alarm),
// under its own lock.
type blockGate struct {
	mu        sync.Mutex
	unblocked chan struct{} // closed while the broker is not blocking publishes
	closing   chan struct{} // the Conn's: closed at Close
}

func (g *blockGate) set(b bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	isBlocked := !isClosedChan(g.unblocked)
	switch {
	case b && !isBlocked:
		g.unblocked = make(chan struct{})
	case !b && isBlocked:
		close(g.unblocked)
	}
}

// wait returns once the broker accepts publishes.
func (g *blockGate) wait(ctx context.Context) error {
	g.mu.Lock()
	ch := g.unblocked
	g.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("amqp: broker is blocking publishes (resource alarm): %w", ctx.Err())
	case <-g.closing:
		return ErrClosed
	}
}

// declaredQueues are the queues declared on request (checkpoint and reply
// queues, the routing record, thread pools), by name, to declare again
// after a reconnect in the order they were first declared (the routing
// check before the pools it guards), under their own lock.
type declaredQueues struct {
	mu     sync.Mutex
	byName map[string]declareFunc
	order  []string
}

// add remembers declare for name, in name's first place.
func (q *declaredQueues) add(name string, declare declareFunc) {
	q.mu.Lock()
	if _, ok := q.byName[name]; !ok {
		q.order = append(q.order, name)
	}
	q.byName[name] = declare
	q.mu.Unlock()
}

// list is the declarations, in order.
func (q *declaredQueues) list() []declareFunc {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]declareFunc, 0, len(q.order))
	for _, name := range q.order {
		out = append(out, q.byName[name])
	}
	return out
}
