package bench

import (
	"strconv"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/captchaq/captchaq/amqp"
	"github.com/captchaq/captchaq/internal/brokertest"
	"github.com/captchaq/captchaq/internal/testbound"
)

// A result the broker delivers again, because its ack died with the
// connection, is the same publish: counted once. A second publish of a
// task's result, delivered again or not, is a second result.
func TestResultCountsCountEachPublishOnce(t *testing.T) {
	t.Parallel()
	c := &resultCounts{counts: map[string]int{}, seen: map[string]bool{}, more: make(chan struct{})}
	result := func(id, token string, again bool) amqp091.Delivery {
		return amqp091.Delivery{MessageId: id, Redelivered: again, Headers: amqp091.Table{amqp.HeaderPublish: token}}
	}
	c.record(result("a", "t1", false))
	c.record(result("a", "t1", true)) // its ack was lost: the same publish
	c.record(result("b", "t2", false))
	c.record(result("b", "t3", false)) // answered twice
	c.record(result("c", "t4", true))  // first seen as a redelivery: counted
	c.record(result("c", "t5", true))  // another publish, redelivered: counted
	for id, want := range map[string]int{"a": 1, "b": 2, "c": 2, "d": 0} {
		if got := c.n(id); got != want {
			t.Errorf("%s counted %d times, want %d", id, got, want)
		}
	}
}

// A result that reached the feed but was not counted when its connection
// closed (a broker restart closes it; the client library drops what it
// had not handed over) is delivered again and counted: the feed acks a
// result only once counted. With the broker's automatic ack it was gone.
func TestResultFeedCountsWhatAClosedConnectionDropped(t *testing.T) {
	url := brokertest.Use(t)
	ctx := testbound.Context(t)
	queue := "bench-feed-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	cn, err := amqp091.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer cn.Close()
	ch, err := cn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(queue, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = ch.QueueDelete(queue, false, false, false) }()
	if err := ch.PublishWithContext(ctx, "", queue, false, false, amqp091.Publishing{MessageId: "t1", Headers: amqp091.Table{amqp.HeaderPublish: "p1"}}); err != nil {
		t.Fatal(err)
	}
	feed := &resultFeed{url: url, queue: queue}
	ds, err := feed.open()
	if err != nil {
		t.Fatal(err)
	}
	c := &resultCounts{counts: map[string]int{}, seen: map[string]bool{}, more: make(chan struct{})}
	dropped := false
	done := make(chan struct{})
	go func() {
		defer close(done)
		feed.run(ctx, ds, func(d amqp091.Delivery) {
			if !dropped {
				// Lost on the client's side as its connection closes.
				dropped = true
				feed.mu.Lock()
				feed.conn.Close()
				feed.mu.Unlock()
				return
			}
			c.record(d)
		})
	}()
	if _, err := c.waitAll(ctx, []string{"t1"}); err != nil {
		t.Fatal(err)
	}
	feed.stop()
	<-done
	if n := c.n("t1"); n != 1 {
		t.Fatalf("t1 counted %d times, want once", n)
	}
}
