package amqp

import (
	"context"
	"errors"
	"time"

	"github.com/captchaq/captchaq"
)

// AttachReplicas sets the functions told of what the other gateways of a
// shared store recorded (server.Replicated): accepted with each task
// another accepted (its record, without Task.Params on a HeadReader),
// finished with each result another stored (that gateway told its own
// server; its pingback is its own). Call it before Start.
func (g *Gateway) AttachReplicas(accepted func(captchaq.Record), finished func(captchaq.Result)) error {
	return g.life.beforeStart("AttachReplicas", func() { g.replicas.attach(accepted, finished) })
}

// Shared says whether the gateway's Store is shared with other gateways
// (a FrontStore).
func (g *Gateway) Shared() bool { return g.shared != nil }

// IDBlock hands out numeric ids from the shared store (server.IDSource),
// so the replicas of a front never hand out one id twice; none (n = 0)
// when the store is the gateway's own.
func (g *Gateway) IDBlock(ctx context.Context) (uint64, int, error) {
	if g.shared == nil {
		return 0, 0, nil
	}
	return g.shared.IDBlock(ctx)
}

// IDKey is the shared store's key of the ids (server.IDSource): every
// gateway of the front permutes the blocks' numbers with it.
func (g *Gateway) IDKey(ctx context.Context) ([]byte, error) {
	if g.shared == nil {
		return nil, errors.New("amqp: no shared store, no id key")
	}
	return g.shared.IDKey(ctx)
}

// OtherAccepted tells the gateway that another gateway of the front
// accepted task id: it counts toward the client's fair share here, and
// the server is told (AttachReplicas). A task already final when the news
// is read (it came late) is told too, as accepted and not unfinished.
// When the record cannot be read (the store is unreachable), the id is
// kept and the next Resync reads it again and tells it, so the front's
// counts heal even when the task is final by then.
func (g *Gateway) OtherAccepted(ctx context.Context, id string) { g.replicas.acceptedID(ctx, id) }

// OtherFinished tells the gateway that another gateway of the front
// stored task id's result: it is no longer unfinished here, it counts in
// the front's numbers, and the server is told (AttachReplicas), which
// wakes its long polls and event streams.
func (g *Gateway) OtherFinished(ctx context.Context, id string) { g.replicas.finishedID(ctx, id) }

// Resync reads the store's unfinished tasks again, after the news of the
// other gateways may have been missed (the shared store's listening
// connection was lost): a task it holds unfinished whose result is stored
// is told as finished, a task it did not know as accepted, and one no
// longer stored (pruned) is let go. On a HeadReader it reads no task's
// Params: one read of the unfinished tasks' ids, states and times, and
// one of the records of those it holds that are no longer unfinished.
func (g *Gateway) Resync(ctx context.Context) error { return g.replicas.resyncBefore(ctx, time.Time{}) }

// HeadReader is a FrontStore that reads records without their tasks'
// Params, an image task's body (store/postgres does). What the gateway
// reads of the others' news, and what Resync reads every ResyncEvery,
// are states and times: on a store that cannot, it reads whole records.
type HeadReader interface {
	// PendingHeads is Pending with each record's Task.Params nil.
	PendingHeads(ctx context.Context, fn func(captchaq.Record) error) error
	// Heads calls fn with the record of each of ids that is stored, its
	// Task.Params nil, in one read; an id not stored is left out.
	Heads(ctx context.Context, ids []string, fn func(captchaq.Record) error) error
}

// AdmitStore is a FrontStore that keeps clients' max_inflight and rate
// across the gateways of a front (store/postgres does).
type AdmitStore interface {
	// Admit lets ids of tenant in within max unfinished tasks of the
	// whole front (0: no bound) and rate tasks a second in bursts of
	// burst (0: no bound), taking both or neither: false, with how many
	// it has and, refused by the rate, how long until it has room.
	Admit(ctx context.Context, tenant string, ids []string, max int, rate float64, burst int) (ok bool, held int, wait time.Duration, err error)
	// FreeSlots gives back the room of ids that were not accepted.
	FreeSlots(ctx context.Context, ids []string) error
}

// Admit lets ids of tenant in within its max_inflight and rate across the
// front (server.FrontLimiter): ok with nothing taken when the store is
// the gateway's own (Shared is false), whose server's counts are exact
// already.
func (g *Gateway) Admit(ctx context.Context, tenant string, ids []string, max int, rate float64, burst int) (ok bool, held int, wait time.Duration, err error) {
	as, shared := g.shared.(AdmitStore)
	if !shared {
		return true, 0, 0, nil
	}
	return as.Admit(ctx, tenant, ids, max, rate, burst)
}

// FreeSlots gives back what Admit took for ids that were not accepted.
func (g *Gateway) FreeSlots(ctx context.Context, ids []string) error {
	if as, shared := g.shared.(AdmitStore); shared {
		return as.FreeSlots(ctx, ids)
	}
	return nil
}
