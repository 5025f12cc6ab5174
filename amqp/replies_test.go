package amqp

import (
	"context"
	"errors"
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// TestReplyQueueExpires: a gateway's reply queue carries x-expires, so a
// retired gateway name leaves nothing behind; one declared before that is
// refused with the queue, the argument and the fix.
func TestReplyQueueExpires(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	ctx := testCtx(t)
	c := setup(t, cfg)
	n := NamesFor(cfg.Prefix)
	t.Cleanup(func() { _ = DeleteReplies(context.Background(), cfg, "fresh", "old") })

	if err := c.DeclareReplies(ctx, "fresh"); err != nil {
		t.Fatal(err)
	}
	raw, err := amqp091.Dial(cfg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	redeclare := func(q string, args amqp091.Table) error {
		ch, err := raw.Channel()
		if err != nil {
			t.Fatal(err)
		}
		defer ch.Close()
		_, err = ch.QueueDeclare(q, true, false, false, false, args)
		return err
	}
	// The broker holds the same arguments: the same declaration passes,
	// one without the expiry is refused.
	if err := redeclare(n.ReplyQueue("fresh"), amqp091.Table{"x-queue-type": "classic", "x-expires": int32(ReplyQueueIdle.Milliseconds())}); err != nil {
		t.Fatalf("redeclare with x-expires %v: %v", ReplyQueueIdle, err)
	}
	var ae *amqp091.Error
	if err := redeclare(n.ReplyQueue("fresh"), amqp091.Table{"x-queue-type": "classic"}); !errors.As(err, &ae) || ae.Code != amqp091.PreconditionFailed {
		t.Fatalf("redeclare without x-expires = %v; want PRECONDITION_FAILED", err)
	}

	// A reply queue from before the expiry.
	if err := redeclare(n.ReplyQueue("old"), amqp091.Table{"x-queue-type": "classic"}); err != nil {
		t.Fatal(err)
	}
	err = c.DeclareReplies(ctx, "old")
	if !errors.Is(err, ErrTopologyConflict) {
		t.Fatalf("DeclareReplies on an old reply queue = %v; want a topology conflict", err)
	}
	for _, want := range []string{n.ReplyQueue("old"), "x-expires", "rabbitmqctl delete_queue " + n.ReplyQueue("old"), "--gateway NAME"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err, want)
		}
	}
}
