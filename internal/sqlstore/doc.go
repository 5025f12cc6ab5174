// Package sqlstore holds what the two SQL stores, store/sqlite and
// store/postgres, do alike: the prune loop (Pruner); the task row both
// insert (TaskRow); the columns of a record and how a scanned row becomes
// one (RecordColumns, ScanRecord); the reading of a query's records
// (Each); the reading of a StateStore's value (LoadState); and the naming
// of the store in its errors (Wrap). For reservoirs' tokens: their
// columns (TokenColumns), the arguments of their insert, checked with
// Result.CheckStockable (TokenArgs, with the store's Encoder), the
// reading of one (ScanToken) and of the counts (Counts).
//
// Each store keeps its SQL dialect: its statements, and how it holds a
// time (timestamptz, or fixed-width text) and Result.Abandoned (text[],
// or JSON text), which it gives ScanRecord as a Decoder.
package sqlstore
