package amqp

import (
	"context"
	"sync"
)

// Bounds of one checkpoint message that carries several tasks.
const (
	parkBatchMax   = 64      // copies
	parkBatchBytes = 1 << 20 // encoded tasks; a larger one travels alone
)

// parker publishes a worker's checkpoint copies (see WorkerStore) with
// group commit: while one publish waits for its confirm, the copies that
// come meanwhile gather, and leave together once it is confirmed. A copy
// that finds nothing under way leaves at once, alone, as a task message
// of its own (Publisher.park); copies that gathered leave in one message
// (batchPublishing), at most parkBatchMax to a message. So a copy waits at
// most for one confirm before its own is sent, and under load the broker
// stores, confirms, delivers and acks one message for many tasks.
//
// A message of several tasks is published with Names.Recover as its
// routing key: when its lease runs out in a dead owner's checkpoint
// queue, it goes to the recovery queue, where a worker splits it into task
// messages, instead of to a task queue. Safe for concurrent use.
type parker struct {
	pub        *Publisher
	owner, run string
	ctx        context.Context // ends the publishes of a closed store

	wg      sync.WaitGroup // the flush loop
	mu      sync.Mutex
	waiting []*parkRequest
	busy    bool // a flush loop runs
}

type parkRequest struct {
	parkedCopy
	done chan error
}

// park publishes c and returns once the broker has confirmed it, or ctx
// ends.
func (p *parker) park(ctx context.Context, c parkedCopy) error {
	return p.parkAll(ctx, []parkedCopy{c})[0]
}

// parkAll publishes the copies together (they join the same flush) and
// returns each one's outcome once all are confirmed, or ctx ends.
func (p *parker) parkAll(ctx context.Context, cs []parkedCopy) []error {
	rs := make([]*parkRequest, len(cs))
	for i, c := range cs {
		rs[i] = &parkRequest{parkedCopy: c, done: make(chan error, 1)}
	}
	p.mu.Lock()
	p.waiting = append(p.waiting, rs...)
	if !p.busy && len(rs) > 0 {
		p.busy = true
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.flush()
		}()
	}
	p.mu.Unlock()
	errs := make([]error, len(rs))
	for i, r := range rs {
		select {
		case errs[i] = <-r.done:
		case <-ctx.Done():
			errs[i] = ctx.Err()
		}
	}
	return errs
}

// flush publishes what waits, waits for the confirms, and goes on while
// more came meanwhile.
func (p *parker) flush() {
	for {
		p.mu.Lock()
		batch := p.waiting
		p.waiting = nil
		if len(batch) == 0 {
			p.busy = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		var wg sync.WaitGroup
		for _, group := range splitBatch(batch) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := p.publish(group)
				for _, r := range group {
					r.done <- err
				}
			}()
		}
		wg.Wait()
	}
}

// splitBatch cuts the requests into messages of at most parkBatchMax
// copies and about parkBatchBytes of tasks.
func splitBatch(rs []*parkRequest) [][]*parkRequest {
	var out [][]*parkRequest
	var cur []*parkRequest
	size := 0
	for _, r := range rs {
		n := taskSize(r.m)
		if len(cur) > 0 && (len(cur) == parkBatchMax || size+n > parkBatchBytes) {
			out = append(out, cur)
			cur, size = nil, 0
		}
		cur = append(cur, r)
		size += n
	}
	return append(out, cur)
}

// taskSize estimates a task's encoded size from its parameters, which
// hold what is large (an image).
func taskSize(m TaskMessage) int {
	n := 256
	for k, v := range m.Task.Params {
		n += len(k) + len(v)
	}
	return n
}

func (p *parker) publish(group []*parkRequest) error {
	if len(group) == 1 {
		return p.pub.park(p.ctx, p.owner, p.run, group[0].m, group[0].seq)
	}
	copies := make([]parkedCopy, len(group))
	for i, r := range group {
		copies[i] = r.parkedCopy
	}
	return p.pub.parkBatch(p.ctx, p.owner, p.run, copies)
}
