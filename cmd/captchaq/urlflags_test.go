package main

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Every URL flag is checked when the command starts: a bad one exits 2
// with the flag, what is wrong and the fix, before anything connects, and
// no message shows a URL's password. serve --public-url without a scheme
// used to start and fail every task, quoting the pingback secret to every
// client.
func TestURLFlagsCheckedAtStart(t *testing.T) {
	t.Parallel()
	clients := writeFile(t, "clients.json", `[{"name":"qa","key":"client-key-1"}]`)
	userinfo := writeFile(t, "providers.json", `[{"name":"main","url":"https://u:hunter2@api.example","key_env":"CAPTCHAAI_KEY","threads":2}]`)
	key := map[string]string{"CAPTCHAAI_KEY": batchKey}
	serve := []string{"serve", "--clients", clients, "--listen", "127.0.0.1:0", "--store", "memory"}
	cat := func(a []string, b ...string) []string { return append(append([]string{}, a...), b...) }
	for _, c := range []struct {
		name string
		args []string
		say  string
	}{
		{"serve public-url without a scheme", cat(serve, "--public-url", "captchaq.example.com:8080"),
			`captchaq serve: --public-url: "captchaq.example.com:8080" has no scheme; add https:// (e.g. https://captchaq.example.com:8080); give this server's address as the provider reaches it, e.g. https://captchaq.example.com`},
		{"serve public-url with a password", cat(serve, "--public-url", "https://u:hunter2@captchaq.example.com"),
			"--public-url: must not carry a user or password"},
		{"serve public-url with a query", cat(serve, "--public-url", "https://captchaq.example.com/?x=1"),
			`--public-url: "https://captchaq.example.com/?x=1" has a query or fragment`},
		{"serve api-url without a scheme", cat(serve, "--api-url", "ocr.captchaai.com"),
			`--api-url: "ocr.captchaai.com" has no scheme; give e.g. https://ocr.captchaai.com`},
		{"solve api-url with a password", []string{"solve", "--api-url", "https://u:hunter2@api.example", "--method", "turnstile"},
			`--api-url: "https://***@api.example" must not carry a user or password`},
		{"serve amqp without a scheme", cat(serve[:5], "--amqp", "guest:hunter2@127.0.0.1:5672"),
			`--amqp (or $CAPTCHAQ_AMQP_URL): "***@127.0.0.1:5672" has no scheme; give e.g. amqp://USER:PASS@HOST:5672/`},
		{"worker amqp of another scheme", []string{"worker", "--amqp", "http://127.0.0.1:5672/"},
			`--amqp (or $CAPTCHAQ_AMQP_URL): "http://127.0.0.1:5672/" must start with amqp:// or amqps://`},
		{"enqueue amqp with no host", []string{"enqueue", "--amqp", "amqp:///vhost"},
			`--amqp (or $CAPTCHAQ_AMQP_URL): "amqp:///vhost" has no host`},
		{"serve postgres store that does not parse", cat(serve[:5], "--store", "postgres://u:hunter2@[db/q"),
			"--store: postgres: the connection string is not valid"},
		{"serve providers url with a password", cat(serve, "--providers", userinfo),
			"providers[0] (main).url: must not carry a user or password"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := startBinary(t, key, "", c.args...)
			done := make(chan error, 1)
			go func() { done <- r.cmd.Wait() }()
			var err error
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				r.cmd.Process.Kill()
				<-done
				t.Fatalf("captchaq %v started (still running after 30s), want exit 2 saying %q; stderr:\n%s", c.args, c.say, r.errText())
			}
			code := 0
			if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			out := r.stdout.String() + r.errText()
			if code != exitUsage || !strings.Contains(r.errText(), c.say) {
				t.Errorf("captchaq %v: exit %d, stderr:\n%s\nwant exit 2 saying %q", c.args, code, r.errText(), c.say)
			}
			if strings.Contains(out, "hunter2") || strings.Contains(out, batchKey) {
				t.Errorf("captchaq %v: a password or the key in the output:\n%s", c.args, out)
			}
		})
	}
}
