package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/internal/tlsconf"
	"github.com/captchaq/captchaq/sim"
)

// A TLS key file other users can read (--tls-key, or the local CA's keys
// kept from an earlier run at 0644) is named at start with the fix, as
// the clients file is. serve, given a provider URL, stops at the missing
// provider key after.
func TestTLSKeysReadableByOthersAreNamed(t *testing.T) {
	data := t.TempDir()
	t.Setenv("XDG_DATA_HOME", data) // the local CA's directory
	clients := writeFile(t, "clients.json", `[{"name":"qa","key":"qa-key-000001"}]`)
	noKey := func(string) string { return "" }
	serve := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var out bytes.Buffer
		env := &environment{stdin: strings.NewReader(""), stdout: &out, stderr: &out, getenv: noKey}
		args = append([]string{"serve", "--clients", clients, "--store", "memory", "--listen", "127.0.0.1:0", "--api-url", "http://127.0.0.1:9"}, args...)
		if code := run(ctx, env, args); code != 2 {
			t.Fatalf("serve %v without a provider key: exit %d, want 2\n%s", args, code, out.String())
		}
		return out.String()
	}

	dir := t.TempDir()
	l, err := tlsconf.SelfSigned(dir, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cert, key := filepath.Join(dir, "own-cert.pem"), filepath.Join(dir, "own-key.pem")
	for from, to := range map[string]string{l.Cert: cert, l.Key: key} {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want := fmt.Sprintf("captchaq: warning: --tls-key file %s can be read by other users (mode 0644) and it holds the TLS certificate's private key: chmod 600 %s\n", key, key)
	if out := serve("--tls-cert", cert, "--tls-key", key); !strings.Contains(out, want) {
		t.Errorf("--tls-key at 0644: no %q in\n%s", want, out)
	}
	mustOK(t, os.Chmod(key, 0o600))
	if out := serve("--tls-cert", cert, "--tls-key", key); strings.Contains(out, "can be read by other users") {
		t.Errorf("--tls-key at 0600 warned:\n%s", out)
	}

	// The local CA's files, left 0644 (by hand, a backup, an old umask):
	// kept, and named.
	serve("--tls-self-signed")
	tlsDir := filepath.Join(data, "captchaq", "tls")
	caKey, leafKey := filepath.Join(tlsDir, "ca-key.pem"), filepath.Join(tlsDir, "key.pem")
	mustOK(t, os.Chmod(caKey, 0o644))
	mustOK(t, os.Chmod(leafKey, 0o644))
	out := serve("--tls-self-signed")
	for _, w := range []string{
		fmt.Sprintf("captchaq: warning: --tls-self-signed CA key %s can be read by other users (mode 0644) and it signs certificates clients trust: chmod 600 %s\n", caKey, caKey),
		fmt.Sprintf("captchaq: warning: --tls-self-signed key %s can be read by other users (mode 0644) and it holds the TLS certificate's private key: chmod 600 %s\n", leafKey, leafKey),
	} {
		if !strings.Contains(out, w) || !strings.Contains(out, "made_ca=false") {
			t.Errorf("the local CA's keys at 0644: no %q in\n%s", w, out)
		}
	}
}

// serve --metrics-listen off loopback serves client names without a key:
// it says so at start; on loopback it does not.
func TestMetricsListenOffLoopbackWarns(t *testing.T) {
	t.Parallel()
	ss, apiURL, err := sim.Start(sim.Config{LatencyScale: 0.01, Seed: 3}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	clients := writeFile(t, "clients.json", `[{"name":"qa","key":"client-key-1"}]`)
	getenv := func(k string) string {
		if k == "CAPTCHAAI_KEY" {
			return "metrics-warn-key"
		}
		return ""
	}
	want := `level=WARN msg="--metrics-listen is not on loopback: anyone who reaches it reads /metrics, every client's name and numbers, without a key; listen on 127.0.0.1 (or ::1), or firewall it" addr=`
	for _, c := range []struct {
		listen string
		warned bool
	}{{"0.0.0.0:0", true}, {"127.0.0.1:0", false}} {
		ctx, cancel := context.WithCancel(context.Background())
		var out testbound.Buffer
		env := &environment{stdin: strings.NewReader(""), stdout: &out, stderr: &out, getenv: getenv}
		done := make(chan int, 1)
		go func() {
			done <- run(ctx, env, []string{"serve", "--store", "memory", "--clients", clients, "--api-url", apiURL,
				"--listen", "127.0.0.1:0", "--metrics-listen", c.listen})
		}()
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(out.String(), "msg=serving ") {
			select {
			case code := <-done:
				cancel()
				t.Fatalf("serve --metrics-listen %s ended (exit %d) before serving:\n%s", c.listen, code, out.String())
			case <-time.After(10 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				cancel()
				t.Fatalf("serve --metrics-listen %s: not serving after 30s:\n%s", c.listen, out.String())
			}
		}
		cancel()
		<-done
		if got := strings.Contains(out.String(), want); got != c.warned {
			t.Errorf("--metrics-listen %s: warned %v, want %v:\n%s", c.listen, got, c.warned, out.String())
		}
	}
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
