package server_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/server"
	"github.com/captchaq/captchaq/sim"
)

// A client's replay through a gateway finds its dead letter in the
// gateway's store and publishes it again; the fleet's dead-letter queue,
// which holds 20,000 dead letters of other gateways and of the fleet, is
// not read: as the replay is answered all of them are ready (none held
// unacked), and read back afterwards each comes once, none redelivered
// (taken and put back).
func TestGatewayReplayTouchesNoForeignDeadLetter(t *testing.T) {
	t.Parallel()
	const foreign = 20000
	var refuse atomic.Bool
	refuse.Store(true)
	f := newFleetRig(t, sim.Config{Instant: true, Seed: 3, PollBan: sim.PollBan{Disabled: true},
		RefuseSubmit: func(map[string]string) string {
			if refuse.Load() {
				return "ERROR_BAD_PARAMETERS"
			}
			return ""
		}})
	f.worker("replay-w", 4)
	f.config = func(c *server.Config) { c.ReplayEvery = time.Hour }
	g := f.serve("replay", filepath.Join(t.TempDir(), "gw.db"), nil)
	id := g.inOK(t, keyQA, turnstile())
	if got := g.resFinal(t, keyQA, id); got != "ERROR_BAD_PARAMETERS" {
		t.Fatalf("the refused task: %q", got)
	}

	conn, err := amqp091.Dial(f.cfg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	failed := f.cfg.Prefix + ".failed"
	waitDepth := func(what string, n int) {
		t.Helper()
		var q amqp091.Queue
		if !testbound.Eventually(func() bool {
			var err error
			if q, err = ch.QueueDeclarePassive(failed, true, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
			return q.Messages == n
		}) {
			t.Fatalf("%s: %s holds %d messages, want %d", what, failed, q.Messages, n)
		}
	}
	waitDepth("the gateway's own dead letter", 1)
	// Other gateways' dead letters (their reply queues) and the fleet's
	// (no reply-to), as workers and the broker leave them: on one channel
	// in confirm mode, each batch confirmed while the next goes out.
	// Transient, which the replay cannot tell from persistent, and twice
	// as fast to publish: the broker does not write them to disk.
	ctx := context.Background()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	const batch = 2000
	var pending []*amqp091.DeferredConfirmation
	confirmed := func() {
		for _, dc := range pending {
			if ok, err := dc.WaitContext(ctx); !ok || err != nil {
				t.Fatalf("a foreign dead letter not confirmed: %v", err)
			}
		}
	}
	for from := 0; from < foreign; from += batch {
		next := make([]*amqp091.DeferredConfirmation, 0, batch)
		for i := from; i < from+batch; i++ {
			m := amqp091.Publishing{MessageId: fmt.Sprintf("other-gw/%d", i), Type: "task", DeliveryMode: amqp091.Transient,
				Headers: amqp091.Table{"x-captchaq-reason": "permanent"},
				Body:    []byte(`{"id":"x","method":"turnstile","params":{"sitekey":"0x4","pageurl":"https://a.example/"}}`)}
			if i%2 == 0 {
				m.ReplyTo = f.cfg.Prefix + ".replies.other-gw"
			} else {
				m.MessageId = fmt.Sprintf("fleet-task-%d", i)
			}
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", failed, false, false, m)
			if err != nil {
				t.Fatal(err)
			}
			next = append(next, dc)
		}
		confirmed()
		pending = next
	}
	confirmed()
	published := time.Since(start)
	waitDepth("the foreign dead letters", foreign+1)

	refuse.Store(false)
	var out struct {
		Replayed int      `json:"replayed"`
		IDs      []string `json:"ids"`
	}
	start = time.Now()
	g.api(t, "POST", "/v1/deadletters/replay", keyQA, `{"ids":["`+id+`"]}`, http.StatusOK, &out)
	replayed := time.Since(start)
	if out.Replayed != 1 || len(out.IDs) != 1 || out.IDs[0] != id {
		t.Fatalf("replay: %+v, want %s", out, id)
	}
	// At once, with nothing consuming the queue: every message is ready,
	// so none is held unacked by the replay.
	q, err := ch.QueueDeclarePassive(failed, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if q.Messages != foreign+1 || q.Consumers != 0 {
		t.Errorf("%s as the replay is answered: %d ready, %d consumers; want %d ready (the gateway's own dead letter too), none", failed, q.Messages, q.Consumers, foreign+1)
	}
	if got := g.resFinal(t, keyQA, id); !strings.HasPrefix(got, "OK|") {
		t.Fatalf("the replayed task: %q, want solved", got)
	}
	// Read back what the queue holds now, each once: every foreign one,
	// none ever taken and put back (redelivered).
	if q, err = ch.QueueDeclarePassive(failed, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(1000, 0, false); err != nil {
		t.Fatal(err)
	}
	deliveries, err := ch.Consume(failed, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	redelivered, seen := 0, map[string]bool{}
	for n := 0; n < q.Messages; n++ {
		select {
		case d := <-deliveries:
			if d.Redelivered {
				redelivered++
			}
			if seen[d.MessageId] {
				t.Errorf("dead letter %s twice", d.MessageId)
			}
			seen[d.MessageId] = true
			if err := d.Ack(false); err != nil {
				t.Fatal(err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%d of %d dead letters read, then none within a minute", n, q.Messages)
		}
	}
	others := 0
	for id := range seen {
		if strings.HasPrefix(id, "other-gw/") || strings.HasPrefix(id, "fleet-task-") {
			others++
		}
	}
	if others != foreign || redelivered != 0 {
		t.Errorf("%d foreign dead letters read back, %d of the %d messages redelivered (taken and put back); want %d, none", others, redelivered, len(seen), foreign)
	}
	t.Logf("%d foreign dead letters published and confirmed in %v; the replay answered in %v", foreign, published.Round(time.Millisecond), replayed.Round(time.Millisecond))
}
