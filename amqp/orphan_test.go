package amqp

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/provider"
)

// TestCopyTakenAsItsTaskIsLetGoIsAnswered: a copy of a task reaches a
// worker just as it lets go of the task (the fleet holds it now: its
// store forgot it, and its queue is finishing it). The queue takes the
// copy as one more waiter of the task it lets go of, so no Finish of the
// copy's own comes. Before, the copy stayed unacked with the worker, and
// the task unanswered, until the worker stopped; now the worker returns
// it to the fleet when that task finishes, and it is answered once, by
// polling the captcha id the provider gave the first time.
func TestCopyTakenAsItsTaskIsLetGoIsAnswered(t *testing.T) {
	p := newWorkerPair(t, fleetConfig(t))
	polls := &heldPolls{Client: p.clientB, release: make(chan struct{})}
	w := p.worker(p.cB, polls, "orphan", nil)
	const id = "orphan-0001"
	adopted := make(chan error, 8)
	w.afterAdopt = func(got string, err error) {
		if got == id {
			adopted <- err
		}
	}
	var letGo atomic.Bool
	w.store.hooks.afterLetGo = func(got string) {
		if got != id || letGo.Swap(true) {
			return
		}
		// The task enqueued again: a fresh copy, taken while the queue
		// still finishes the task. (On the queue's goroutine: t.Error.)
		pub := p.c.NewPublisher()
		defer pub.Close()
		if err := pub.PublishTask(p.ctx, TaskMessage{Task: fleetTask(id, 0)}); err != nil {
			t.Errorf("publishing the copy: %v", err)
			return
		}
		select {
		case err := <-adopted:
			if err != nil {
				t.Errorf("adopting the copy: %v", err)
			}
		case <-time.After(testbound.Bound):
			t.Errorf("waited %v for the copy's adoption", testbound.Bound)
		}
	}
	p.run(w)
	p.consumers(1)
	p.publish(id)
	if err := testbound.Receive(t, "the task's adoption", adopted); err != nil {
		t.Fatal(err)
	}
	p.until("the task's checkpoint", func() bool {
		w.store.holdings.mu.Lock()
		defer w.store.holdings.mu.Unlock()
		e, ok := w.store.holdings.entries[id]
		return ok && e.confirmed > 0
	})
	// As the stale sweeper does for a task whose holder went back to the
	// fleet: marked lost, let go of.
	w.store.holdings.mu.Lock()
	w.store.holdings.entries[id].lost = true
	w.store.holdings.mu.Unlock()
	if err := w.q.Abandon(p.ctx, id); err != nil {
		t.Fatal(err)
	}
	if !letGo.Load() {
		t.Fatal("the queue let go of the task without the store letting go")
	}
	close(polls.release)
	got := p.collect(1)
	p.until("the worker holds nothing", func() bool { return w.Held() == 0 })
	p.stop()
	p.solvedOnce(got, id)
}

// heldPolls holds every poll until release closes.
type heldPolls struct {
	*provider.Client
	release chan struct{}
}

func (h *heldPolls) PollMany(ctx context.Context, ids []string) ([]provider.PollResult, error) {
	select {
	case <-h.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return h.Client.PollMany(ctx, ids)
}
