package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq/amqp"
)

// enqueue checks the ids of its own input: an id repeated with the same
// task is published once; with another task it is refused before it is
// published, naming the id and the first line.
func TestEnqueueRefusesAnotherTaskUnderAnIDOfItsInput(t *testing.T) {
	cfg, ctx := cliTopology(t)
	in := strings.Join([]string{
		`{"id":"a","method":"turnstile","params":{"sitekey":"0x4","pageurl":"https://x.example/"}}`,
		`{"id":"a","method":"turnstile","params":{"sitekey":"0x4","pageurl":"https://x.example/"},"priority":1}`,
		`{"id":"a","method":"turnstile","params":{"sitekey":"0x5","pageurl":"https://other.example/"}}`,
		`{"id":"b","method":"turnstile","params":{"sitekey":"0x4","pageurl":"https://x.example/"}}`,
	}, "\n")
	var out, errb bytes.Buffer
	env := &environment{stdin: strings.NewReader(in), stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
	if code := run(ctx, env, []string{"enqueue", "--amqp", cfg.URL, "--prefix", cfg.Prefix, "-"}); code != 2 {
		t.Fatalf("exit %d, want 2; stderr:\n%s", code, errb.String())
	}
	for _, want := range []string{`stdin:3: captchaq: id "a" already names another task (line 1 has it with another method, params or proxy)`, "enqueued 2 tasks", "1 invalid lines"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errb.String())
		}
	}
	c, err := amqp.Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	k, err := c.Consume(ctx, []string{c.Names().Tasks}, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	var got []string
	for len(got) < 2 {
		select {
		case d := <-k.Deliveries():
			got = append(got, d.MessageID)
			m, err := d.Task()
			if err != nil || m.Task.Params["sitekey"] != "0x4" {
				t.Fatalf("task %s in the queue: %+v, %v", d.MessageID, m.Task, err)
			}
			d.Ack()
		case <-ctx.Done():
			t.Fatalf("only %v in the queue", got)
		}
	}
	if strings.Join(got, ",") != "a,b" {
		t.Fatalf("queue holds %v, want a, b", got)
	}
	select {
	case d := <-k.Deliveries():
		t.Fatalf("a third task in the queue: %s", d.MessageID)
	case <-time.After(200 * time.Millisecond):
	}
}
