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
		{"help names amqp", []string{"serve", "--help"}, 0, "--amqp is not supported here yet"},
		{"amqp refused", []string{"serve", "--clients", clients, "--amqp", "amqp://127.0.0.1"}, 2, "--amqp: serve does not run on RabbitMQ yet"},
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
