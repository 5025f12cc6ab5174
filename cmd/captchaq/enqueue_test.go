package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/amqp"
	"github.com/captchaq/captchaq/internal/brokertest"
)

// cliTopology is a topology of its own on the test broker, deleted when
// the test ends, and a context for the test.
func cliTopology(t *testing.T) (amqp.Config, context.Context) {
	url := brokertest.Use(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	cfg := amqp.Config{URL: url, Prefix: "test-cli-" + hex.EncodeToString(b[:])}
	t.Cleanup(func() { _ = amqp.DeleteTopology(context.Background(), cfg) })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return cfg, ctx
}

// enqueueInput runs `captchaq enqueue` on cfg's topology with in as its
// standard input and returns the exit code and what it wrote to stderr.
func enqueueInput(ctx context.Context, cfg amqp.Config, in string) (int, string) {
	var out, errb bytes.Buffer
	env := &environment{stdin: strings.NewReader(in), stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
	code := run(ctx, env, []string{"enqueue", "--amqp", cfg.URL, "--prefix", cfg.Prefix, "-"})
	return code, errb.String()
}

// queuedTasks checks that cfg's task queue holds exactly n messages and
// takes them, in queue order.
func queuedTasks(t *testing.T, ctx context.Context, cfg amqp.Config, n int) []amqp.TaskMessage {
	t.Helper()
	c, err := amqp.Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	d, err := c.Depths(ctx, c.Names().Tasks)
	if err != nil {
		t.Fatal(err)
	}
	if d[0].Ready != n {
		t.Fatalf("the task queue holds %d messages, want %d", d[0].Ready, n)
	}
	k, err := c.Consume(ctx, []string{c.Names().Tasks}, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	got := make([]amqp.TaskMessage, 0, n)
	for len(got) < n {
		select {
		case d := <-k.Deliveries():
			m, err := d.Task()
			if err != nil || m.Task.ID != d.MessageID {
				t.Fatalf("message %s in the task queue: %+v, %v", d.MessageID, m, err)
			}
			if err := d.Ack(); err != nil {
				t.Fatal(err)
			}
			got = append(got, m)
		case <-ctx.Done():
			t.Fatalf("only %d of %d tasks taken from the queue", len(got), n)
		}
	}
	return got
}

func TestEnqueueReportsInvalidLinesAndCollectDedupes(t *testing.T) {
	t.Parallel()
	cfg, ctx := cliTopology(t)
	url, prefix := cfg.URL, cfg.Prefix

	in := strings.Join([]string{
		`{"id":"a","method":"turnstile","params":{"sitekey":"0x4","pageurl":"https://x.example/"}}`,
		`{"id":"b","method":"turnstile"`,
		``,
		`{"method":"turnstile"}`,
		`{"id":"c","method":"userrecaptcha","params":{"googlekey":"k","pageurl":"https://x.example/"},"priority":1}`,
	}, "\n")
	var out, errb bytes.Buffer
	env := &environment{stdin: strings.NewReader(in), stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
	code := run(ctx, env, []string{"enqueue", "--amqp", url, "--prefix", prefix, "-"})
	if code != 2 {
		t.Fatalf("exit %d, want 2; stderr:\n%s", code, errb.String())
	}
	for _, want := range []string{"stdin:2: task: invalid JSON", "stdin:4: captchaq: invalid task: id: required", "enqueued 2 tasks", "2 invalid lines"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errb.String())
		}
	}

	// Results, one published twice, then collect.
	c, err := amqp.Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := c.NewPublisher()
	for _, id := range []string{"c", "c", "a"} {
		if err := p.PublishResult(ctx, captchaq.Result{ID: id, Status: captchaq.StatusSolved, Token: "T-" + id}); err != nil {
			t.Fatal(err)
		}
	}
	p.Close()
	out.Reset()
	errb.Reset()
	code = run(ctx, env, []string{"collect", "--amqp", url, "--prefix", prefix, "--count", "2", "--timeout", "30s"})
	if code != 0 {
		t.Fatalf("collect exit %d: %s", code, errb.String())
	}
	got := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(got) != 2 || !strings.Contains(got[0], `"id":"c"`) || !strings.Contains(got[1], `"id":"a"`) {
		t.Fatalf("collect wrote:\n%s", out.String())
	}
}

// TestEnqueueKeepsFileOrder: many tasks wait for their confirms at once,
// and still reach the queue in the order of their lines.
func TestEnqueueKeepsFileOrder(t *testing.T) {
	t.Parallel()
	cfg, ctx := cliTopology(t)

	const n = 3 * enqueueWindow
	var in strings.Builder
	for i := range n {
		fmt.Fprintf(&in, `{"id":"o-%04d","method":"turnstile","params":{"sitekey":"0x4","pageurl":"https://x.example/"}}`+"\n", i)
	}
	code, stderr := enqueueInput(ctx, cfg, in.String())
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	if want := fmt.Sprintf("enqueued %d tasks", n); !strings.Contains(stderr, want) {
		t.Fatalf("stderr lacks %q:\n%s", want, stderr)
	}
	for i, m := range queuedTasks(t, ctx, cfg, n) {
		if want := fmt.Sprintf("o-%04d", i); m.Task.ID != want {
			t.Fatalf("task %d in the queue is %s, want %s", i, m.Task.ID, want)
		}
	}
}
