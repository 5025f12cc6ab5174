package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/store/sqlite"
)

func init() {
	commands["results"] = command{summary: "write every result stored in a SQLite store as JSONL", run: runResults}
}

func runResults(ctx context.Context, env *environment, args []string) error {
	fs := flag.NewFlagSet("results", flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	path := fs.String("store", "", "the SQLite store `PATH` (default: the default store of `captchaq batch`)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *path == "" {
		p, err := sqlite.DefaultPath()
		if err != nil {
			return fmt.Errorf("--store: no default location (%v); name the file", err)
		}
		*path = p
	}
	st, err := sqlite.Open(ctx, *path, sqlite.Options{})
	if err != nil {
		return fmt.Errorf("--store: %w", err)
	}
	defer st.Close()
	w := bufio.NewWriter(env.stdout)
	enc := json.NewEncoder(w)
	if err := st.Results(ctx, func(r captchaq.Result) error { return enc.Encode(r) }); err != nil {
		return err
	}
	return w.Flush()
}
