package bench

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// fault strikes kind at slot pick (of the workers or the replicas) and
// returns once it is over, naming what it struck.
func (r *soakRun) fault(ctx context.Context, kind string, pick int) (string, error) {
	cfg := r.cfg
	w, rep := pick%cfg.Workers, pick%cfg.Replicas
	wName, rName := fmt.Sprintf("w%d", w), fmt.Sprintf("r%d", rep+1)
	switch kind {
	case SoakWorkerKill:
		if err := r.kill(wName); err != nil {
			return wName, err
		}
		if err := r.startWorker(w); err != nil {
			return wName, err
		}
		return wName, r.waitConsumers(ctx, cfg.Workers)
	case SoakWorkerStop:
		p := r.proc(wName)
		if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			return wName, err
		}
		sleepCtx(ctx, cfg.Outage)
		return wName, p.cmd.Process.Signal(syscall.SIGCONT)
	case SoakFrontKill:
		if err := r.kill(rName); err != nil {
			return rName, err
		}
		// Back a second later, as a supervisor restarts it.
		sleepCtx(ctx, time.Second)
		if err := r.startReplica(rep); err != nil {
			return rName, err
		}
		return rName, waitHealthy(ctx, "http://"+r.replicas[rep], cfg.Drain)
	case SoakPartition:
		r.brokerWay[w].setCut(true)
		r.apiWay[w].setCut(true)
		sleepCtx(ctx, cfg.Outage)
		r.brokerWay[w].setCut(false)
		r.apiWay[w].setCut(false)
		return wName, nil
	case SoakClose:
		if cfg.DisruptBroker != nil {
			defer cfg.DisruptBroker()()
			r.struck = time.Now()
		}
		// The worker may be between connections (after a broker restart):
		// wait for one to close.
		deadline := time.Now().Add(cfg.Drain)
		for {
			err := closeConnectionsFrom(r.brokerWay[w].upstreamPorts())
			if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
				return wName, err
			}
			sleepCtx(ctx, 500*time.Millisecond)
		}
	case SoakBrokerRestart:
		if cfg.DisruptBroker != nil {
			defer cfg.DisruptBroker()()
			r.struck = time.Now()
		}
		if out, err := exec.Command("rabbitmqctl", "stop_app").CombinedOutput(); err != nil {
			return "broker", fmt.Errorf("rabbitmqctl stop_app: %v: %s", err, out)
		}
		sleepCtx(ctx, time.Second)
		if out, err := exec.Command("rabbitmqctl", "start_app").CombinedOutput(); err != nil {
			return "broker", fmt.Errorf("rabbitmqctl start_app: %v: %s", err, out)
		}
		return "broker", nil
	case SoakPostgresRestart:
		if cfg.DisruptPostgres != nil {
			defer cfg.DisruptPostgres()()
			r.struck = time.Now()
		}
		return "postgres", restartPostgres(ctx, cfg.Postgres, cfg.Drain)
	}
	return "", fmt.Errorf("soak: no fault %q", kind)
}

// restartPostgres restarts the local cluster that serves admin's port
// (pg_ctlcluster, found with pg_lsclusters) and waits, for at most limit,
// until admin connects again.
func restartPostgres(ctx context.Context, admin string, limit time.Duration) error {
	version, cluster, err := clusterServing(admin)
	if err != nil {
		return err
	}
	out, err := exec.Command("pg_ctlcluster", "--skip-systemctl-redirect", version, cluster, "restart").CombinedOutput()
	if err != nil {
		return fmt.Errorf("soak: pg_ctlcluster restart: %v: %s", err, out)
	}
	deadline := time.Now().Add(limit)
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(cctx, admin)
		cancel()
		if err == nil {
			conn.Close(context.Background())
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("soak: PostgreSQL not back %v after its restart: %v", limit, err)
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
}

// clusterServing names the local cluster (version and name, as
// pg_lsclusters lists them) that listens on the port of the PostgreSQL URL
// admin, 5432 when it names none: a soak on a cluster of its own restarts
// only that one.
func clusterServing(admin string) (version, cluster string, err error) {
	cfg, err := pgx.ParseConfig(admin)
	if err != nil {
		return "", "", fmt.Errorf("soak: --postgres: %v", err)
	}
	out, err := exec.Command("pg_lsclusters", "--no-header").Output()
	if err != nil {
		return "", "", fmt.Errorf("soak: pg_lsclusters: %v", err)
	}
	port := strconv.Itoa(int(cfg.Port))
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[2] == port {
			return f[0], f[1], nil
		}
	}
	return "", "", fmt.Errorf("soak: no local cluster listens on port %s (pg_lsclusters); a PostgreSQL restart needs one", port)
}
