package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/captchaq/captchaq"
)

func init() {
	commands["solve"] = command{summary: "solve one task and print its token", run: runSolve}
}

// solveTimeoutDefault bounds a solve that gets no answer.
const solveTimeoutDefault = 5 * time.Minute

// paramFlag collects repeated --param key=value flags.
type paramFlag map[string]string

func (p paramFlag) String() string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

func (p paramFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	k = strings.TrimSpace(k)
	if !ok || k == "" {
		return fmt.Errorf("%q: write key=value, e.g. --param pageurl=https://example.com/login", s)
	}
	if _, dup := p[k]; dup {
		return fmt.Errorf("%q given twice", k)
	}
	p[k] = v
	return nil
}

const solveUsage = "usage: captchaq solve --method M --param k=v [--param k=v ...] [--api-url URL] [--timeout D] [flags]"

// runSolve solves one task through the same queue as batch: its poll
// scheduler, its retries, its providers, and the built-in simulator when
// no key is set; the task is kept in memory only.
func runSolve(ctx context.Context, env *environment, args []string) error {
	fs := env.flagSet("solve")
	method := fs.String("method", "", "the provider's method: turnstile, userrecaptcha, base64, ... (required)")
	params := paramFlag{}
	fs.Var(params, "param", "a task field as key=value, repeatable (e.g. --param sitekey=0x4AAA --param pageurl=https://example.com)")
	qf := addQueueFlags(fs)
	fs.Lookup("store").Usage = "task store: \"memory\" (the default: one task is not worth a file), a SQLite file `PATH` or postgres://USER@HOST/DB"
	timeout := fs.Duration("timeout", solveTimeoutDefault, "give up after this long")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), solveUsage)
		fmt.Fprintln(fs.Output(), "\nSolves one task through the queue and prints its token (the answer text for image types).")
		fmt.Fprintln(fs.Output(), "The key comes from "+envKey+" or the file named by "+envKeyFile+"; with neither, nor a provider")
		fmt.Fprintln(fs.Output(), "URL, the built-in simulator solves it.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := qf.providers.alone(); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return &exitError{code: 2, err: fmt.Errorf("unexpected argument %q; task fields go in --param key=value", fs.Arg(0))}
	}
	if *method == "" {
		return &exitError{code: 2, err: errors.New("--method is required, e.g. --method turnstile")}
	}
	if *timeout <= 0 {
		return &exitError{code: 2, err: fmt.Errorf("--timeout %v must be positive", *timeout)}
	}
	if err := readLocalImage(*method, params); err != nil {
		return usageError(err)
	}
	// The id names the task in this run's memory store only.
	task := captchaq.Task{ID: "solve", Method: *method, Params: params}
	if *qf.store == "" {
		*qf.store = "memory"
	}
	rt, err := qf.open(ctx, env)
	if err != nil {
		return err
	}
	defer rt.close()
	// The same checks as every other door, once, before anything is sent.
	v, err := rt.queue.Check(task)
	if err != nil {
		var te *captchaq.TaskError
		if errors.As(err, &te) {
			err = errors.New(te.Msg)
		}
		return usageError(err)
	}

	r, err := solveOne(ctx, rt, v, *timeout)
	if err != nil {
		return err
	}
	if r.Provider != "" {
		fmt.Fprintf(env.stderr, "captchaq solve: solved by %s for %v\n", r.Provider, r.Price)
	}
	_, err = io.WriteString(env.stdout, r.Token+"\n")
	return err
}

// solveOne submits the checked task to rt's queue (not checked again) and
// waits for its answer, at most timeout. A task not solved, an account the
// provider refuses, an interrupt, are errors with their exit codes.
func solveOne(ctx context.Context, rt *queueRuntime, task captchaq.ValidTask, timeout time.Duration) (captchaq.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type outcome struct {
		r   captchaq.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		answer := make(chan captchaq.Result, 1)
		if err := rt.queue.SubmitValid(ctx, []captchaq.ValidTask{task}, func(_ int, r captchaq.Result) { answer <- r })[0]; err != nil {
			done <- outcome{err: err}
			return
		}
		select {
		case r := <-answer:
			done <- outcome{r: r}
		case <-ctx.Done():
			done <- outcome{err: ctx.Err()}
		}
	}()
	var o outcome
	select {
	case err := <-rt.fatal:
		return o.r, rt.fatalStop(err)
	case o = <-done:
	}
	switch {
	case o.err != nil && errors.Is(context.Cause(ctx), context.Canceled):
		return o.r, &exitError{code: 130, err: errors.New("interrupted")}
	case o.err != nil && ctx.Err() != nil:
		if why := reachNote(rt.queue.Metrics(), time.Now()); why != "" {
			return o.r, taskFailed(fmt.Errorf("no answer within %v: %s", timeout, why))
		}
		if m := rt.queue.Metrics(); m.Paused {
			return o.r, taskFailed(fmt.Errorf("no answer within %v: sending paused: %s", timeout, m.PausedReason))
		}
		return o.r, taskFailed(fmt.Errorf("no answer within %v; raise --timeout", timeout))
	case o.err != nil:
		return o.r, o.err
	case o.r.Status != captchaq.StatusSolved:
		return o.r, taskFailed(fmt.Errorf("failed after %d attempts: %s", o.r.Attempts, o.r.Error))
	}
	return o.r, nil
}

// taskFailed marks err as the task's own failure (exit code 4), not the
// tool's.
func taskFailed(err error) error { return &exitError{code: exitTasksFailed, err: err} }
