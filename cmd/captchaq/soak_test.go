package main

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq/bench"
	"github.com/captchaq/captchaq/internal/brokertest"
	"github.com/captchaq/captchaq/internal/pgtest"
	"github.com/captchaq/captchaq/internal/testbound"
)

// TestSoakShort runs the soak of `captchaq bench --scenario soak` for
// three minutes: two `captchaq serve --amqp` replicas on PostgreSQL behind
// HAProxy, three `captchaq worker` processes on a 20-thread plan, a
// client submitting 5 tasks/s through the balancer, and every fault kind
// at least once, a fault every 8–15 s. It fails on a broken invariant
// (bench.SoakReport.Broken): a task lost, a token not its task's, two
// tokens for one id, a pingback missing or doubled, the plan exceeded, or
// more second solves than the faults' bounds (bench.SoakPaidTwiceBound).
// It restarts the broker and PostgreSQL, so it holds both test
// locks exclusively, PostgreSQL's first, for the whole run. It takes about
// five minutes: CI runs go test with -timeout 30m.
func TestSoakShort(t *testing.T) {
	for _, tool := range []string{"rabbitmqctl", "pg_ctlcluster", "haproxy"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipping: the soak needs %s", tool)
		}
	}
	pg := pgtest.Disrupt(t)
	broker := brokertest.Disrupt(t)
	bin := captchaqBinary(t)
	// A hang limit, not a target: the soak takes about four minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	// A new schedule each run; CAPTCHAQ_SOAK_SEED reruns one.
	seed := uint64(time.Now().UnixNano() % 1_000_000)
	if s := os.Getenv("CAPTCHAQ_SOAK_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("CAPTCHAQ_SOAK_SEED=%q: %v", s, err)
		}
		seed = n
	}
	var log testbound.Buffer
	cfg := bench.SoakConfig{Binary: bin, AMQP: broker, Postgres: pg, HAProxy: haproxyConfig,
		Duration: 3 * time.Minute, Seed: seed, GapMin: 8 * time.Second, GapMax: 15 * time.Second, Log: &log}
	t.Logf("soak seed %d; rerun: CAPTCHAQ_SOAK_SEED=%d, or captchaq bench --scenario soak --duration 3m --fault-gap 8s-15s --seed %d",
		seed, seed, seed)
	rep, err := bench.Soak(ctx, cfg)
	if err != nil {
		t.Fatalf("seed %d: %v\nlog:\n%s", cfg.Seed, err, log.String())
	}
	var md strings.Builder
	bench.SoakMarkdown(&md, rep)
	t.Logf("\n%s", md.String())
	for _, b := range rep.Broken {
		t.Errorf("seed %d: %s", cfg.Seed, b)
	}
	if t.Failed() {
		t.Logf("log:\n%s", log.String())
	}
}
