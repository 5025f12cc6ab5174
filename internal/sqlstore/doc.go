// Package sqlstore holds what the two SQL stores, store/sqlite and
// store/postgres, do alike: the prune loop (Pruner). Each store keeps its
// SQL dialect and its statements.
package sqlstore
