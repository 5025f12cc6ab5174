package main

import (
	"errors"
	"flag"
	"strings"
)

// suggestFlag rewrites the flag package's error for an undefined flag as
// "unknown flag --NAME", with the closest flag of fs when one is close;
// other errors it returns as they are.
func suggestFlag(fs *flag.FlagSet, err error) error {
	const undefined = "flag provided but not defined: -"
	name, ok := strings.CutPrefix(err.Error(), undefined)
	if !ok {
		return err
	}
	msg := "unknown flag --" + name
	if s := closestFlag(fs, name); s != "" {
		msg += "; did you mean --" + s + "?"
	}
	return errors.New(msg)
}

// closestFlag returns the flag of fs that name most likely misspells: the
// one with the fewest edits, at most 2, or else the one name begins; ""
// when none is close.
func closestFlag(fs *flag.FlagSet, name string) string {
	best, bestDist := "", 3
	prefixed := ""
	fs.VisitAll(func(f *flag.Flag) {
		if d := editDistance(strings.ToLower(name), strings.ToLower(f.Name)); d < bestDist && d < len(name) {
			best, bestDist = f.Name, d
		}
		if prefixed == "" && len(name) >= 3 && strings.HasPrefix(f.Name, name) {
			prefixed = f.Name
		}
	})
	if best == "" {
		return prefixed
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
