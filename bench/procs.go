package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"
)

// hostPort is the host:port of an amqp:// or http:// URL.
func hostPort(u string) string {
	s := u[strings.Index(u, "://")+3:]
	if at := strings.LastIndex(s, "@"); at >= 0 {
		s = s[at+1:]
	}
	if i := strings.IndexAny(s, "/?"); i >= 0 {
		s = s[:i]
	}
	if !strings.Contains(s, ":") {
		s += ":5672"
	}
	return s
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

// closeConnectionsFrom closes, from the broker's side, the connections
// whose peer port is one of ports (a proxy's side of them).
func closeConnectionsFrom(ports []int) error {
	out, err := exec.Command("rabbitmqctl", "-q", "list_connections", "pid", "peer_port").CombinedOutput()
	if err != nil {
		return fmt.Errorf("fleet: rabbitmqctl list_connections: %v: %s", err, out)
	}
	closed := 0
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 || !slices.Contains(ports, atoi(f[1])) {
			continue
		}
		if o, err := exec.Command("rabbitmqctl", "-q", "close_connection", f[0], "fleet bench: forced close").CombinedOutput(); err != nil {
			return fmt.Errorf("fleet: rabbitmqctl close_connection: %v: %s", err, o)
		}
		closed++
	}
	if closed == 0 {
		return errors.New("fleet: no connection of the worker to close")
	}
	return nil
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// syncWriter lets one write through at a time.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// lineWriter prefixes each line of a process's log for the run's log.
type lineWriter struct {
	w      io.Writer
	prefix string
}

func (l *lineWriter) Write(p []byte) (int, error) {
	var b strings.Builder
	for _, line := range strings.SplitAfter(string(p), "\n") {
		if line != "" {
			b.WriteString(l.prefix + line)
		}
	}
	_, _ = io.WriteString(l.w, b.String())
	return len(p), nil
}
