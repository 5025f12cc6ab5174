package amqp

import (
	"context"
	"sync"
	"time"
)

// Bounds of one checkpoint message that carries several tasks, and how
// long a copy waits for others to share it.
const (
	parkBatchMax   = 64      // copies
	parkBatchBytes = 1 << 20 // encoded tasks; a larger one travels alone
	parkGather     = 250 * time.Microsecond
)

// parker publishes a worker's checkpoint copies (see WorkerStore): a copy
// that comes while none was sent in the last parkGather leaves at once;
// the copies that come after it gather for parkGather and leave together
// in one message (batchPublishing), at most parkBatchMax to a message, or
// as a task message of its own (Publisher.park) if one came alone.
// Messages are not held back by the confirms of earlier ones. Tasks
// submitted together are checkpointed together, so under load the broker
// stores, confirms, delivers and acks one message for several tasks,
// while a checkpoint waits about a quarter of a millisecond at most.
//
// A message of several tasks is published with Names.Recover as its
// routing key: when its lease runs out in a dead owner's checkpoint
// queue, it goes to the recovery queue, where a worker splits it into task
// messages, instead of to a task queue. Safe for concurrent use.
type parker struct {
	pub        *Publisher
	owner, run string
	ctx        context.Context // ends the publishes of a closed store

	wg      sync.WaitGroup // the flush loop and its publishes
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

// flush publishes what waits at once, then every parkGather what came
// meanwhile, until nothing comes; each message waits for its confirm on
// its own.
func (p *parker) flush() {
	for first := true; ; first = false {
		if !first {
			time.Sleep(parkGather)
		}
		p.mu.Lock()
		batch := p.waiting
		p.waiting = nil
		if len(batch) == 0 {
			p.busy = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		for _, group := range splitBatch(batch) {
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				err := p.publish(group)
				for _, r := range group {
					r.done <- err
				}
			}()
		}
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
