package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

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
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	env := []string{"CAPTCHAQ_LISTEN=" + addr}
	for i, a := range r.replicas {
		env = append(env, fmt.Sprintf("CAPTCHAQ_R%d=%s", i+1, a))
	}
	r.base = "http://" + addr
	return r.startProc("haproxy", env, "haproxy", "-db", "-f", cfgPath)
}

// waitHealthy waits until base answers /healthz with 200, for at most limit.
func waitHealthy(ctx context.Context, base string, limit time.Duration) error {
	return waitOK(ctx, base+"/healthz", limit)
}

// waitOK waits until GET u answers 200, for at most limit.
func waitOK(ctx context.Context, u string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		resp, err := soakHTTP.Get(u)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: %s does not answer 200 after %v: %v", u, limit, err)
		}
		sleepCtx(ctx, 100*time.Millisecond)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}
