package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/captchaq/captchaq/store/sqlite"
)

// A batch's default store is its own: a file in the user's data directory
// named after the input file and a hash of its absolute path, so two task
// files never share ids or results unless --store names one store for
// both. Stdin is keyed by --out the same way; stdin to stdout keeps no
// state (memory) unless --store names a file.

// batchStoreName is the default store file name of a batch reading input
// (a path, or "" or "-" for stdin) and writing out (a path, or "" for
// stdout), on the simulator or not; "" means no default file (memory).
func batchStoreName(input, out string, useSim bool) (string, error) {
	prefix := "batch-"
	if useSim {
		prefix = "batch-sim-"
	}
	key := input
	if input == "" || input == "-" {
		if out == "" {
			return "", nil
		}
		key, prefix = out, prefix+"stdin-to-"
	}
	abs, err := filepath.Abs(key)
	if err != nil {
		return "", fmt.Errorf("--store: no default store for %s (%v); name one with --store PATH", key, err)
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	sum := sha256.Sum256([]byte(abs))
	return prefix + safeName(filepath.Base(abs)) + "-" + hex.EncodeToString(sum[:6]) + ".db", nil
}

// safeName keeps a file name readable and portable: letters, digits, dot,
// dash and underscore, at most 40 of them.
func safeName(s string) string {
	s = strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
			return r
		}
		return '_'
	}, s)
	if len(s) > 40 {
		s = s[:40]
	}
	return s
}

// dataDir is the directory of the default stores.
func dataDir() (string, error) {
	p, err := sqlite.DefaultPath()
	if err != nil {
		return "", err
	}
	return filepath.Dir(p), nil
}

// batchStorePath is the store `captchaq batch input` would use by default,
// for the read-only commands (results, dlq): on the simulator when batch
// would run on it (no key and no provider URL), unless useSim says so.
func batchStorePath(env *environment, input string, useSim bool) (string, error) {
	if !useSim && env.getenv("CAPTCHAAI_URL") == "" && !haveKey(env) {
		useSim = true
	}
	name, err := batchStoreName(input, "", useSim)
	if err != nil {
		return "", err
	}
	dir, err := dataDir()
	if err != nil {
		return "", fmt.Errorf("--store: no default location (%v); name the file", err)
	}
	return filepath.Join(dir, name), nil
}

// noStoreNamed is the error of a read-only command given neither a task
// file nor --store: it lists the batch stores there are.
func noStoreNamed(cmd string) error {
	msg := fmt.Sprintf("say which store: %s TASKS.jsonl reads the store `captchaq batch TASKS.jsonl` used, --store PATH any store", cmd)
	if dir, err := dataDir(); err == nil {
		if ents, err := os.ReadDir(dir); err == nil {
			var names []string
			for _, e := range ents {
				if strings.HasSuffix(e.Name(), ".db") {
					names = append(names, filepath.Join(dir, e.Name()))
				}
			}
			if len(names) > 0 {
				msg += "; the stores in " + dir + " are:\n  " + strings.Join(names, "\n  ")
			}
		}
	}
	return &exitError{code: 2, err: fmt.Errorf("%s", msg)}
}
