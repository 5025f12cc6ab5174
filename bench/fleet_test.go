package bench

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/amqp"
	"github.com/captchaq/captchaq/internal/brokertest"
	"github.com/captchaq/captchaq/internal/testbound"
)

// A result the broker delivers again, because the feed's ack died with
// the connection, is the same publish: counted once. Another publish of
// an answer given already is a copy; a different answer for a task is a
// second answer.
func TestResultCountsCountEachAnswerOnce(t *testing.T) {
	t.Parallel()
	c := newResultCounts()
	result := func(id, captchaID, token, publish string, again bool) amqp091.Delivery {
		body, err := json.Marshal(captchaq.Result{ID: id, Status: captchaq.StatusSolved, CaptchaID: captchaID, Token: token})
		if err != nil {
			t.Fatal(err)
		}
		return amqp091.Delivery{MessageId: id, Redelivered: again, Body: body, Headers: amqp091.Table{amqp.HeaderPublish: publish}}
	}
	c.record(result("a", "1", "ta", "p1", false))
	c.record(result("a", "1", "ta", "p1", true))   // the feed's ack was lost: the same publish
	c.record(result("b", "2", "tb", "p2", false))  //
	c.record(result("b", "3", "tb2", "p3", false)) // solved again and answered again: a second answer
	c.record(result("c", "4", "tc", "p4", true))   // first seen as a redelivery: counted
	c.record(result("c", "4", "tc", "p5", false))  // the same answer published again: a copy
	c.record(result("c", "4", "tc", "p4", false))  // the same publish, sent again by its publisher: a copy
	for id, want := range map[string]int{"a": 1, "b": 2, "c": 1, "d": 0} {
		if got := c.n(id); got != want {
			t.Errorf("%s has %d different answers, want %d", id, got, want)
		}
	}
	if got := c.copiesOf(); got != 2 {
		t.Errorf("%d copies, want 2", got)
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
	c := newResultCounts()
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
