package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/store/sqlite"
)

func init() {
	commands["results"] = command{summary: "write every result stored in a SQLite store as JSONL (read-only)", run: runResults}
}

// resultLine is a stored result as results prints it: expired says the
// token has passed expires_at (a batch rerun solves the task again).
type resultLine struct {
	captchaq.Result
	Expired bool `json:"expired,omitempty"`
}

func runResults(ctx context.Context, env *environment, args []string) error {
	fs := env.flagSet("results")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: captchaq results [TASKS.jsonl | --store PATH] [--sim]")
		fmt.Fprintln(fs.Output(), "\nWrites every result of a store as JSONL; expired tokens are marked \"expired\": true. It only reads: it works while a batch runs.")
		fs.PrintDefaults()
	}
	path := fs.String("store", "", "the SQLite store `PATH` (default: the store `captchaq batch TASKS.jsonl` used)")
	useSim := fs.Bool("sim", false, "with TASKS.jsonl: the store of a batch run on the built-in simulator (the default with no key set)")
	if err := parseInterspersed(fs, args); err != nil {
		return err
	}
	p, err := readStorePath(env, "results", *path, fs.Args(), *useSim)
	if err != nil {
		return err
	}
	st, err := sqlite.OpenReader(ctx, p)
	if err != nil {
		return fmt.Errorf("--store: %w", err)
	}
	defer st.Close()
	w := bufio.NewWriter(env.stdout)
	enc := json.NewEncoder(w)
	now := time.Now()
	if err := st.Results(ctx, func(r captchaq.Result) error { return enc.Encode(resultLine{r, r.Expired(now)}) }); err != nil {
		return err
	}
	return w.Flush()
}

// readStorePath is the store a read-only command reads: --store, else the
// default store of `captchaq batch` on the one task file named. A task
// file or a store that is not there is bad input (exit 2), named as the
// user gave it.
func readStorePath(env *environment, cmd, store string, args []string, useSim bool) (string, error) {
	switch {
	case store != "" && len(args) > 0:
		return "", usageError(fmt.Errorf("give a task file or --store PATH, not both"))
	case store != "":
		if _, err := os.Stat(store); errors.Is(err, fs.ErrNotExist) {
			return "", usageError(fmt.Errorf("--store %s: no such file: check the path", store))
		}
		return store, nil
	case len(args) > 1:
		return "", usageError(fmt.Errorf("one task file at most, got %d", len(args)))
	case len(args) == 0:
		return "", noStoreNamed(cmd)
	}
	if _, err := os.Stat(args[0]); err != nil {
		return "", usageError(fmt.Errorf("%s: no such task file: name the file `captchaq batch` ran on", args[0]))
	}
	p, err := batchStorePath(env, args[0], useSim)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
		on := "CaptchaAI"
		if useSim || env.getenv("CAPTCHAAI_URL") == "" && !haveKey(env) {
			on = "the built-in simulator"
		}
		return "", usageError(fmt.Errorf("no batch of %s on %s has stored results on this machine (its store would be %s): run `captchaq batch %s` first, or give --store PATH",
			args[0], on, p, args[0]))
	}
	return p, nil
}
