package server_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/server"
)

// healthz asks GET /healthz on a connection of its own from ip and says
// whether it was answered: a connection past a cap is closed unanswered.
// The connection stays open (idle) until the test ends.
func healthz(t *testing.T, addr, ip string) (net.Conn, bool) {
	t.Helper()
	c, err := dialerFrom(ip).Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: captchaq.test\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(time.Minute)) // a bound, not a measure
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return c, false
	}
	resp.Body.Close()
	c.SetReadDeadline(time.Time{})
	return c, resp.StatusCode == http.StatusOK
}

// The server's Listener caps the connections open at once, from one
// address and overall; a closed one gives its place back.
func TestConnectionCaps(t *testing.T) {
	t.Parallel()
	b := setup(t, options{server: func(c *server.Config) { c.MaxConns, c.MaxConnsPerAddress = 4, 2 }})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: b.srv.Handler()}
	go hs.Serve(b.srv.Listener(ln))
	t.Cleanup(func() { hs.Close() })
	addr := ln.Addr().String()

	first, _ := healthz(t, addr, "127.0.0.2")
	for i, c := range []struct {
		ip   string
		want bool
	}{
		{"127.0.0.2", true}, {"127.0.0.2", false}, // two per address
		{"127.0.0.3", true}, {"127.0.0.3", true}, {"127.0.0.4", false}, // four in all
	} {
		if _, ok := healthz(t, addr, c.ip); ok != c.want {
			t.Errorf("connection %d from %s answered %v, want %v", i+2, c.ip, ok, c.want)
		}
	}
	first.Close()
	testbound.Until(t, "the closed connection's place given back", func() bool {
		_, ok := healthz(t, addr, "127.0.0.4")
		return ok
	})
	if n := testutilCounter(t, b, "captchaq_http_connections_refused_total", map[string]string{"cap": "address"}); n != 1 {
		t.Errorf("refused for the address cap: %v, want 1", n)
	}
	if n := testutilCounter(t, b, "captchaq_http_connections_refused_total", map[string]string{"cap": "overall"}); n < 1 {
		t.Errorf("refused for the overall cap: %v, want at least 1", n)
	}
}
