// Package bench measures the queue engine against a faithful model of the
// seed articles' per-task polling loop, on identical simulator settings, and
// reports the two side by side. Fleet and Soak run the real processes
// instead: Fleet a worker fleet under one fault, Soak the whole deployment
// (workers, fronts on PostgreSQL, HAProxy) under a seeded schedule of
// faults, checking a ledger of every task against its invariants
// (docs/faults.md).
package bench
