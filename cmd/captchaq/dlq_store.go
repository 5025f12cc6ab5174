package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/store/sqlite"
)

func init() { dlqStore = runDLQStore }

// idList is a repeatable --id flag that also takes comma-separated ids.
type idList []string

func (l *idList) String() string { return strings.Join(*l, ",") }
func (l *idList) Set(v string) error {
	for _, id := range strings.Split(v, ",") {
		if id = strings.TrimSpace(id); id != "" {
			*l = append(*l, id)
		}
	}
	return nil
}

// runDLQStore lists or replays the dead letters of a SQLite store. Replayed
// tasks are queued again in the store; the next `captchaq batch` (or serve)
// on that store solves them.
func runDLQStore(ctx context.Context, env *environment, args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return usageError(errors.New(dlqUsage))
	}
	action := args[0]
	fs := env.flagSet("dlq " + action)
	path := fs.String("store", "", "the SQLite store `PATH` (default: the store `captchaq batch TASKS.jsonl` used)")
	useSim := fs.Bool("sim", false, "with TASKS.jsonl: the store of a batch run on the built-in simulator (the default with no key set)")
	var ids idList
	fs.Var(&ids, "id", "replay: this task `ID` (repeat, or comma-separate)")
	reason := fs.String("reason", "", "replay: dead letters with this error `CODE` (e.g. ERROR_CAPTCHA_UNSOLVABLE, EXPIRED)")
	all := fs.Bool("all", false, "replay: every dead letter")
	if err := parseInterspersed(fs, args[1:]); err != nil {
		return err
	}
	if *path == "memory" {
		return &exitError{code: 2, err: fmt.Errorf("--store: name the SQLite file (a memory store has no dead letters after its process ends)")}
	}
	p, err := readStorePath(env, "dlq "+args[0], *path, fs.Args(), *useSim)
	if err != nil {
		return err
	}
	*path = p
	f := captchaq.DeadLetterFilter{All: *all, IDs: ids, ErrorCode: *reason}
	switch action {
	case "list":
		f = captchaq.DeadLetterFilter{All: true}
	case "replay":
		if !f.All && f.ErrorCode == "" && len(f.IDs) == 0 {
			return &exitError{code: 2, err: fmt.Errorf("dlq replay: say which: --id ID, --reason CODE or --all")}
		}
	default:
		return &exitError{code: 2, err: fmt.Errorf("dlq: unknown action %q: use list or replay", action)}
	}
	if action == "replay" {
		if _, err := os.Stat(*path); err != nil {
			return fmt.Errorf("--store: %w (nothing was created)", err)
		}
		st, err := sqlite.Open(ctx, *path, sqlite.Config{Logger: slog.Default()})
		if err != nil {
			return fmt.Errorf("--store: %w", err)
		}
		defer st.Close()
		n, err := st.Replay(ctx, f, time.Now())
		if err != nil {
			return err
		}
		fmt.Fprintf(env.stdout, "replayed %d dead letters\n", n)
		return nil
	}
	// Listing only reads: no lock, so it works while a batch runs.
	st, err := sqlite.OpenReader(ctx, *path)
	if err != nil {
		return fmt.Errorf("--store: %w", err)
	}
	defer st.Close()
	enc := json.NewEncoder(env.stdout)
	n := 0
	err = st.DeadLetters(ctx, f, func(r captchaq.Record) error {
		n++
		line := dlqLine{ID: r.Task.ID, Method: r.Task.Method, Reason: "failed", Error: r.LastError,
			ErrorCode: r.LastErrorCode, Attempts: r.Attempts, Task: r.Task}
		if r.Result != nil {
			line.Error, line.ErrorCode, line.DeadAt = r.Result.Error, r.Result.ErrorCode, r.Result.FinishedAt
			line.Attempts = r.Result.Attempts
		}
		return enc.Encode(line)
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(env.stderr, "%d dead letters\n", n)
	return nil
}
