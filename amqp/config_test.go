package amqp

import (
	"context"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
)

// TestConfigListsEveryProblem: Dial, NewWorker and NewGateway report all
// the problems of their config at once, each naming its field, before
// they touch the broker.
func TestConfigListsEveryProblem(t *testing.T) {
	t.Parallel()
	_, err := Dial(context.Background(), Config{
		URL: "http://u:secret@host/", Prefix: "a b", Prefetch: -1, MaxPriority: 300,
		Lanes: []string{"x/y"}, RetryDelays: []time.Duration{time.Microsecond},
		InflightRefresh: time.Hour, ReconnectMin: time.Minute, ReconnectMax: time.Second,
	})
	want := `amqp: URL "http://***@host/": must start with amqp:// or amqps://
amqp: Prefix "a b": use letters, digits, '.', '_', ':' or '-' (at most 101 characters)
amqp: Prefetch -1: must be positive
amqp: MaxPriority 300: must be 1..255 (10 or less is advised)
amqp: Lanes: kind "x/y": use letters, digits, '.', '_' or '-'
amqp: RetryDelays: 1µs: must be at least 1ms
amqp: InflightRefresh 1h0m0s: must stay below the broker's consumer_timeout (30m)
amqp: ReconnectMin 1m0s exceeds ReconnectMax 1s`
	if err == nil || err.Error() != want {
		t.Errorf("Dial: %v\nwant: %s", err, want)
	}

	c := &Conn{cfg: Config{}.withDefaults()}
	_, err = NewWorker(c, WorkerConfig{
		Queue: captchaq.Config{Store: captchaq.NewMemoryStore(captchaq.MemoryStoreConfig{})},
		Owner: "a b", Prefetch: -1,
	})
	want = `amqp: WorkerConfig.Queue.Store: leave it nil; the worker's store is the broker
amqp: WorkerConfig.Owner "a b": use letters, digits, '.', '_', ':' or '-'
amqp: WorkerConfig.Prefetch -1: must be positive`
	if err == nil || err.Error() != want {
		t.Errorf("NewWorker: %v\nwant: %s", err, want)
	}

	_, err = NewGateway(c, GatewayConfig{Name: "a b", Prefetch: -1})
	want = `amqp: GatewayConfig.Store: required: the gateway records there the tasks it accepts and their results
amqp: GatewayConfig.Name "a b": use letters, digits, '.', '_', ':' or '-' (at most 101)
amqp: GatewayConfig.Prefetch -1: must be positive`
	if err == nil || err.Error() != want {
		t.Errorf("NewGateway: %v\nwant: %s", err, want)
	}
}

// TestWorkerConfigDefaults pins the defaults NewWorker and NewGateway fill in.
func TestWorkerConfigDefaults(t *testing.T) {
	t.Parallel()
	w := WorkerConfig{Queue: captchaq.Config{Plan: "STANDARD"}}.withDefaults(discardLogger)
	if w.Prefetch != 15+WorkerPrefetchExtra || w.Grace != GraceDefault || w.BeatInterval != BeatIntervalDefault ||
		w.BalanceEvery != BalanceEveryDefault || w.Logger != discardLogger || !prefixRE.MatchString(w.Owner) {
		t.Errorf("WorkerConfig defaults: %+v", w)
	}
	g := GatewayConfig{}.withDefaults(discardLogger)
	if g.FairBurst != FairBurstDefault || g.Prefetch != GatewayPrefetchDefault || g.Logger != discardLogger || !prefixRE.MatchString(g.Name) {
		t.Errorf("GatewayConfig defaults: %+v", g)
	}
}
