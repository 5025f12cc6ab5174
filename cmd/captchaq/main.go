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

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
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

// The process exit codes, the same for every command (README "Commands": the exit codes).
const (
	exitOK          = 0
	exitFailure     = 1   // the tool could not do its job: I/O, broker, store
	exitUsage       = 2   // bad usage or input: flags, arguments, files, task lines, no key
	exitAccount     = 3   // the provider refused the account (bad key, no plan, IP)
	exitTasksFailed = 4   // the run finished, but some tasks got no answer
	exitInterrupted = 130 // SIGINT, or SIGTERM before the work was done
)

// exitError carries a specific exit code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageError marks err as bad usage or input (exit code 2).
func usageError(err error) error { return &exitError{code: exitUsage, err: err} }

// parseFlags parses a command's flags; a bad flag is a usage error and
// --help is flag.ErrHelp (exit 0).
func parseFlags(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	return usageError(err)
}

// signalled is the cause of the command context's end when the process got
// a signal.
type signalled struct{ sig os.Signal }

func (s *signalled) Error() string { return "interrupted by " + s.sig.String() }

func main() {
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		for s := range sigs {
			cancel(&signalled{sig: s})
		}
	}()
	env := &environment{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}
	code := run(ctx, env, os.Args[1:])
	signal.Stop(sigs)
	os.Exit(code)
}

// run dispatches to a subcommand and turns its error into an exit code and a
// message on stderr.
func run(ctx context.Context, env *environment, args []string) int {
	if len(args) == 2 && args[0] == "help" {
		args = []string{args[1], "--help"} // captchaq help batch; an unknown name is said so
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(env.stderr)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(env.stderr, "captchaq: unknown command %q\n\n", args[0])
		usage(env.stderr)
		return exitUsage
	}
	err := cmd.run(ctx, env, args[1:])
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(env.stderr, "captchaq %s: %v\n", args[0], err)
	}
	return exitCode(ctx, err)
}

// exitCode maps a command's result to the process exit code. A command that
// stops cleanly on SIGINT still exits 130, so a script sees it was
// interrupted; sim, serve and worker exit 0 after SIGTERM's graceful stop.
func exitCode(ctx context.Context, err error) int {
	var sig *signalled
	sigint := errors.As(context.Cause(ctx), &sig) && sig.sig == os.Interrupt
	if err == nil || errors.Is(err, flag.ErrHelp) {
		if sigint {
			return exitInterrupted
		}
		return exitOK
	}
	code := exitFailure
	var ee *exitError
	var ae *captchaq.AccountError
	switch {
	case errors.As(err, &ee):
		code = ee.code
	case errors.As(err, &ae) || provider.ClassOf(err) == provider.ClassAccount:
		code = exitAccount
	}
	// A command stopped by a signal fails or misses tasks because of it.
	if ctx.Err() != nil && (code == exitFailure || code == exitTasksFailed) {
		code = exitInterrupted
	}
	return code
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
