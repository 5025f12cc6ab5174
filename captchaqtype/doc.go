// Package captchaqtype holds the values a captchaq queue shares with
// everything around it: Task and ValidTask, Result, Status and Record,
// the queue's errors and codes, the Store interfaces (Store,
// PingbackLedger, StateStore, ReservoirStore, Journal), Fleet and
// ThreadPool, Provider and ProviderConfig, ReservoirConfig and the
// Metrics snapshot, with their methods (validation, JSON, the id rule).
//
// Package captchaq declares each of them again under the same name (a
// type alias, or the same constant, variable or function), so a program
// imports captchaq alone. This package is the leaf they live in so that
// the engine's parts under internal/ speak the same types without
// importing the root package (which imports them). Its name is the
// module's with "type" after it, as River's rivertype: it names no
// concept of its own, and it shadows no variable named task or store.
//
// A name in these docs that this package does not declare (Config,
// Queue, Queue.Submit, NewFleetQueue, MemoryStore, PingbackHandler) is
// package captchaq's.
package captchaqtype
