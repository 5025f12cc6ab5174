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
	"strings"
	"syscall"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
)

// command is one subcommand. run gets the arguments after the subcommand's
// name and returns the process exit code's cause: nil for success.
type command struct {
	summary string
	run     func(ctx context.Context, env *environment, args []string) error
	// actions are the words the first argument may be (dlq's list and
	// replay), offered by shell completion.
	actions []string
	// defineFlags defines the command's flag sets through env.flagSet, for
	// shell completion; nil runs the command with --help.
	defineFlags func(ctx context.Context, env *environment)
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
	// onFlagSet, when set, sees every flag set a command makes (shell
	// completion reads the flags from them).
	onFlagSet func(*flag.FlagSet)
}

// flagSet returns a command's flag set, named as the command line names it
// ("batch", "dlq list"). Its output is stdout: the flag package writes
// there only the usage --help asks for, as parseFlags handles errors.
func (env *environment) flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(env.stdout)
	if env.onFlagSet != nil {
		env.onFlagSet(fs)
	}
	return fs
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

// parseFlags parses a command's flags. --help prints the command's usage
// on fs's output (stdout) and is flag.ErrHelp (exit 0); a bad flag is a
// usage error that names it, and the flag meant when one is close.
func parseFlags(fs *flag.FlagSet, args []string) error {
	out, usage := fs.Output(), fs.Usage
	// The flag package prints an error and the whole usage on a bad flag;
	// run prints the error and a one-line hint instead.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		if usage == nil {
			fs.PrintDefaults()
		} else {
			usage()
		}
		return err
	}
	return usageError(&flagError{command: fs.Name(), err: suggestFlag(fs, err)})
}

// flagError is a bad flag on command's line; run follows it with where
// the command's flags are listed.
type flagError struct {
	command string
	err     error
}

func (e *flagError) Error() string { return e.err.Error() }
func (e *flagError) Unwrap() error { return e.err }

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

// run runs the command line args (without the program's name) and turns
// its error into an exit code and a message on stderr.
func run(ctx context.Context, env *environment, args []string) int {
	root := newRootCommand(ctx, env, args)
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") && !isCommand(root, args[0]) {
		fmt.Fprintf(env.stderr, "captchaq: %v\n", unknownCommand(root, args[0]))
		fmt.Fprintln(env.stderr, "Run 'captchaq --help' for the commands.")
		return exitUsage
	}
	ran, err := root.ExecuteContextC(ctx)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		name := "captchaq"
		if ran != nil && ran != root {
			name = ran.CommandPath()
		}
		fmt.Fprintf(env.stderr, "%s: %v\n", name, err)
		var fe *flagError
		if errors.As(err, &fe) {
			fmt.Fprintf(env.stderr, "Run '%s --help' for the flags.\n", strings.TrimSpace("captchaq "+fe.command))
		}
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
