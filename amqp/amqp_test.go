package amqp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/brokertest"
)

// testConfig returns a config with a prefix of its own, after checking the
// broker answers (see brokertest), and holds the broker test lock shared
// until t ends.
func testConfig(t *testing.T) Config { return configFor(brokertest.Use(t)) }

// disruptiveConfig is testConfig for a test that restarts the broker or
// closes connections: it holds the lock exclusively.
func disruptiveConfig(t *testing.T) Config { return configFor(brokertest.Disrupt(t)) }

func configFor(url string) Config {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return Config{URL: url, Prefix: "test-" + hex.EncodeToString(b[:]), ReconnectMin: 50 * time.Millisecond, ReconnectMax: time.Second}
}

func setup(t *testing.T, cfg Config) *Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Dial(ctx, cfg)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() {
		c.Close()
		if err := DeleteTopology(context.Background(), cfg); err != nil {
			t.Errorf("DeleteTopology: %v", err)
		}
	})
	return c
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func task(id string, prio int) captchaq.Task {
	return captchaq.Task{ID: id, Method: "turnstile", Params: map[string]string{"sitekey": "0x4AAA", "pageurl": "https://shop.example/"}, Priority: prio}
}

func next(t *testing.T, ctx context.Context, k *Consumer) *Delivery {
	t.Helper()
	select {
	case d, ok := <-k.Deliveries():
		if !ok {
			t.Fatal("deliveries closed")
		}
		return d
	case <-ctx.Done():
		t.Fatal("no delivery before the test deadline")
	}
	return nil
}

// nextAcked takes n deliveries from k, acking each as it comes.
func nextAcked(t *testing.T, ctx context.Context, k *Consumer, n int) []*Delivery {
	t.Helper()
	ds := make([]*Delivery, n)
	for i := range ds {
		ds[i] = next(t, ctx, k)
		if err := ds[i].Ack(); err != nil {
			t.Fatal(err)
		}
	}
	return ds
}

func depth(t *testing.T, ctx context.Context, c *Conn, q string) int {
	t.Helper()
	ch, _, err := c.channel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	s, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
	if err != nil {
		t.Fatalf("inspect %s: %v", q, err)
	}
	return s.Messages
}

func TestPublishConsumeRoundTrip(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	c := setup(t, cfg)
	ctx := testCtx(t)
	p := c.NewPublisher()
	defer p.Close()
	in := TaskMessage{Task: task("rt-1", 2), Attempts: 1, LastErrorCode: "ERROR_NO_SLOT_AVAILABLE"}
	if err := p.PublishTask(ctx, in); err != nil {
		t.Fatal(err)
	}
	k, err := c.Consume(ctx, []string{c.Names().Tasks}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	d := next(t, ctx, k)
	got, err := d.Task()
	if err != nil {
		t.Fatal(err)
	}
	if got.Task.ID != "rt-1" || got.Task.Params["sitekey"] != "0x4AAA" || got.Attempts != 1 || got.LastErrorCode != "ERROR_NO_SLOT_AVAILABLE" {
		t.Fatalf("got %+v", got)
	}
	if d.MessageID != "rt-1" || d.Priority != 8 || d.RoutingKey != "turnstile" {
		t.Fatalf("message id %q priority %d key %q, want rt-1 8 turnstile", d.MessageID, d.Priority, d.RoutingKey)
	}
	if err := d.Ack(); err != nil {
		t.Fatal(err)
	}
	if err := d.Ack(); !errors.Is(err, ErrSettled) {
		t.Fatalf("second Ack: %v, want ErrSettled", err)
	}
}

func TestUnroutableIsAnError(t *testing.T) {
	t.Parallel()
	c := setup(t, testConfig(t))
	ctx := testCtx(t)
	p := c.NewPublisher()
	defer p.Close()
	err := p.Publish(ctx, "", c.Names().Tasks+".nosuchqueue", amqp091.Publishing{MessageId: "x", Body: []byte("{}")})
	if !errors.Is(err, ErrUnroutable) {
		t.Fatalf("err = %v, want ErrUnroutable", err)
	}
	// The channel still works for the next message.
	if err := p.PublishResult(ctx, captchaq.Result{ID: "ok", Status: captchaq.StatusSolved}); err != nil {
		t.Fatal(err)
	}
	if n := depth(t, ctx, c, c.Names().Results); n != 1 {
		t.Fatalf("results depth %d, want 1", n)
	}
}

// TestPublishRefusesBadHeaders: a header value AMQP cannot carry is an
// error at once, not a publish tried again and again.
func TestPublishRefusesBadHeaders(t *testing.T) {
	t.Parallel()
	c := setup(t, testConfig(t))
	ctx, cancel := context.WithTimeout(testCtx(t), 5*time.Second)
	defer cancel()
	p := c.NewPublisher()
	defer p.Close()
	err := p.Publish(ctx, "", c.Names().Results, amqp091.Publishing{MessageId: "x", Headers: amqp091.Table{"bad": struct{}{}}, Body: []byte("{}")})
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "headers") {
		t.Fatalf("err = %v (deadline: %v), want a headers error at once", err, ctx.Err())
	}
	if n := depth(t, ctx, c, c.Names().Results); n != 0 {
		t.Fatalf("results depth %d, want 0", n)
	}
}

