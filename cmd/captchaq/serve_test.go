package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestServeFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clients := filepath.Join(dir, "clients.json")
	os.WriteFile(clients, []byte(`[{"name":"qa","key":"short"}]`), 0o600)
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"help names gateway mode", []string{"serve", "--help"}, 0, "With --amqp URL it is a gateway to the fleet"},
		{"help: the dashboard's key goes in its form", []string{"serve", "--help"}, 0, "type an admin client's key into its form; a key in the address is refused"},
		{"local flag with amqp", []string{"serve", "--clients", clients, "--amqp", "amqp://127.0.0.1", "--threads", "5"}, 2, "--threads: applies to the local queue; with --amqp the workers solve the tasks"},
		{"gateway flag without amqp", []string{"serve", "--clients", clients, "--gateway", "web-1"}, 2, "--gateway: applies with --amqp only"},
		{"fair burst zero", []string{"serve", "--clients", clients, "--amqp", "amqp://127.0.0.1", "--fair-burst", "0"}, 2, "--fair-burst 0: give a positive number"},
		{"stray argument", []string{"serve", "--clients", clients, "extra"}, 2, `unexpected argument "extra"`},
		{"clients required", []string{"serve"}, 2, "--clients: required"},
		{"bad clients file", []string{"serve", "--clients", clients}, 2, `[0].key: client "qa" needs a key of at least 8 characters`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			env := &environment{stdin: strings.NewReader(""), stdout: &out, stderr: &out, getenv: func(string) string { return "" }}
			if code := run(context.Background(), env, c.args); code != c.code || !strings.Contains(out.String(), c.want) {
				t.Errorf("exit %d, want %d; output lacks %q:\n%s", code, c.code, c.want, out.String())
			}
		})
	}
}

// serve reads the broker URL from CAPTCHAQ_AMQP_URL, as worker and enqueue
// do, so its password stays out of ps; no command's help prints it.
func TestServeReadsAMQPURLFromEnv(t *testing.T) {
	t.Parallel()
	clients := writeFile(t, "clients.json", `[{"name":"qa","key":"qa-key-000001"}]`)
	const url = "amqp://fleet:hunter2-secret@127.0.0.1:5672/"
	getenv := func(k string) string {
		if k == "CAPTCHAQ_AMQP_URL" {
			return url
		}
		return ""
	}
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"a local flag with the URL from the environment", []string{"serve", "--clients", clients, "--threads", "5"}, 2,
			"--threads: applies to the local queue; with CAPTCHAQ_AMQP_URL set (serve is a gateway then; --amqp '' serves locally)"},
		{"a gateway flag with the URL from the environment", []string{"serve", "--clients", clients, "--fair-burst", "0"}, 2, "--fair-burst 0"},
		{"--amqp '' serves locally", []string{"serve", "--clients", clients, "--amqp", "", "--gateway", "web-1"}, 2, "--gateway: applies with --amqp only"},
		{"serve's help", []string{"serve", "--help"}, 0, "$CAPTCHAQ_AMQP_URL"},
		{"worker's help", []string{"worker", "--help"}, 0, "$CAPTCHAQ_AMQP_URL"},
		{"enqueue's help", []string{"enqueue", "--help"}, 0, "$CAPTCHAQ_AMQP_URL"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			env := &environment{stdin: strings.NewReader(""), stdout: &out, stderr: &out, getenv: getenv}
			code := run(context.Background(), env, c.args)
			if code != c.code || !strings.Contains(out.String(), c.want) {
				t.Errorf("exit %d, want %d; output lacks %q:\n%s", code, c.code, c.want, out.String())
			}
			if strings.Contains(out.String(), "hunter2") {
				t.Errorf("the output shows the broker's password:\n%s", out.String())
			}
		})
	}
}
