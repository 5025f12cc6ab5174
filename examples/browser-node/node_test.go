// Package browsernode tests the Node example (index.js): puppeteer-core and
// the @2captcha/captcha-solver client, pointed at captchaq serve, pass the
// simulator's demo pages.
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
	if _, err := os.Stat("node_modules/puppeteer-core"); err != nil {
		missing("node_modules missing: run npm ci in examples/browser-node")
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

func TestNodeExample(t *testing.T) {
	node, chromium := need(t)
	siteURL, serveURL := stack(t)
	const timeout = 2 * time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "index.js")
	// Killed at the deadline, node leaves chromium holding its output
	// pipes; stop waiting for them soon after.
	cmd.WaitDelay = 5 * time.Second
	cmd.Env = append(os.Environ(), "SERVE_URL="+serveURL, "SITE_URL="+siteURL, "CLIENT_KEY="+clientKey, "CHROME_PATH="+chromium)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("not done within %v: %w", timeout, err)
		}
		t.Fatalf("node index.js: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	want := "/demo/turnstile Signed in\n/demo/recaptcha Order placed\n"
	if got := stdout.String(); got != want {
		t.Fatalf("node index.js printed\n%s\nwant\n%s\nstderr:\n%s", got, want, stderr.String())
	}
	if strings.TrimSpace(stderr.String()) != "" {
		t.Logf("stderr: %s", stderr.String())
	}
}
