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
