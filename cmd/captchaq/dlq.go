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
	commands["dlq"] = command{summary: "list or replay dead letters (--amqp URL or --store PATH)", run: runDLQ}
}

// runDLQ dispatches on which back end the flags name.
func runDLQ(ctx context.Context, env *environment, args []string) error {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help") {
		fmt.Fprintln(env.stderr, dlqHelp)
		return nil
	}
	hasFlag := func(name string) bool {
		return slices.ContainsFunc(args, func(a string) bool {
			a = strings.TrimLeft(a, "-")
			return a == name || strings.HasPrefix(a, name+"=")
		})
	}
	amqpGiven := hasFlag("amqp") || env.getenv("CAPTCHAQ_AMQP_URL") != ""
	storeGiven := hasFlag("store")
	switch {
	case hasFlag("amqp") && storeGiven:
		return &exitError{code: 2, err: fmt.Errorf("give --amqp or --store, not both")}
	case storeGiven:
		if dlqStore == nil {
			return &exitError{code: 2, err: fmt.Errorf("dlq --store is not available yet in this build; use --amqp URL")}
		}
		return dlqStore(ctx, env, args)
	case amqpGiven:
		return runDLQAMQP(ctx, env, args)
	}
	return usageError(errors.New(dlqUsage))
}

const dlqUsage = "usage: captchaq dlq list|replay (TASKS.jsonl [--sim] | --store PATH | --amqp URL [--prefix P]) [--id ID ... | --reason CODE | --all]"

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