func TestPriorityOrder(t *testing.T) {
	t.Parallel()
	c := setup(t, testConfig(t))
	ctx := testCtx(t)
	p := c.NewPublisher()
	defer p.Close()
	// Published least urgent first while nobody consumes.
	for _, tc := range []struct {
		id   string
		prio int
	}{{"p9", 9}, {"p7", 7}, {"default", 0}, {"p3", 3}, {"p1", 1}, {"p9b", 9}} {
		if err := p.PublishTask(ctx, TaskMessage{Task: task(tc.id, tc.prio)}); err != nil {
			t.Fatal(err)
		}
	}
	k, err := c.Consume(ctx, []string{c.Names().Tasks}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	var got []string
	for _, d := range nextAcked(t, ctx, k, 6) {
		got = append(got, d.MessageID)
	}
	want := "p1 p3 default p7 p9 p9b"
	if strings.Join(got, " ") != want {
		t.Fatalf("order %v, want %s", got, want)
	}
}

func TestLaneRouting(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Lanes = []string{"image"}
	c := setup(t, cfg)
	ctx := testCtx(t)
	p := c.NewPublisher()
	defer p.Close()
	img := captchaq.Task{ID: "img", Method: "base64", Params: map[string]string{"body": "aGk="}}
	if err := p.PublishTask(ctx, TaskMessage{Task: img}); err != nil {
		t.Fatal(err)
	}
	if err := p.PublishTask(ctx, TaskMessage{Task: task("ts", 0)}); err != nil {
		t.Fatal(err)
	}
	if a, b := depth(t, ctx, c, c.Names().Lane("image")), depth(t, ctx, c, c.Names().Tasks); a != 1 || b != 1 {
		t.Fatalf("image lane %d, default %d; want 1 and 1", a, b)
	}
}

// A task goes to the lane of the kind its validation decided, however the
// client spelt it (version=3, recaptcha=true).
func TestLaneRoutingFollowsValidation(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Lanes = []string{"recaptcha_v3", "grid"}
	c := setup(t, cfg)
	ctx := testCtx(t)
	p := c.NewPublisher()
	defer p.Close()
	v3 := func(id, version string) captchaq.Task {
		return captchaq.Task{ID: id, Method: "userrecaptcha", Params: map[string]string{"googlekey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-", "pageurl": "https://a.example/", "version": version}}
	}
	grid := func(id, flag string) captchaq.Task {
		return captchaq.Task{ID: id, Method: "base64", Params: map[string]string{"body": "aGk=", "textinstructions": "buses", "recaptcha": flag}}
	}
	for _, tk := range []captchaq.Task{v3("a", "v3"), v3("b", "3"), grid("c", "1"), grid("d", "true"), v3("e", "2")} {
		if err := tk.Validate(); err != nil {
			t.Fatalf("%s: %v", tk.ID, err)
		}
		if err := p.PublishTask(ctx, TaskMessage{Task: tk}); err != nil {
			t.Fatal(err)
		}
	}
	n := c.Names()
	if a, b, d := depth(t, ctx, c, n.Lane("recaptcha_v3")), depth(t, ctx, c, n.Lane("grid")), depth(t, ctx, c, n.Tasks); a != 2 || b != 2 || d != 1 {
		t.Fatalf("recaptcha_v3 lane %d, grid lane %d, default %d; want 2, 2 and 1", a, b, d)
	}
}

func TestExpiredTaskIsDeadLettered(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.TaskTTL = 100 * time.Millisecond
	c := setup(t, cfg)
	ctx := testCtx(t)
	p := c.NewPublisher()
	defer p.Close()
	if err := p.PublishTask(ctx, TaskMessage{Task: task("late", 0)}); err != nil {
		t.Fatal(err)
	}
	// Wait for the broker to move it: the failed queue's consumer is the
	// signal.
	k, err := c.Consume(ctx, []string{c.Names().Failed}, 1)
	if err != nil {
		t.Fatal(err)
	}
	d := next(t, ctx, k)
	death, ok := LastDeath(d.Headers)
	if !ok || death.Reason != "expired" || death.Queue != c.Names().Tasks {
		t.Fatalf("x-death %+v (%v), want expired from %s", death, ok, c.Names().Tasks)
	}
	k.Close() // unacked: back in the queue
	var got []DeadLetter
	if err := c.DeadLetters(ctx, func(dl DeadLetter) error { got = append(got, dl); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Task.Task.ID != "late" || got[0].Reason != "expired" || got[0].ErrorCode != "EXPIRED" {
		t.Fatalf("dead letters %+v", got)
	}
}

func TestDeadLetterListAndReplay(t *testing.T) {
	t.Parallel()
	c := setup(t, testConfig(t))
	ctx := testCtx(t)
	p := c.NewPublisher()
	defer p.Close()
	if err := p.DeadLetter(ctx, TaskMessage{Task: task("bad-url", 0), Attempts: 1, LastError: "pageurl rejected", LastErrorCode: "ERROR_PAGEURL"}, ReasonPermanent); err != nil {
		t.Fatal(err)
	}
	if err := p.DeadLetter(ctx, TaskMessage{Task: task("hard", 0), Attempts: 3, LastErrorCode: "ERROR_CAPTCHA_UNSOLVABLE"}, ReasonExhausted); err != nil {
		t.Fatal(err)
	}
	list := func() []string {
		var out []string
		err := c.DeadLetters(ctx, func(dl DeadLetter) error {
			out = append(out, strings.Join([]string{dl.Task.Task.ID, dl.Reason, dl.ErrorCode, string(rune('0' + dl.Task.Attempts))}, "/"))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got := strings.Join(list(), " "); got != "bad-url/permanent/ERROR_PAGEURL/1 hard/exhausted/ERROR_CAPTCHA_UNSOLVABLE/3" {
		t.Fatalf("list: %s", got)
	}
	n, err := c.Replay(ctx, captchaq.DeadLetterFilter{ErrorCode: "ERROR_CAPTCHA_UNSOLVABLE"})
	if err != nil || n != 1 {
		t.Fatalf("Replay = %d, %v; want 1", n, err)
	}
	if got := strings.Join(list(), " "); got != "bad-url/permanent/ERROR_PAGEURL/1" {
		t.Fatalf("after replay: %s", got)
	}
	k, err := c.Consume(ctx, []string{c.Names().Tasks}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	d := next(t, ctx, k)
	m, err := d.Task()
	if err != nil || m.ReplayOf != "hard" || !strings.HasPrefix(m.Task.ID, "hard@") || m.Attempts != 0 || m.LastErrorCode != "" {
		t.Fatalf("replayed %+v, %v", m, err)
	}
}

func TestRetryGoesThroughDelayNotDLX(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.RetryDelays = []time.Duration{100 * time.Millisecond}
	c := setup(t, cfg)
	ctx := testCtx(t)
	p := c.NewPublisher()
	defer p.Close()
	delay, err := p.Retry(ctx, TaskMessage{Task: task("blip", 0), Attempts: 2, CaptchaID: "123", LastErrorCode: "NETWORK"})
	if err != nil || delay != 100*time.Millisecond {
		t.Fatalf("Retry = %v, %v", delay, err)
	}
	k, err := c.Consume(ctx, []string{c.Names().Tasks}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	d := next(t, ctx, k)
	m, _ := d.Task()
	if m.Task.ID != "blip" || m.Attempts != 2 || m.CaptchaID != "" || m.LastErrorCode != "NETWORK" {
		t.Fatalf("back from delay: %+v", m)
	}
	if n := depth(t, ctx, c, c.Names().Failed); n != 0 {
		t.Fatalf("failed depth %d, want 0", n)
	}
}

func TestRedeclareConflict(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	ctx := testCtx(t)
	// A task queue from an older setup: no priority, no TTL.
	raw, err := amqp091.Dial(cfg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	ch, err := raw.Channel()
	if err != nil {
		t.Fatal(err)
	}
	n := NamesFor(cfg.Prefix)
	if _, err := ch.QueueDeclare(n.Tasks, true, false, false, false, amqp091.Table{
		"x-message-ttl": int32(300000), "x-dead-letter-exchange": n.DLX, "x-dead-letter-routing-key": FailedRoutingKey,
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = DeleteTopology(context.Background(), cfg) })
	_, err = Dial(ctx, cfg)
	var ce *ConflictError
	if !errors.Is(err, ErrTopologyConflict) || !errors.As(err, &ce) {
		t.Fatalf("Dial err = %v, want a ConflictError", err)
	}
	if ce.Kind != "queue" || ce.Name != cfg.Prefix+".tasks" || ce.Arg != "x-max-priority" || ce.Want != "10" || ce.Have != "none" {
		t.Fatalf("conflict %+v", ce)
	}
	msg := err.Error()
	for _, want := range []string{`queue "` + cfg.Prefix + `.tasks"`, "x-max-priority", "rabbitmqctl delete_queue " + cfg.Prefix + ".tasks", "another --prefix"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
}

// closeConnections closes, from the broker side, every connection whose
// client name is "captchaq PREFIX", and returns how many it closed. One
// rabbitmqctl call finds and closes them: each call starts a VM, seconds
// on a loaded machine, and a list_connections and a close_connection per
// connection took a test's deadline. A connection still opening (or
// closing) has no client properties yet ('none'): it is passed over.
func closeConnections(t *testing.T, prefix string) int {
	t.Helper()
	for _, r := range prefix {
		if !strings.ContainsRune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.", r) {
			t.Fatalf("prefix %q: only letters, digits and -_. go into the rabbitmqctl expression", prefix)
		}
	}
	expr := `Name = <<"captchaq ` + prefix + `">>,
Ps = [proplists:get_value(pid, I) || I <- rabbit_networking:connection_info_all([pid, client_properties]),
	CP <- [proplists:get_value(client_properties, I, [])], is_list(CP),
	lists:member({<<"connection_name">>, longstr, Name}, CP)],
[rabbit_networking:close_connection(P, "test: forced close") || P <- Ps],
length(Ps).`
	out, err := exec.Command("rabbitmqctl", "-q", "eval", expr).CombinedOutput()
	if err != nil {
		t.Fatalf("rabbitmqctl eval (close the connections of %s): %v\n%s", prefix, err, out)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("rabbitmqctl eval (close the connections of %s): %q is not a count", prefix, out)
	}
	return n
}

func TestReconnectAndStaleAck(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("rabbitmqctl"); err != nil {
		t.Fatal("rabbitmqctl is needed to close a connection from the broker side")
	}
	cfg := testConfig(t)
	c := setup(t, cfg)
	ctx := testCtx(t)
	p := c.NewPublisher()
	defer p.Close()
	if err := p.PublishTask(ctx, TaskMessage{Task: task("survivor", 0)}); err != nil {
		t.Fatal(err)
	}
	k, err := c.Consume(ctx, []string{c.Names().Tasks}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	first := next(t, ctx, k)
	if first.MessageID != "survivor" || first.Redelivered {
		t.Fatalf("first delivery %q redelivered=%v", first.MessageID, first.Redelivered)
	}

	if n := closeConnections(t, cfg.Prefix); n != 1 {
		t.Fatalf("closed %d connections named %q, want 1", n, "captchaq "+cfg.Prefix)
	}

	// The same message comes again, on a new channel generation.
	again := next(t, ctx, k)
	if again.MessageID != "survivor" || !again.Redelivered || again.Generation == first.Generation {
		t.Fatalf("after reconnect: %q redelivered=%v gen %d (first %d)", again.MessageID, again.Redelivered, again.Generation, first.Generation)
	}
	// The old delivery's ack is dropped, not sent on the new channel
	// (where its tag would name the new delivery).
	if err := first.Ack(); !errors.Is(err, ErrStaleDelivery) {
		t.Fatalf("stale Ack: %v, want ErrStaleDelivery", err)
	}
	if c.Reconnects() != 1 {
		t.Fatalf("reconnects %d, want 1", c.Reconnects())
	}
	// Publishing works again on the new connection.
	if err := p.PublishTask(ctx, TaskMessage{Task: task("after", 0)}); err != nil {
		t.Fatal(err)
	}
	if err := again.Ack(); err != nil {
		t.Fatal(err)
	}
	d := next(t, ctx, k)
	if d.MessageID != "after" || d.Redelivered {
		t.Fatalf("third delivery %q redelivered=%v, want after (so survivor was acked once, not redelivered)", d.MessageID, d.Redelivered)
	}
	if err := d.Ack(); err != nil {
		t.Fatal(err)
	}
	k.Close()
	if n := depth(t, ctx, c, c.Names().Tasks); n != 0 {
		t.Fatalf("tasks depth %d after acks, want 0", n)
	}
}

func TestCollectDedupes(t *testing.T) {
	t.Parallel()
	c := setup(t, testConfig(t))
	ctx := testCtx(t)
	p := c.NewPublisher()
	defer p.Close()
	for _, r := range []captchaq.Result{
		{ID: "a", Status: captchaq.StatusSolved, Token: "T-a"},
		{ID: "a", Status: captchaq.StatusSolved, Token: "T-a"},
		{ID: "b", Status: captchaq.StatusFailed, ErrorCode: "ERROR_PAGEURL"},
	} {
		if err := p.PublishResult(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	n, err := c.Collect(ctx, 2, func(r captchaq.Result) error {
		got = append(got, r.ID+":"+r.Token+r.ErrorCode)
		return nil
	})
	if err != nil || n != 2 {
		t.Fatalf("Collect = %d, %v", n, err)
	}
	if strings.Join(got, " ") != "a:T-a b:ERROR_PAGEURL" {
		t.Fatalf("collected %v", got)
	}
	if d := depth(t, ctx, c, c.Names().Results); d != 0 {
		t.Fatalf("results depth %d, want 0 (the duplicate is consumed)", d)
	}
}

func TestStatsCountsAndBeats(t *testing.T) {
	// Not parallel: it sets the statsListening hook.
	c := setup(t, testConfig(t))
	ctx := testCtx(t)
	p := c.NewPublisher()
	defer p.Close()
	for _, id := range []string{"w1", "w2", "w3"} {
		if err := p.PublishTask(ctx, TaskMessage{Task: task(id, 0)}); err != nil {
			t.Fatal(err)
		}
	}
	// A holder beats while Stats listens; the dead letter lands during
	// the window.
	oldest := time.Now().Add(-90 * time.Second)
	listening := make(chan struct{})
	statsListening = func() { close(listening) }
	t.Cleanup(func() { statsListening = nil })
	go func() {
		<-listening
		_ = p.Beat(ctx, StatusBeat{Owner: "w-a", Held: 2, OldestHeld: oldest, At: time.Now()})
		_ = p.DeadLetter(ctx, TaskMessage{Task: task("dead", 0)}, ReasonPermanent)
	}()
	st, err := c.Stats(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if st.Waiting != 3 || st.Holders != 1 || st.Held != 2 {
		t.Fatalf("stats %+v", st)
	}
	if st.OldestUnacked < 90*time.Second || st.OldestUnacked > 10*time.Minute {
		t.Fatalf("oldest unacked %v, want about 90s", st.OldestUnacked)
	}
	if st.FailedPerMinute <= 0 {
		t.Fatalf("failed per minute %v, want > 0", st.FailedPerMinute)
	}
}

// TestAcksOutOfOrderSkipHeldDelivery: acks settled out of order, gathered
// into multiple acks, never cover a delivery still held: once the
// consumer closes, only the held one goes back to the queue.
func TestAcksOutOfOrderSkipHeldDelivery(t *testing.T) {
	t.Parallel()
	c := setup(t, testConfig(t))
	ctx := testCtx(t)
	p := c.NewPublisher()
	defer p.Close()
	const n = 10
	for i := range n {
		if err := p.PublishTask(ctx, TaskMessage{Task: task(fmt.Sprintf("ack-%02d", i), 0)}); err != nil {
			t.Fatal(err)
		}
	}
	k, err := c.Consume(ctx, []string{c.Names().Tasks}, n)
	if err != nil {
		t.Fatal(err)
	}
	ds := make([]*Delivery, n)
	for i := range n {
		ds[i] = next(t, ctx, k)
		if want := fmt.Sprintf("ack-%02d", i); ds[i].MessageID != want {
			t.Fatalf("delivery %d is %s, want %s", i, ds[i].MessageID, want)
		}
	}
	// 4 stays held; 7 is rejected to the dead letters on its own.
	for _, i := range []int{2, 0, 9, 1, 3, 8, 5, 6} {
		if err := ds[i].Ack(); err != nil {
			t.Fatalf("ack %d: %v", i, err)
		}
	}
	if err := ds[7].Nack(false); err != nil {
		t.Fatal(err)
	}
	k.Close()
	if err := ds[4].Ack(); !errors.Is(err, ErrStaleDelivery) {
		t.Fatalf("ack after close: %v, want ErrStaleDelivery", err)
	}
	if d := depth(t, ctx, c, c.Names().Tasks); d != 1 {
		t.Fatalf("task queue depth %d after close, want 1 (the held delivery)", d)
	}
	if d := depth(t, ctx, c, c.Names().Failed); d != 1 {
		t.Fatalf("dead letters %d, want 1 (the rejected delivery)", d)
	}
	k2, err := c.Consume(ctx, []string{c.Names().Tasks}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer k2.Close()
	d := next(t, ctx, k2)
	if d.MessageID != "ack-04" || !d.Redelivered {
		t.Fatalf("back in the queue: %s (redelivered %v), want ack-04 redelivered", d.MessageID, d.Redelivered)
	}
}

// TestPublishSurvivesDroppedConnection: publishes under way when the
// connection drops (the network cuts it, a proxy here) are published again
// once it is back; none fails with the error of a write the drop broke.
// The proxy cuts at once: dropping it with rabbitmqctl took seconds a
// call on a loaded machine, past the test's deadline.
func TestPublishSurvivesDroppedConnection(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	setup(t, cfg) // the topology, deleted when the test ends
	proxy := newCutProxy(t, cfg.URL)
	cfgP := cfg
	cfgP.URL = proxy.url
	ctx := testCtx(t)
	c, err := Dial(ctx, cfgP)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := c.NewPublisher()
	defer p.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed []error
	published := 0
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				err := p.PublishResult(ctx, captchaq.Result{ID: fmt.Sprintf("drop-%02d-%05d", g, i), Status: captchaq.StatusSolved})
				mu.Lock()
				if err != nil {
					failed = append(failed, err)
				} else {
					published++
				}
				mu.Unlock()
				// Paced across the cuts: 32 publishes stay in flight
				// across each drop, and the results queue holds
				// thousands, not the hundreds of thousands that unpaced
				// publishing piled up when the drops took seconds each,
				// until the broker's memory alarm blocked every publisher.
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	const drops = 5
	for range drops {
		time.Sleep(200 * time.Millisecond) // the fault's beat: the link is up 200 ms between cuts
		proxy.cut()
	}
	time.Sleep(200 * time.Millisecond) // publishing goes on 200 ms past the last cut
	close(stop)
	wg.Wait()
	for _, err := range failed {
		t.Log(err)
	}
	if len(failed) > 0 || c.Reconnects() == 0 {
		t.Fatalf("%d publishes failed and %d succeeded across %d reconnects, want none failed", len(failed), published, c.Reconnects())
	}
	t.Logf("%d publishes across %d reconnects", published, c.Reconnects())
}

// TestCheckpointQueueOfAnEarlierVersion: a checkpoint queue an earlier
// version declared (dead-lettering at-most-once, the broker's default)
// serves a worker started again under its owner within its idle hour,
// instead of refusing it with a conflict.
func TestCheckpointQueueOfAnEarlierVersion(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	c := setup(t, cfg)
	ctx := testCtx(t)
	const owner = "earlier"
	t.Cleanup(func() { _ = DeleteTopology(context.Background(), cfg, owner) })
	ch, _, err := c.channel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	n := c.Names()
	old := inflightQueueArgs(n)
	delete(old, "x-dead-letter-strategy")
	delete(old, "x-overflow")
	if _, err := ch.QueueDeclare(n.InflightQueue(owner), true, false, false, false, old); err != nil {
		t.Fatal(err)
	}
	if err := c.DeclareInflight(ctx, owner); err != nil {
		t.Fatalf("DeclareInflight on an earlier version's checkpoint queue: %v", err)
	}
	if got := depth(t, ctx, c, n.InflightQueue(owner)); got != 0 {
		t.Fatalf("checkpoint queue holds %d, want 0", got)
	}
}
