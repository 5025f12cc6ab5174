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
	a.store.beforeCommit = func(got string) {
		if got != id {
			return
		}
		once.Do(func() {
			p.run(b)
			adopters := func() bool {
				qs, err := p.c.Depths(p.ctx, p.c.Names().Adopt)
				return err == nil && qs[0].Consumers == 2
			}
			if !testbound.Eventually(adopters) {
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
