// Command captchaq solves captchas through a queue that keeps a plan's
// threads busy: a batch from JSONL, one task, a provider simulator, and
// (with the other subcommands) a durable service and a worker fleet.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one subcommand. run gets the arguments after the subcommand's
// name and returns the process exit code's cause: nil for success.
type command struct {
	summary string
	run     func(ctx context.Context, env *environment, args []string) error
}

// commands is every subcommand by name; each lives in its own file.
var commands = map[string]command{}

// environment is what a subcommand may touch of the process, so tests can run
// subcommands in-process.
type environment struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
}

// withStderr returns a copy of env that writes errors to w.
func (env *environment) withStderr(w io.Writer) *environment {
	c := *env
	c.stderr = w
	return &c
}

// exitError carries a specific exit code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	env := &environment{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}
	code := run(ctx, env, os.Args[1:])
	stop()
	os.Exit(code)
}

// run dispatches to a subcommand and turns its error into an exit code and a
// message on stderr.
func run(ctx context.Context, env *environment, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(env.stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(env.stderr, "captchaq: unknown command %q\n\n", args[0])
		usage(env.stderr)
		return 2
	}
	err := cmd.run(ctx, env, args[1:])
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintf(env.stderr, "captchaq %s: %v\n", args[0], err)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: captchaq <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'captchaq <command> --help' for a command's flags.")
}
