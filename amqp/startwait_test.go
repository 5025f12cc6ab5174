package amqp

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A process started before its broker takes connections waits for it
// (Config.StartWait) and connects once it listens; without the wait, or
// with a wrong login, Dial fails at once.
func TestDialWaitsForTheBroker(t *testing.T) {
	cfg := testConfig(t)
	u, err := url.Parse(cfg.URL)
	if err != nil {
		t.Fatal(err)
	}

	// A port nothing listens on yet: the broker's, forwarded from 1.5 s on.
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := probe.Addr().String()
	probe.Close()
	late := cfg
	lu := *u
	lu.Host = addr
	late.URL = lu.String()

	t.Run("no wait", func(t *testing.T) {
		start := time.Now()
		_, err := Dial(context.Background(), late)
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("Dial with no StartWait: %v, want connection refused", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Dial with no StartWait took %v, want at once", d)
		}
	})

	t.Run("waits", func(t *testing.T) {
		listening := make(chan struct{})
		go func() {
			// The pause is the broker's start this test stands for.
			<-time.After(1500 * time.Millisecond)
			ln, err := net.Listen("tcp", addr)
			close(listening)
			if err != nil {
				t.Errorf("listen on %s: %v", addr, err)
				return
			}
			cutProxyOn(t, ln, cfg.URL)
		}()
		start := time.Now()
		waiting := late
		waiting.StartWait = time.Minute
		c, err := Dial(context.Background(), waiting)
		if err != nil {
			t.Fatalf("Dial with StartWait: %v", err)
		}
		t.Cleanup(func() {
			c.Close()
			if err := DeleteTopology(context.Background(), cfg); err != nil {
				t.Errorf("DeleteTopology: %v", err)
			}
		})
		<-listening
		if d := time.Since(start); d < time.Second {
			t.Errorf("Dial connected after %v, before anything listened", d)
		}
		if !c.Connected() {
			t.Error("Dial returned a Conn not connected")
		}
	})

	t.Run("wrong login fails at once", func(t *testing.T) {
		wu := *u
		wu.User = url.UserPassword(u.User.Username(), "not-the-password")
		wrong := cfg
		wrong.URL, wrong.StartWait = wu.String(), time.Minute
		start := time.Now()
		_, err := Dial(context.Background(), wrong)
		if err == nil || !strings.Contains(err.Error(), "403") {
			t.Fatalf("Dial with a wrong password: %v, want the broker's 403", err)
		}
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("a refused login took %v: it was tried again", d)
		}
	})
}
