package main

import (
	"strings"
	"testing"
)

// enqueue checks the ids of its own input: an id repeated with the same
// task is published once; with another task it is refused before it is
// published, naming the id and the first line.
func TestEnqueueRefusesAnotherTaskUnderAnIDOfItsInput(t *testing.T) {
	t.Parallel()
	cfg, ctx := cliTopology(t)
	in := strings.Join([]string{
		`{"id":"a","method":"turnstile","params":{"sitekey":"0x4","pageurl":"https://x.example/"}}`,
		`{"id":"a","method":"turnstile","params":{"sitekey":"0x4","pageurl":"https://x.example/"},"priority":1}`,
		`{"id":"a","method":"turnstile","params":{"sitekey":"0x5","pageurl":"https://other.example/"}}`,
		`{"id":"b","method":"turnstile","params":{"sitekey":"0x4","pageurl":"https://x.example/"}}`,
	}, "\n")
	code, stderr := enqueueInput(ctx, cfg, in)
	if code != 2 {
		t.Fatalf("exit %d, want 2; stderr:\n%s", code, stderr)
	}
	for _, want := range []string{`stdin:3: captchaq: id "a" already names another task (line 1 has it with another method, params or proxy)`, "enqueued 2 tasks", "1 invalid lines"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	var got []string
	for _, m := range queuedTasks(t, ctx, cfg, 2) {
		if m.Task.Params["sitekey"] != "0x4" {
			t.Fatalf("task %s in the queue: %+v", m.Task.ID, m.Task)
		}
		got = append(got, m.Task.ID)
	}
	if strings.Join(got, ",") != "a,b" {
		t.Fatalf("queue holds %v, want a, b", got)
	}
}
