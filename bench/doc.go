// Package bench measures the queue engine against a faithful model of the
// seed articles' per-task polling loop, on identical simulator settings, and
// reports the two side by side.
package bench
