package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/amqp"
)

func init() {
	commands["enqueue"] = command{summary: "publish task JSONL to RabbitMQ and return", run: runEnqueue}
}

func runEnqueue(ctx context.Context, env *environment, args []string) error {
	fs := env.flagSet("enqueue")
	var af amqpFlags
	af.register(fs, env.getenv)
	providersFile := fs.String("providers", "", "the workers' providers `FILE`: take the types any of its providers solves (no key is read)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: captchaq enqueue --amqp URL [--prefix P] [--providers FILE] [FILE|-]\n\nPublishes one task per JSONL line, in order, each confirmed by the broker.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := parseInterspersed(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 1 {
		return &exitError{code: 2, err: fmt.Errorf("give one FILE (or - for stdin), not %d", fs.NArg())}
	}
	cfg, err := af.config()
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	var providers []captchaq.ProviderConfig
	if *providersFile != "" {
		if providers, err = loadProvidersWithoutKeys(*providersFile); err != nil {
			return err
		}
	}
	in := env.stdin
	name := "stdin"
	if fs.NArg() == 1 && fs.Arg(0) != "-" {
		f, err := os.Open(fs.Arg(0))
		if err != nil {
			return usageError(err)
		}
		defer f.Close()
		in, name = f, fs.Arg(0)
	}
	c, err := amqp.Dial(ctx, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	p := c.NewPublisher()
	defer p.Close()
	published, invalid, err := enqueueLines(ctx, p, in, name, providers, env.stderr)
	fmt.Fprintf(env.stderr, "enqueued %d tasks to %s.tasks (%d invalid lines skipped)\n", published, cfg.Prefix, invalid)
	if err != nil {
		return err
	}
	if invalid > 0 {
		return &exitError{code: exitUsage, err: fmt.Errorf("%d invalid lines in %s (see above)", invalid, name)}
	}
	return nil
}

// enqueueWindow bounds the tasks sent and not yet confirmed.
const enqueueWindow = 256

// enqueueLines publishes each valid line, in order, and reports each
// invalid one with its line number, a line that repeats an earlier line's
// id among them (fileIDs). Up to enqueueWindow tasks wait for their
// confirms at once; every task counted as published is confirmed. It
// stops at the first task the broker does not confirm.
func enqueueLines(ctx context.Context, p *amqp.Publisher, in io.Reader, name string, providers []captchaq.ProviderConfig, errw io.Writer) (published, invalid int, err error) {
	type sentLine struct {
		line    int
		id      string
		confirm amqp.Confirm
	}
	sent := make(chan sentLine, enqueueWindow)
	var failed atomic.Bool
	var confirmErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		for s := range sent {
			if err := s.confirm(ctx); err != nil {
				if confirmErr == nil {
					confirmErr = fmt.Errorf("%s:%d: task %q: %w", name, s.line, s.id, err)
					failed.Store(true)
				}
				continue
			}
			published++
		}
	}()
	ids := fileIDs{}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for line := 1; !failed.Load() && sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		t, perr := parseTaskLineFor([]byte(text), providers)
		id := t.ID
		if perr != nil && id == "" {
			id = lineID([]byte(text))
		}
		if err := ids.check(id, line); err != nil {
			perr = err
		}
		if perr != nil {
			fmt.Fprintf(errw, "%s:%d: %v\n", name, line, perr)
			invalid++
			continue
		}
		confirm, serr := p.SendTask(ctx, amqp.TaskMessage{Task: t})
		if serr != nil {
			err = fmt.Errorf("%s:%d: task %q: %w", name, line, t.ID, serr)
			break
		}
		sent <- sentLine{line, t.ID, confirm}
	}
	close(sent)
	<-done
	switch {
	case confirmErr != nil:
		// An earlier line than any error of sending.
		return published, invalid, confirmErr
	case err != nil:
		return published, invalid, err
	case sc.Err() != nil:
		return published, invalid, fmt.Errorf("read %s: %w", name, sc.Err())
	}
	return published, invalid, nil
}

// parseTaskLine reads one task line and refuses what every other door
// refuses (captchaq.Task.Validate), before anything is published.
func parseTaskLine(b []byte) (captchaq.Task, error) { return parseTaskLineFor(b, nil) }

// parseTaskLineFor is parseTaskLine for a fleet on these providers
// (captchaq.Task.ValidateFor; none: the one provider, CaptchaAI).
func parseTaskLineFor(b []byte, providers []captchaq.ProviderConfig) (captchaq.Task, error) {
	t, err := readTask(b)
	if err != nil {
		return t, err
	}
	return t, t.ValidateFor(providers)
}
