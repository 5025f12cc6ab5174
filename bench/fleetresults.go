package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/captchaq/captchaq/amqp"
)

// resultCounts counts each task's different answers as they reach the
// results queue, and the copies of an answer counted already: a message
// delivered again because the feed's own ack died with its connection is
// neither.
type resultCounts struct {
	mu      sync.Mutex
	counts  map[string]int  // task id: different answers
	seen    map[string]bool // the publish tokens counted (see record)
	answers map[string]bool // task id and answer (answerKey) counted
	copies  int
	last    time.Time
	more    chan struct{}
	get     func(ctx context.Context) error
}

func newResultCounts() *resultCounts {
	return &resultCounts{counts: map[string]int{}, seen: map[string]bool{}, answers: map[string]bool{}, more: make(chan struct{})}
}

// answerKey tells one answer from another: its status, the captcha id
// that solved it, its token or answer, its error code. A body that does
// not decode is an answer of its own.
func answerKey(d amqp091.Delivery) string {
	r, err := amqp.DecodeResult(d.Body)
	if err != nil {
		return "undecodable\x00" + string(d.Body)
	}
	return strings.Join([]string{string(r.Status), r.CaptchaID, r.Token, string(r.Answer), r.ErrorCode}, "\x00")
}

// copiesOf returns how many results repeated an answer counted already.
func (c *resultCounts) copiesOf() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.copies
}

func (c *resultCounts) n(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[id]
}

// waitAll waits until every id has a result and returns when the last
// first arrived.
func (c *resultCounts) waitAll(ctx context.Context, ids []string) (time.Time, error) {
	for {
		c.mu.Lock()
		var missing []string
		for _, id := range ids {
			if c.counts[id] == 0 {
				missing = append(missing, id)
			}
		}
		last, more := c.last, c.more
		c.mu.Unlock()
		if len(missing) == 0 {
			return last, nil
		}
		select {
		case <-more:
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("fleet: %d of %d tasks have no result (%s): %w", len(missing), len(ids), strings.Join(missing[:min(len(missing), 10)], ", "), ctx.Err())
		}
	}
}

// drain takes what is left in the results queue.
func (c *resultCounts) drain(ctx context.Context) error { return c.get(ctx) }

// countResults consumes the results queue and counts each id's results.
// It consumes again on a new connection when its connection ends (a
// broker restart, FaultRestart): without that, the results published
// after the restart waited unread and the run reported them lost.
func (r *fleetRun) countResults(ctx context.Context) (*resultCounts, func(), error) {
	c := newResultCounts()
	feed := &resultFeed{url: r.cfg.URL, queue: amqp.NamesFor(r.prefix).Results}
	ds, err := feed.open()
	if err != nil {
		return nil, nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		feed.run(ctx, ds, c.record)
	}()
	c.get = feed.drained
	return c, func() { feed.stop(); <-done }, nil
}

// record counts d. A message the broker delivers again (the feed's ack
// was lost with the connection) carries the token of the publish it came
// from: counted already, it is nothing new. Any other message with an
// answer counted already for its task is a copy.
func (c *resultCounts) record(d amqp091.Delivery) {
	c.mu.Lock()
	defer c.mu.Unlock()
	token, _ := d.Headers[amqp.HeaderPublish].(string)
	if d.Redelivered && token != "" && c.seen[token] {
		return
	}
	if token != "" {
		c.seen[token] = true
	}
	key := d.MessageId + "\x00" + answerKey(d)
	if c.answers[key] {
		c.copies++
		return
	}
	c.answers[key] = true
	c.counts[d.MessageId]++
	if c.counts[d.MessageId] == 1 {
		c.last = time.Now()
	}
	close(c.more)
	c.more = make(chan struct{})
}

// resultFeed is a consumer of the results queue that consumes again on a
// new connection when its connection ends, until stop.
type resultFeed struct {
	url, queue string
	mu         sync.Mutex
	conn       *amqp091.Connection
	stopped    bool
}

// open consumes the queue on a new connection.
func (f *resultFeed) open() (<-chan amqp091.Delivery, error) {
	cn, err := amqp091.Dial(f.url)
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	ch, err := cn.Channel()
	if err != nil {
		cn.Close()
		return nil, fmt.Errorf("fleet: %w", err)
	}
	// Acked once counted: with the broker's automatic ack, the results
	// on their way when a restart closed the connection were gone from
	// the queue without being counted, and the run reported them lost.
	ds, err := ch.Consume(f.queue, "", false, false, false, false, nil)
	if err != nil {
		cn.Close()
		return nil, fmt.Errorf("fleet: consume %s: %w", f.queue, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		cn.Close()
		return nil, errors.New("fleet: result counting stopped")
	}
	f.conn = cn
	return ds, nil
}

// run passes every delivery to record, from ds and then from each
// consumer after a reconnect, until stop or ctx ends.
func (f *resultFeed) run(ctx context.Context, ds <-chan amqp091.Delivery, record func(amqp091.Delivery)) {
	for {
		for d := range ds {
			record(d)
			_ = d.Ack(false) // a lost ack brings d again, counted once
		}
		// The connection ended: consume again once the broker is back.
		for {
			f.mu.Lock()
			over := f.stopped
			f.mu.Unlock()
			if over || ctx.Err() != nil {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
			var err error
			if ds, err = f.open(); err == nil {
				break
			}
		}
	}
}

// drained returns once the queue is empty: past every result already
// routed, the consumer has them or is about to; a passive declare is a
// round trip behind them.
func (f *resultFeed) drained(ctx context.Context) error {
	for {
		f.mu.Lock()
		cn := f.conn
		f.mu.Unlock()
		if gch, err := cn.Channel(); err == nil {
			q, err := gch.QueueDeclarePassive(f.queue, true, false, false, false, nil)
			gch.Close()
			if err == nil && q.Messages == 0 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stop ends the feed: run returns.
func (f *resultFeed) stop() {
	f.mu.Lock()
	f.stopped = true
	cn := f.conn
	f.mu.Unlock()
	cn.Close()
}
