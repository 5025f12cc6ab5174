// Package browsernode tests the Node examples: index.js (puppeteer-core and
// the @2captcha/captcha-solver client, pointed at captchaq serve) passes
// the simulator's demo pages; recaptcha-plugin.js
// (puppeteer-extra-plugin-recaptcha with captchaq as its provider.fn)
// finds, solves and submits the demo's reCAPTCHA.
package browsernode

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/server"
	"github.com/captchaq/captchaq/sim"
)

const clientKey = "node-client-key"

// need finds what the example runs with, or skips (fails under CI=true,
// where .ci/run installs them).
func need(t *testing.T) (node, chromium string) {
	t.Helper()
	missing := func(what string) {
		t.Helper()
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s: .ci/run installs it for CI", what)
		}
		t.Skip(what)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node not found (apt-get install nodejs npm)")
	}
	for _, pkg := range []string{"puppeteer-core", "puppeteer-extra", "puppeteer-extra-plugin-recaptcha"} {
		if _, err := os.Stat("node_modules/" + pkg); err != nil {
			missing("node_modules/" + pkg + " missing: run npm ci in examples/browser-node")
		}
	}
	chromium = os.Getenv("CHROME_PATH")
	if chromium == "" {
		if chromium, err = exec.LookPath("chromium"); err != nil {
			missing("chromium not found")
		}
	}
	return node, chromium
}

// stack runs a simulator (the demo site) and captchaq serve in-process.
func stack(t *testing.T) (siteURL, serveURL string) {
	t.Helper()
	s, siteURL, err := sim.Start(sim.Config{LatencyScale: 0.01}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	client, err := provider.NewClient(provider.ClientConfig{BaseURL: siteURL, Key: "provider-key"})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{
		Queue:   captchaq.Config{Provider: client, PollInterval: 100 * time.Millisecond},
		Clients: []server.Client{{Name: "node", Key: clientKey}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
		_ = srv.Shutdown(ctx)
	})
	return siteURL, "http://" + ln.Addr().String()
}

// runExample runs a script of the example against a fresh stack and
// returns what it printed.
func runExample(t *testing.T, script string) (stdout, stderr string) {
	t.Helper()
	node, chromium := need(t)
	siteURL, serveURL := stack(t)
	const timeout = 2 * time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	// Killed at the deadline, node leaves chromium holding its output
	// pipes; stop waiting for them soon after.
	cmd.WaitDelay = 5 * time.Second
	cmd.Env = append(os.Environ(), "SERVE_URL="+serveURL, "SITE_URL="+siteURL, "CLIENT_KEY="+clientKey, "CHROME_PATH="+chromium)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("not done within %v: %w", timeout, err)
		}
		t.Fatalf("node %s: %v\nstdout:\n%s\nstderr:\n%s", script, err, out.String(), errb.String())
	}
	if strings.TrimSpace(errb.String()) != "" {
		t.Logf("stderr: %s", errb.String())
	}
	return out.String(), errb.String()
}

func TestNodeExample(t *testing.T) {
	want := "/demo/turnstile Signed in\n/demo/recaptcha Order placed\n"
	if got, stderr := runExample(t, "index.js"); got != want {
		t.Fatalf("node index.js printed\n%s\nwant\n%s\nstderr:\n%s", got, want, stderr)
	}
}

// TestRecaptchaPluginExample: the plugin finds the demo's reCAPTCHA,
// captchaq (through provider.fn) solves it, and the site accepts the
// token.
func TestRecaptchaPluginExample(t *testing.T) {
	want := "/demo/recaptcha Order placed\n"
	if got, stderr := runExample(t, "recaptcha-plugin.js"); got != want {
		t.Fatalf("node recaptcha-plugin.js printed\n%s\nwant\n%s\nstderr:\n%s", got, want, stderr)
	}
}
