package main

import (
	"bytes"
	"context"
	"fmt"
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

// A clients file or a key file that other users can read is named at
// start, with the fix.
func TestSecretFilesReadableByOthersAreNamed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clients := filepath.Join(dir, "clients.json")
	keyFile := filepath.Join(dir, "provider.key")
	for _, mode := range []os.FileMode{0o644, 0o640, 0o600} {
		if err := os.WriteFile(clients, []byte(`[{"name":"qa","key":"qa-key-000001"}]`), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(keyFile, []byte("provider-secret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{clients, keyFile} {
			if err := os.Chmod(p, mode); err != nil {
				t.Fatal(err)
			}
		}
		var out bytes.Buffer
		// No key, a provider URL: serve stops after reading the clients
		// file (with no URL either it would solve on the simulator).
		env := &environment{stdin: strings.NewReader(""), stdout: &out, stderr: &out, getenv: func(string) string { return "" }}
		if code := run(context.Background(), env, []string{"serve", "--clients", clients, "--store", "memory", "--api-url", "http://127.0.0.1:9"}); code != 2 {
			t.Fatalf("mode %04o: serve without a key: exit %d\n%s", mode, code, out.String())
		}
		wantClients := fmt.Sprintf("captchaq: warning: --clients file %s can be read by other users (mode %04o) and it holds every client's key, the admin's too: chmod 600 %s", clients, mode, clients)
		if got := strings.Contains(out.String(), wantClients); got != (mode != 0o600) {
			t.Errorf("mode %04o: warning shown %v:\n%s", mode, got, out.String())
		}

		out.Reset()
		env.getenv = func(k string) string {
			if k == "CAPTCHAAI_KEY_FILE" {
				return keyFile
			}
			return ""
		}
		if k, err := providerKey(env); err != nil || k != "provider-secret" {
			t.Fatalf("providerKey: %q %v", k, err)
		}
		wantKey := fmt.Sprintf("captchaq: warning: CAPTCHAAI_KEY_FILE %s can be read by other users (mode %04o) and it holds the provider account's key: chmod 600 %s\n", keyFile, mode, keyFile)
		if mode == 0o600 {
			wantKey = ""
		}
		if out.String() != wantKey {
			t.Errorf("mode %04o: key file: %q, want %q", mode, out.String(), wantKey)
		}
	}
}
