package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/amqp"
)

func init() {
	commands["collect"] = command{summary: "write results from RabbitMQ as JSONL, each task once", run: runCollect}
}

func runCollect(ctx context.Context, env *environment, args []string) error {
	fs := env.flagSet("collect")
	var af amqpFlags
	af.register(fs, env.getenv)
	count := fs.Int("count", 0, "stop after this many results (0: until --timeout or interrupted)")
	timeout := fs.Duration("timeout", 0, "stop after this long (0: no limit)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: captchaq collect --amqp URL [--prefix P] [--count N] [--timeout D]")
		fmt.Fprintln(fs.Output(), "\nWrites the fleet's results as JSONL on stdout, each task once; exits 4 when fewer than --count\ncame within --timeout.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *count < 0 {
		return &exitError{code: 2, err: fmt.Errorf("--count %d: must be 0 or more", *count)}
	}
	if *timeout < 0 {
		return &exitError{code: 2, err: fmt.Errorf("--timeout %v: must be 0 or more", *timeout)}
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
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	fmt.Fprintf(env.stderr, "captchaq collect: reading results from %s\n", c.Names().Results)
	w := bufio.NewWriter(env.stdout)
	enc := json.NewEncoder(w)
	n, err := c.Collect(ctx, *count, func(r captchaq.Result) error {
		if err := enc.Encode(r); err != nil {
			return err
		}
		// Flushed before the ack, so an acked result is on stdout.
		return w.Flush()
	})
	if err != nil {
		return err
	}
	if *count > 0 && n < *count {
		return &exitError{code: exitTasksFailed, err: fmt.Errorf("collected %d of %d results before %s", n, *count, stopCause(ctx, *timeout))}
	}
	fmt.Fprintf(env.stderr, "collected %d results\n", n)
	return nil
}

func stopCause(ctx context.Context, timeout time.Duration) string {
	if ctx.Err() == context.DeadlineExceeded {
		return fmt.Sprintf("the %v timeout", timeout)
	}
	return "the interrupt"
}
