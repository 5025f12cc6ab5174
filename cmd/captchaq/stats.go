package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/captchaq/captchaq/amqp"
)

func init() {
	commands["stats"] = command{summary: "queue depth, failure rate and oldest unacked task on RabbitMQ", run: runStats}
}

func runStats(ctx context.Context, env *environment, args []string) error {
	fs := env.flagSet("stats")
	var af amqpFlags
	af.register(fs, env.getenv)
	window := fs.Duration("window", 10*time.Second, "how long to sample the failure rate and listen for status beats")
	asJSON := fs.Bool("json", false, "print JSON")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: captchaq stats --amqp URL [--prefix P] [--window D] [--json]")
		fmt.Fprintln(fs.Output(), "\nSamples the fleet for --window, then prints its task queue depth, failures per minute, the oldest\nunacknowledged task and the threads in use against the plan.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *window <= 0 {
		return &exitError{code: 2, err: fmt.Errorf("--window %v: must be positive", *window)}
	}
	cfg, err := af.config()
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	c, err := amqp.Dial(ctx, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Fprintf(env.stderr, "captchaq stats: sampling for %v (--window)...\n", *window)
	st, err := c.Stats(ctx, *window)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(env.stdout).Encode(st)
	}
	fmt.Fprintf(env.stdout, "waiting tasks       %d\n", st.Waiting)
	fmt.Fprintf(env.stdout, "failed per minute   %.1f (over %v)\n", st.FailedPerMinute, st.Window)
	fmt.Fprintf(env.stdout, "oldest unacked      %v (%d held by %d consumers)\n", st.OldestUnacked.Round(time.Second), st.Held, st.Holders)
	if th := st.Threads; th.Plan > 0 {
		fmt.Fprintf(env.stdout, "fleet threads       %d of %d in use (%d held per the beats)\n", th.InUse, th.Plan, th.Held)
	}
	for _, name := range slices.Sorted(maps.Keys(st.ProviderThreads)) {
		th := st.ProviderThreads[name]
		fmt.Fprintf(env.stdout, "  provider %-10s %d of %d in use (%d held per the beats)\n", name, th.InUse, th.Plan, th.Held)
	}
	for _, q := range st.Queues {
		fmt.Fprintf(env.stdout, "  %-40s ready %-6d consumers %d\n", q.Name, q.Ready, q.Consumers)
	}
	return nil
}
