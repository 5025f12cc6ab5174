package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq/amqp"
	"github.com/captchaq/captchaq/bench"
	"github.com/captchaq/captchaq/internal/brokertest"
)

// The recovery tests run the fleet scenario of `captchaq bench` in its
// short form: three `captchaq worker --threads 10` processes at their
// defaults, 60 Turnstile tasks of 0.5–2 s from `captchaq enqueue`, one
// fault 2 s in. Each checks that nothing is lost, each answer reaches the
// results queue once, and that the answers a fault held up waited less
// than half the checkpoint lease: the broker gave the fleet the dead or
// silent worker's tasks (see "Recovery" in the amqp package doc), where
// before they waited for the lease (a minute) to run out.

func TestRecoverySIGKILL(t *testing.T)   { recoveryTest(t, bench.FaultSIGKILL, 1) }
func TestRecoveryClose(t *testing.T)     { recoveryTest(t, bench.FaultClose, 0) }
func TestRecoveryRestart(t *testing.T)   { recoveryTest(t, bench.FaultRestart, 0) }
func TestRecoveryPartition(t *testing.T) { recoveryTest(t, bench.FaultPartition, 0) }
func TestRecoverySIGSTOP(t *testing.T)   { recoveryTest(t, bench.FaultSIGSTOP, 0) }

// recoveryTest runs fault once. A SIGKILL may cost up to maxPaidTwice
// second solves: a worker killed between the provider's answer to a
// submit and its checkpoint's confirm leaves no trace of the captcha id.
func recoveryTest(t *testing.T, fault string, maxPaidTwice int64) {
	var url string
	switch fault {
	case bench.FaultClose, bench.FaultRestart:
		url = brokertest.Disrupt(t)
	default:
		url = brokertest.Use(t)
	}
	bin := captchaqBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var log strings.Builder
	rep, err := bench.Fleet(ctx, bench.FleetConfig{Binary: bin, URL: url, Fault: fault, Tasks: 60,
		FaultAt: 2 * time.Second, Outage: 20 * time.Second, Seed: 27, Log: &log})
	if err != nil {
		t.Fatalf("%v\nlog:\n%s", err, log.String())
	}
	t.Logf("%s: lost %d, twice %d, paid twice %d, ready→fetched p50 %.2f s p99 %.2f s max %.2f s, makespan %v (floor %v), utilization %.3f, no free thread %d of %d, load %s",
		fault, rep.Lost, rep.DeliveredTwice, rep.PaidTwice, rep.ReadyToFetched.P50, rep.ReadyToFetched.P99, rep.ReadyToFetched.Max,
		rep.Makespan.Round(time.Millisecond), rep.Floor.Round(time.Millisecond), rep.Utilization, rep.NoSlot, rep.Submits, rep.Load)
	if rep.Lost != 0 || rep.Results != 60 {
		t.Errorf("%d of 60 tasks have a result, %d lost; want every one", rep.Results, rep.Lost)
	}
	if rep.DeliveredTwice != 0 {
		t.Errorf("%d results reached the results queue twice, want each once", rep.DeliveredTwice)
	}
	if rep.PaidTwice > maxPaidTwice {
		t.Errorf("%d tasks solved twice, want at most %d", rep.PaidTwice, maxPaidTwice)
	}
	if limit := (amqp.InflightLeaseDefault / 2).Seconds(); rep.ReadyToFetched.Max >= limit {
		t.Errorf("an answer waited %.1f s from ready to fetched, want less than %.0f s (half the lease: the fleet adopts a dead worker's tasks when the broker lets go of them)",
			rep.ReadyToFetched.Max, limit)
	}
	if t.Failed() {
		t.Logf("log:\n%s", log.String())
	}
}
