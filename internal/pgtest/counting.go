package pgtest

import (
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
)

// Counted is a TCP relay to a database server that counts the bytes the
// server sends: what its clients read.
type Counted struct {
	// URL is the database's URL through the relay.
	URL  string
	read atomic.Int64
}

// Read is how many bytes the server has sent through the relay so far.
func (c *Counted) Read() int64 { return c.read.Load() }

// Count starts a relay on 127.0.0.1 to the server of dbURL (a URL from
// NewDatabase) and returns it; it stops, closing every connection
// through it, when t ends.
func Count(t testing.TB, dbURL string) *Counted {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("pgtest: %s is not a URL: %v", redacted(dbURL), err)
	}
	target := u.Host
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pgtest: relay: %v", err)
	}
	u.Host = ln.Addr().String()
	c := &Counted{URL: u.String()}
	var (
		mu     sync.Mutex
		conns  []net.Conn
		closed bool
		wg     sync.WaitGroup
	)
	// track keeps a relayed connection's two ends for the cleanup to
	// close: false once it ran.
	track := func(cs ...net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		conns = append(conns, cs...)
		return !closed
	}
	wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			if !track(in, out) {
				in.Close()
				out.Close()
				return
			}
			wg.Go(func() { _, _ = io.Copy(out, in); out.Close() })
			wg.Go(func() {
				_, _ = io.Copy(countingWriter{in, &c.read}, out)
				in.Close()
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		closed = true
		for _, conn := range conns {
			conn.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return c
}

// countingWriter adds what it writes to n.
type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}
