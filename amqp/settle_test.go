package amqp

import (
	"sync"
	"testing"

	"github.com/captchaq/captchaq/internal/testbound"
)

// TestAnswerAndAckAreOne: a worker's connection dies after it sent a
// task's result and before the broker took the ack of the checkpoint
// that holds the task. The broker takes both or neither: here neither,
// so the checkpoint goes to the fleet, its adopter polls the task and
// answers it, and the task is answered once and paid once. Before, the
// result (published and confirmed on its own) stayed, the checkpoint's
// ack died with the connection, and the adopter answered the task a
// second time (a SIGSTOP beside a loaded machine answered four tasks
// twice in TestRecoverySIGSTOP).
func TestAnswerAndAckAreOne(t *testing.T) {
	p := newWorkerPair(t, fleetConfig(t))
	a := p.worker(p.cA, p.clientA, "settle-a", nil)
	b := p.worker(p.cB, p.clientB, "settle-b", nil)
	const id = "settled-0001"
	var once sync.Once
	cut := make(chan struct{})
	a.store.hooks.beforeCommit = func(got string) {
		if got != id {
			return
		}
		once.Do(func() {
			p.run(b)
			if !testbound.Eventually(p.consuming(p.c.Names().Adopt, 2)) {
				t.Error("worker b never consumed the adopt queue")
			}
			p.proxy.cut() // the answer is sent; its commit is not
			close(cut)
		})
	}
	p.run(a)
	p.consumers(1)
	p.publish(id)
	p.wait(cut, "worker a's answer sent")
	got := p.collect(1)
	p.until("worker b to answer the adopted task", func() bool { return b.Queue().Metrics().Solved == 1 })
	p.until("worker a to reconnect", func() bool { return p.cA.Reconnects() > 0 })
	p.stop()
	if got[0].ID != id {
		t.Fatalf("result for %q, want %q", got[0].ID, id)
	}
	p.solvedOnce(got, id) // and no second result left in the results queue
}

// TestCopyAndAckAreOne: a worker's connection dies while it moves a task
// to a newer copy of its checkpoint (a refresh; a retry parks the same
// way), after the copy was sent and before the broker took the ack of
// the copy it replaces. The broker takes both or neither: here neither,
// so the old copy goes to the fleet, its adopter polls the task and
// answers it, and the first worker, whose holder is gone, lets the task
// go: answered once, paid once. Before, the new copy (published and
// confirmed on its own) went to the fleet as well as the old one, two
// adopters took one each, and both answered.
func TestCopyAndAckAreOne(t *testing.T) {
	p := newWorkerPair(t, fleetConfig(t))
	polls := &heldPolls{Client: p.clientA, release: make(chan struct{})}
	a := p.worker(p.cA, polls, "copy-a", nil)
	b := p.worker(p.cB, p.clientB, "copy-b", nil)
	c := p.worker(p.cB, p.clientB, "copy-c", nil)
	const id = "copied-0001"
	p.run(a)
	p.consumers(1)
	p.publish(id)
	p.until("worker a holds the task's checkpoint", func() bool {
		a.store.holdings.mu.Lock()
		defer a.store.holdings.mu.Unlock()
		e, ok := a.store.holdings.entries[id]
		return ok && e.confirmed > 0 && e.checkpoints[e.confirmed] != nil
	})
	p.run(b)
	p.run(c)
	p.until("workers b and c consume the adopt queue", p.consuming(p.c.Names().Adopt, 3))
	var once sync.Once
	a.store.hooks.beforeCommit = func(got string) {
		if got == id {
			once.Do(p.proxy.cut) // the copy is sent; the commit is not
		}
	}
	a.store.refreshDue(p.ctx, 0)
	p.until("worker a's connection to drop", func() bool { return p.cA.Reconnects() > 0 })
	close(polls.release)
	got := p.collect(1)
	p.until("the workers to hold nothing", func() bool { return a.Held()+b.Held()+c.Held() == 0 })
	p.stop()
	if n := b.Queue().Metrics().Solved + c.Queue().Metrics().Solved; n != 1 {
		t.Errorf("the adopters answered the task %d times, want once", n)
	}
	p.solvedOnce(got, id)
}
