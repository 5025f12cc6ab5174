package main

import (
	"context"
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
	return &exitError{code: 2, err: fmt.Errorf("usage: captchaq dlq list|replay (--amqp URL [--prefix P] | --store PATH)")}
}
