package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/amqp"
)

// dlqLine is one dead letter as `dlq list` prints it.
type dlqLine struct {
	ID        string    `json:"id,omitempty"`
	Method    string    `json:"method,omitempty"`
	Reason    string    `json:"reason"`
	ErrorCode string    `json:"error_code,omitempty"`
	Error     string    `json:"error,omitempty"`
	Attempts  int       `json:"attempts"`
	From      string    `json:"from,omitempty"`
	DeadAt    time.Time `json:"dead_at,omitzero"`
	// Superseded: its gateway replayed or answered the task since;
	// replay takes this copy out without publishing it.
	Superseded bool          `json:"superseded,omitempty"`
	Task       captchaq.Task `json:"task"`
}

// fleetReasons are the reasons the fleet gives a dead letter, which
// `dlq replay --reason` selects as well as error codes.
var fleetReasons = []string{amqp.ReasonPermanent, amqp.ReasonExhausted, amqp.ReasonExpired, amqp.ReasonInvalid}

func runDLQAMQP(ctx context.Context, env *environment, args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return usageError(errors.New(dlqUsage))
	}
	action := args[0]
	fs := env.flagSet("dlq " + action)
	var af amqpFlags
	af.register(fs, env.getenv)
	var ids idList
	fs.Var(&ids, "id", "replay: this task `ID` (repeat, or comma-separate)")
	reason := fs.String("reason", "", "replay: dead letters with this error `CODE` (e.g. ERROR_CAPTCHA_UNSOLVABLE, EXPIRED) or the fleet's reason: "+strings.Join(fleetReasons, ", "))
	all := fs.Bool("all", false, "replay: every dead letter")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return &exitError{code: 2, err: fmt.Errorf("unexpected argument %q: a task file names the SQLite store of its batch; give --amqp, or a task file or --store, not both", fs.Arg(0))}
	}
	cfg, err := af.config()
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	var f captchaq.DeadLetterFilter
	switch action {
	case "list":
	case "replay":
		f = captchaq.DeadLetterFilter{All: *all, ErrorCode: *reason, IDs: ids}
		if !f.All && f.ErrorCode == "" && len(f.IDs) == 0 {
			return usageError(errors.New("dlq replay: say which: --id ID, --reason CODE or --all"))
		}
	default:
		return &exitError{code: 2, err: fmt.Errorf("dlq: unknown action %q: use list or replay", action)}
	}
	c, err := amqp.Dial(ctx, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	if action == "replay" {
		n, err := c.Replay(ctx, f)
		fmt.Fprintf(env.stdout, "replayed %d dead letters\n", n)
		return err
	}
	enc := json.NewEncoder(env.stdout)
	n := 0
	err = c.DeadLetters(ctx, func(dl amqp.DeadLetter) error {
		n++
		return enc.Encode(dlqLine{
			ID: dl.Task.Task.ID, Method: dl.Task.Task.Method, Reason: dl.Reason, ErrorCode: dl.ErrorCode,
			Error: dl.Task.LastError, Attempts: dl.Task.Attempts, From: dl.From, DeadAt: dl.DeadAt,
			Superseded: dl.Superseded, Task: dl.Task.Task,
		})
	})
	fmt.Fprintf(env.stderr, "%d dead letters\n", n)
	return err
}
