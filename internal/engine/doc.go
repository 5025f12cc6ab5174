// Package engine holds the parts of a captchaq.Queue that own their state
// without the Queue: each is a type with its own fields and lock, built
// from what it uses of the queue (a host of functions), never a pointer
// to the Queue. They speak the shared values of package captchaqtype, so
// the root package (the API) imports them and none imports the root.
//
// Reservoirs is the queue's side of its reservoirs: the checks of their
// config, the draw at intake, the refill loop and a refill's result.
// Metrics builds the queue's snapshot from its counters, lanes and
// waiting tasks. TaskProxy is a task's proxy as a provider taking only
// public IP addresses is sent it. Refusals keeps the providers'
// refusals of types in a Store that keeps state.
// docs/engine.md describes every part and its lock.
package engine
