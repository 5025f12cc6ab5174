package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
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
		if len(f) != 2 {
			continue
		}
		if port, err := strconv.Atoi(f[1]); err != nil || !slices.Contains(ports, port) {
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

// soakProc is one process of a run's deployment.
type soakProc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// procGroup is the processes a run starts, by name, their output into
// its log, each line prefixed with the name.
type procGroup struct {
	log   io.Writer
	mu    sync.Mutex
	procs map[string]*soakProc
}

func newProcGroup(log io.Writer) *procGroup {
	return &procGroup{log: log, procs: map[string]*soakProc{}}
}

// startProc starts a process under name: args, with env added to this
// process's environment.
func (g *procGroup) startProc(name string, env []string, args ...string) error {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = diesWithParent()
	lw := &lineWriter{w: g.log, prefix: "[" + name + "] "}
	cmd.Stdout, cmd.Stderr = lw, lw
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("bench: start %s: %w", name, err)
	}
	p := &soakProc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	g.mu.Lock()
	g.procs[name] = p
	g.mu.Unlock()
	return nil
}

func (g *procGroup) proc(name string) *soakProc {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.procs[name]
}

// kill SIGKILLs the process name and waits for it.
func (g *procGroup) kill(name string) error {
	p := g.proc(name)
	if p == nil {
		return fmt.Errorf("bench: no process %s", name)
	}
	if err := p.cmd.Process.Kill(); err != nil {
		return err
	}
	<-p.done
	return nil
}

// stopAll stops every process: SIGCONT and SIGTERM, then SIGKILL after
// 10 s.
func (g *procGroup) stopAll() {
	g.mu.Lock()
	procs := g.procs
	g.procs = map[string]*soakProc{}
	g.mu.Unlock()
	for _, p := range procs {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
}

// rss reads each process's resident set (VmRSS, KiB).
func (g *procGroup) rss() map[string]int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	m := map[string]int64{}
	for name, p := range g.procs {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				f := strings.Fields(v)
				if len(f) > 0 {
					m[name], _ = strconv.ParseInt(f[0], 10, 64)
				}
			}
		}
	}
	return m
}

// freeAddr is a loopback address with a port free when asked.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
