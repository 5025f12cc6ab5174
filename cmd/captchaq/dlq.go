package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// dlqStore runs `dlq` for the SQLite store (--store PATH); it is set by the
// file that implements it. args are the arguments after "dlq".
var dlqStore func(ctx context.Context, env *environment, args []string) error

func init() {
	commands["dlq"] = command{
		summary:     "list or replay dead letters (of a batch: TASKS.jsonl or --store PATH; of the fleet: --amqp URL)",
		run:         runDLQ,
		actions:     []string{"list", "replay"},
		defineFlags: defineDLQFlags,
	}
}

// defineDLQFlags defines the flags of both back ends, which dlqHelp lists.
func defineDLQFlags(ctx context.Context, env *environment) {
	_ = runDLQAMQP(ctx, env, []string{"list", "--help"})
	if dlqStore != nil {
		_ = dlqStore(ctx, env, []string{"list", "--help"})
	}
}

// runDLQ dispatches on which back end the flags name.
func runDLQ(ctx context.Context, env *environment, args []string) error {
	// --help anywhere before "--" (dlq list --help too) is the help.
	help := len(args) > 0 && args[0] == "help"
	for _, a := range args {
		if a == "--" {
			break
		}
		help = help || a == "-h" || a == "-help" || a == "--help"
	}
	if help {
		fmt.Fprintln(env.stdout, dlqHelp)
		return nil
	}
	hasFlag := func(name string) bool {
		return slices.ContainsFunc(args, func(a string) bool {
			a = strings.TrimLeft(a, "-")
			return a == name || strings.HasPrefix(a, name+"=")
		})
	}
	// --amqp names the broker; a task file (TASKS.jsonl), --store or --sim
	// the SQLite store of a batch; CAPTCHAQ_AMQP_URL the broker when none
	// of them is given.
	storeGiven := hasFlag("store") || hasFlag("sim")
	switch {
	case hasFlag("amqp") && storeGiven:
		return &exitError{code: 2, err: fmt.Errorf("give --amqp, or a task file or --store, not both")}
	case hasFlag("amqp"):
		return runDLQAMQP(ctx, env, args)
	case storeGiven || dlqTaskFile(args) != "":
		if dlqStore == nil {
			return &exitError{code: 2, err: fmt.Errorf("dlq --store is not available yet in this build; use --amqp URL")}
		}
		return dlqStore(ctx, env, args)
	case env.getenv("CAPTCHAQ_AMQP_URL") != "":
		return runDLQAMQP(ctx, env, args)
	}
	return usageError(errors.New(dlqUsage))
}

// dlqValueFlags are dlq's flags that take a value as the next argument.
var dlqValueFlags = []string{"store", "amqp", "prefix", "id", "reason"}

// dlqTaskFile returns the positional argument after the action (list or
// replay), the task file naming a batch's store, or "".
func dlqTaskFile(args []string) string {
	for i := 1; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			if i+1 < len(args) {
				return args[i+1]
			}
			return ""
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			return a
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !hasValue && slices.Contains(dlqValueFlags, name) {
			i++ // its value
		}
	}
	return ""
}

const dlqUsage = "usage: captchaq dlq list|replay (FILE | --store PATH | --amqp URL) [--id ID ... | --reason CODE | --all]"

// dlqHelp is `dlq --help`: both back ends take the same flags.
const dlqHelp = dlqUsage + `

Lists the dead letters (tasks failed for good) as JSONL, or queues them again.

flags:
  -store PATH
    	the SQLite store of captchaq batch or serve
  -amqp URL
    	the RabbitMQ fleet's broker (env CAPTCHAQ_AMQP_URL)
  -prefix P
    	with --amqp: name prefix of every queue and exchange (default "captcha")
  -id ID
    	replay: this task ID (repeat, or comma-separate)
  -reason CODE
    	replay: dead letters with this error code (e.g. ERROR_CAPTCHA_UNSOLVABLE,
    	EXPIRED); with --amqp also the fleet's reason: permanent, exhausted,
    	expired or invalid
  -all
    	replay: every dead letter`
