package main

import (
	"strings"
	"testing"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/amqp"
)

// TestDLQReplayReasonOnTheFleet: `dlq replay --reason` is the flag of both
// back ends, and on the fleet it selects by the fleet's own reasons as well
// as by error code.
func TestDLQReplayReasonOnTheFleet(t *testing.T) {
	cfg, ctx := cliTopology(t)
	c, err := amqp.Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := c.NewPublisher()
	task := func(id string) captchaq.Task {
		return captchaq.Task{ID: id, Method: "turnstile", Params: map[string]string{"sitekey": "0x4", "pageurl": "https://x.example/" + id}}
	}
	for _, dl := range []struct {
		id, code, reason string
	}{
		{"bad-url", "ERROR_PAGEURL", amqp.ReasonPermanent},
		{"hard", "ERROR_CAPTCHA_UNSOLVABLE", amqp.ReasonExhausted},
		{"hard-2", "ERROR_CAPTCHA_UNSOLVABLE", amqp.ReasonExhausted},
	} {
		if err := p.DeadLetter(ctx, amqp.TaskMessage{Task: task(dl.id), Attempts: 1, LastErrorCode: dl.code}, dl.reason); err != nil {
			t.Fatal(err)
		}
	}
	p.Close()
	fleet := []string{"--amqp", cfg.URL, "--prefix", cfg.Prefix}

	r := runWith(t, "", nil, append([]string{"dlq", "replay", "--reason", "exhausted"}, fleet...)...)
	if r.code != 0 || r.stdout != "replayed 2 dead letters\n" {
		t.Fatalf("dlq replay --reason exhausted = %+v", r)
	}
	r = runWith(t, "", nil, append([]string{"dlq", "replay", "--reason", "ERROR_PAGEURL"}, fleet...)...)
	if r.code != 0 || r.stdout != "replayed 1 dead letters\n" {
		t.Fatalf("dlq replay --reason ERROR_PAGEURL = %+v", r)
	}
	r = runWith(t, "", nil, append([]string{"dlq", "list"}, fleet...)...)
	if r.code != 0 || r.stdout != "" || !strings.Contains(r.stderr, "0 dead letters") {
		t.Fatalf("dlq list after both replays = %+v", r)
	}
	// The old name is gone on every back end.
	r = runWith(t, "", nil, append([]string{"dlq", "replay", "--code", "EXPIRED"}, fleet...)...)
	if r.code != exitUsage || !strings.Contains(r.stderr, "flag provided but not defined: -code") {
		t.Fatalf("dlq replay --code = %+v; want exit 2", r)
	}
}

// TestDLQHelp: `dlq --help` lists the flags of both back ends and exits 0.
func TestDLQHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"dlq", "--help"}, {"dlq", "-h"}} {
		r := runWith(t, "", nil, args...)
		if r.code != 0 {
			t.Errorf("%v: exit %d", args, r.code)
		}
		for _, flag := range []string{"-store", "-amqp", "-prefix", "-id", "-reason", "-all", "permanent, exhausted"} {
			if !strings.Contains(r.stderr, flag) {
				t.Errorf("%v does not list %s:\n%s", args, flag, r.stderr)
			}
		}
	}
	for _, args := range [][]string{{"dlq", "list", "--store", "x.db", "--help"}, {"dlq", "replay", "--amqp", "amqp://127.0.0.1:1", "--help"}} {
		r := runWith(t, "", nil, args...)
		if r.code != 0 || !strings.Contains(r.stderr, "-reason") {
			t.Errorf("%v = %+v; want exit 0 listing -reason", args, r)
		}
	}
}
