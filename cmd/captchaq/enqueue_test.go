package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/amqp"
	"github.com/captchaq/captchaq/internal/brokertest"
)

func TestEnqueueReportsInvalidLinesAndCollectDedupes(t *testing.T) {
	url := brokertest.Use(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "test-cli-" + hex.EncodeToString(b[:])
	cfg := amqp.Config{URL: url, Prefix: prefix}
	t.Cleanup(func() { _ = amqp.DeleteTopology(context.Background(), cfg) })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

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
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", code, errb.String())
	}
	for _, want := range []string{"stdin:2: not a task", "stdin:4: field \"id\" is missing", "enqueued 2 tasks", "2 invalid lines"} {
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
