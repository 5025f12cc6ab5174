package bench

import (
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/captchaq/captchaq/amqp"
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
