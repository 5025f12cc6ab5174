package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
)

func init() {
	commands["solve"] = command{summary: "solve one task and print its token", run: runSolve}
}

// The solve command's defaults.
const (
	solveTimeoutDefault      = 5 * time.Minute
	solvePollIntervalDefault = 5 * time.Second // the published advice; faster risks a ban
	solveRetryDefault        = 5 * time.Second // wait after a transient failure with no hint
)

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

func runSolve(ctx context.Context, env *environment, args []string) error {
	fs := flag.NewFlagSet("solve", flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	method := fs.String("method", "", "the provider's method: turnstile, userrecaptcha, base64, ... (required)")
	params := paramFlag{}
	fs.Var(params, "param", "a task field as key=value, repeatable (e.g. --param sitekey=0x4AAA --param pageurl=https://example.com)")
	apiURL := addAPIURLFlag(fs)
	providers := addProvidersFlag(fs, "api-url")
	timeout := fs.Duration("timeout", solveTimeoutDefault, "give up after this long")
	firstPoll := fs.Duration("first-poll", -1, "wait before the first poll (default: the type's typical solve time)")
	interval := fs.Duration("poll-interval", solvePollIntervalDefault, "wait between polls (at most 5s)")
	fs.Usage = func() {
		fmt.Fprintln(env.stderr, "usage: captchaq solve --method M --param k=v [--param k=v ...] [--api-url URL | --providers FILE] [--timeout D]")
		fmt.Fprintln(env.stderr, "\nSolves one task and prints its token (the answer text for image types).")
		fmt.Fprintln(env.stderr, "The key comes from "+envKey+" or the file named by "+envKeyFile+".\n\nflags:")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := providers.alone(); err != nil {
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
	if *interval <= 0 || *interval > solvePollIntervalDefault {
		return &exitError{code: 2, err: fmt.Errorf("--poll-interval %v must be above 0 and at most %v", *interval, solvePollIntervalDefault)}
	}

	var lanes []captchaq.ProviderConfig
	if providers.path != "" {
		var err error
		if lanes, err = loadProviders(env, providers.path); err != nil {
			return err
		}
	}
	if err := readLocalImage(*method, params); err != nil {
		return usageError(err)
	}
	// The same checks as every other door; the id is only for them.
	if err := (captchaq.Task{ID: "solve", Method: *method, Params: params}).ValidateFor(lanes); err != nil {
		var te *captchaq.TaskError
		if errors.As(err, &te) {
			err = errors.New(te.Msg)
		}
		return usageError(err)
	}
	task := provider.Task{Method: *method, Params: params}
	kind, _ := task.Kind()
	if lanes != nil {
		return solveOnProviders(ctx, env, lanes, captchaq.Task{ID: "solve", Method: *method, Params: params}, *timeout, *interval)
	}
	client, err := newProviderClient(env, *apiURL)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	first := *firstPoll
	if first < 0 {
		first = provider.TypicalSolveTime(kind)
	}

	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	s := solver{client: client, interval: *interval, timeout: *timeout}
	answer, err := s.solve(ctx, task, first)
	if err != nil {
		return err
	}
	out := answer.Raw
	if provider.TokenLifetime(kind) > 0 {
		out = answer.Token
	}
	_, err = io.WriteString(env.stdout, out+"\n")
	return err
}

// solveOnProviders solves one task through a queue on several providers
// (--providers), routed as batch routes it, and prints its token and, on
// stderr, where it was solved and at what price.
func solveOnProviders(ctx context.Context, env *environment, lanes []captchaq.ProviderConfig, t captchaq.Task, timeout, interval time.Duration) error {
	quiet := slog.New(slog.DiscardHandler)
	if err := checkAccounts(ctx, lanes, quiet); err != nil {
		return err
	}
	q, err := captchaq.New(captchaq.Config{Providers: lanes, PollInterval: interval,
		Store: captchaq.NewMemoryStore(captchaq.MemoryStoreConfig{})})
	if err != nil {
		return usageError(err)
	}
	defer q.Close()
	if err := q.Start(ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	f, err := q.Submit(ctx, t)
	if err != nil {
		return err
	}
	r, err := f.Wait(ctx)
	switch {
	case errors.Is(context.Cause(ctx), context.Canceled):
		return errors.New("interrupted")
	case err != nil:
		return taskFailed(fmt.Errorf("no answer within %v; raise --timeout", timeout))
	case r.Status != captchaq.StatusSolved:
		return taskFailed(fmt.Errorf("failed at %s: %s", cmp.Or(r.Provider, "no provider"), r.Error))
	}
	fmt.Fprintf(env.stderr, "captchaq solve: solved by %s for %v\n", r.Provider, r.Price)
	_, err = io.WriteString(env.stdout, r.Token+"\n")
	return err
}

// solver runs one task through submit and poll, riding out capacity and
// transient failures until the deadline.
type solver struct {
	client   *provider.Client
	interval time.Duration
	timeout  time.Duration
}

func (s solver) solve(ctx context.Context, task provider.Task, first time.Duration) (provider.Answer, error) {
	var id string
	for {
		var err error
		id, err = s.client.Submit(ctx, task, "")
		if err == nil {
			break
		}
		if werr := s.waitAfter(ctx, err, "submit", ""); werr != nil {
			return provider.Answer{}, werr
		}
	}
	wait := first
	for {
		if err := sleep(ctx, wait); err != nil {
			return provider.Answer{}, s.timedOut(ctx, id, err)
		}
		wait = s.interval
		res, err := s.client.Poll(ctx, id)
		if err != nil {
			if werr := s.waitAfter(ctx, err, "poll of captcha "+id, id); werr != nil {
				return provider.Answer{}, werr
			}
			continue
		}
		if res.Err != nil {
			return provider.Answer{}, taskFailed(fmt.Errorf("captcha %s failed: %w", id, res.Err))
		}
		if res.Ready {
			return res.Answer, nil
		}
	}
}

// waitAfter decides about a failed request: wait and let the caller retry
// (nil), or give up (the error to report).
func (s solver) waitAfter(ctx context.Context, err error, what, id string) error {
	if ctx.Err() != nil {
		return s.timedOut(ctx, id, err)
	}
	var pe *provider.Error
	if !errors.As(err, &pe) {
		return err
	}
	switch pe.Class {
	case provider.ClassTransient, provider.ClassNoSlot, provider.ClassRateLimit:
		d := pe.RetryAfter
		if d <= 0 {
			d = solveRetryDefault
		}
		if serr := sleep(ctx, d); serr != nil {
			return fmt.Errorf("%s: gave up after %v: %w", what, s.timeout, err)
		}
		return nil
	case provider.ClassAccount:
		return fmt.Errorf("%w (the account cannot be used: check the key, the plan and the allowed IPs)", err)
	case provider.ClassTask:
		return taskFailed(err)
	}
	return err
}

// taskFailed marks err as the task's own failure (exit code 4), not the
// tool's.
func taskFailed(err error) error { return &exitError{code: exitTasksFailed, err: err} }

func (s solver) timedOut(ctx context.Context, id string, err error) error {
	if errors.Is(context.Cause(ctx), context.Canceled) || errors.Is(err, context.Canceled) {
		return errors.New("interrupted")
	}
	if id != "" {
		return taskFailed(fmt.Errorf("no answer for captcha %s within %v; raise --timeout", id, s.timeout))
	}
	return taskFailed(fmt.Errorf("no answer within %v: %w", s.timeout, err))
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
