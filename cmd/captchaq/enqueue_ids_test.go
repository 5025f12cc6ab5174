package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// enqueue checks the ids of its own input as batch does: an id names one
// task of a file, so a later line with it is refused, with the same task
// or another, naming the id and the first line; the first is published.
// A line with no id is named by its number.
func TestEnqueueRefusesAnIDItsInputRepeats(t *testing.T) {
	t.Parallel()
	cfg, ctx := cliTopology(t)
	in := strings.Join([]string{
		`{"id":"a","method":"turnstile","params":{"sitekey":"0x4","pageurl":"https://x.example/"}}`,
		`{"id":"a","method":"turnstile","params":{"sitekey":"0x4","pageurl":"https://x.example/"},"priority":1}`,
		`{"id":"a","method":"turnstile","params":{"sitekey":"0x5","pageurl":"https://other.example/"}}`,
		`{"id":`,
		`{"id":"b","method":"turnstile","params":{"sitekey":"0x4","pageurl":"https://x.example/"}}`,
		`{"id":"b","method":"hcaptcha","params":{"sitekey":"0x4","pageurl":"https://x.example/"}}`,
	}, "\n")
	code, stderr := enqueueInput(ctx, cfg, in)
	want := []string{
		`stdin:2: id "a" is already on line 1: give this task an id of its own, or drop the line`,
		`stdin:3: id "a" is already on line 1: give this task an id of its own, or drop the line`,
		`stdin:4: task: invalid JSON at byte 6: unexpected end of JSON input`,
		`stdin:6: id "b" is already on line 5: give this task an id of its own, or drop the line`,
		`enqueued 2 tasks to ` + cfg.Prefix + `.tasks (4 invalid lines skipped)`,
		`captchaq enqueue: 4 invalid lines in stdin (see above)`,
	}
	if diff := cmp.Diff(want, strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")); code != exitUsage || diff != "" {
		t.Fatalf("exit %d, want %d; stderr (-want +got):\n%s", code, exitUsage, diff)
	}
	var got []string
	for _, m := range queuedTasks(t, ctx, cfg, 2) {
		if m.Task.Params["sitekey"] != "0x4" || m.Task.Method != "turnstile" || m.Task.Priority != 0 {
			t.Fatalf("task %s in the queue: %+v", m.Task.ID, m.Task)
		}
		got = append(got, m.Task.ID)
	}
	if strings.Join(got, ",") != "a,b" {
		t.Fatalf("queue holds %v, want a, b", got)
	}
}
