package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// soakProc is one process of the deployment.
type soakProc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// startProc starts a process of the deployment under name.
func (r *soakRun) startProc(name string, env []string, args ...string) error {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = diesWithParent()
	lw := &lineWriter{w: r.log, prefix: "[" + name + "] "}
	cmd.Stdout, cmd.Stderr = lw, lw
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("soak: start %s: %w", name, err)
	}
	p := &soakProc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	r.mu.Lock()
	r.procs[name] = p
	r.mu.Unlock()
	return nil
}

// startWorker runs `captchaq worker` at its defaults but --threads, in
// slot i: through its own proxies to the broker and the provider.
func (r *soakRun) startWorker(i int) error {
	brokerURL := strings.Replace(r.brokerURL, hostPort(r.brokerURL), r.brokerWay[i].addr(), 1)
	return r.startProc(fmt.Sprintf("w%d", i), []string{"CAPTCHAAI_KEY=" + soakKey},
		r.cfg.Binary, "worker", "--amqp", brokerURL, "--api-url", r.apiWay[i].url(), "--threads", fmt.Sprint(r.cfg.Threads))
}

// startReplica runs `captchaq serve --amqp` in slot i, on its address.
// --pingback-allow lets its pingbacks reach the soak's receiver on
// loopback, which the egress guard refuses by default.
func (r *soakRun) startReplica(i int) error {
	return r.startProc(fmt.Sprintf("r%d", i+1), nil, r.cfg.Binary, "serve", "--amqp", r.brokerURL, "--store", r.storeURL,
		"--clients", r.clients, "--listen", r.replicas[i], "--pingback-allow", "127.0.0.0/8")
}

// startHAProxy runs haproxy on the shipped config, its server lines past
// the replicas dropped.
func (r *soakRun) startHAProxy() error {
	b, err := os.ReadFile(r.cfg.HAProxy)
	if err != nil {
		return fmt.Errorf("soak: HAProxy config: %w", err)
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "server" && f[1] > "r"+strconv.Itoa(len(r.replicas)) {
			continue
		}
		lines = append(lines, l)
	}
	cfgPath := filepath.Join(r.dir, "haproxy.cfg")
	if err := os.WriteFile(cfgPath, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	addr := ln.Addr().String()
	ln.Close()
	env := []string{"CAPTCHAQ_LISTEN=" + addr}
	for i, a := range r.replicas {
		env = append(env, fmt.Sprintf("CAPTCHAQ_R%d=%s", i+1, a))
	}
	r.base = "http://" + addr
	return r.startProc("haproxy", env, "haproxy", "-db", "-f", cfgPath)
}

// waitHealthy waits until base answers /healthz with 200, for at most limit.
func waitHealthy(ctx context.Context, base string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		resp, err := soakHTTP.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("soak: %s does not answer /healthz after %v: %v", base, limit, err)
		}
		sleepCtx(ctx, 100*time.Millisecond)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

func (r *soakRun) proc(name string) *soakProc {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.procs[name]
}

// kill SIGKILLs the process name and waits for it.
func (r *soakRun) kill(name string) error {
	p := r.proc(name)
	if p == nil {
		return fmt.Errorf("soak: no process %s", name)
	}
	if err := p.cmd.Process.Kill(); err != nil {
		return err
	}
	<-p.done
	return nil
}

// rss reads each process's resident set (VmRSS, KiB).
func (r *soakRun) rss() map[string]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[string]int64{}
	for name, p := range r.procs {
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
