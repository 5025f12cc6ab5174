package engine

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"

	"github.com/captchaq/captchaq/captchaqtype"
	"github.com/captchaq/captchaq/internal/lane"
)

// refusalsState is the name the lanes' refusals are stored under
// (StateStore).
const refusalsState = "type_refusals"

// Refusals keeps the lanes' refusals of types in a Store that keeps
// state, so a restarted queue does not pay a refused submit again for
// each; with a Store that is no StateStore they live in memory only.
type Refusals struct {
	lanes *lane.Set
	store captchaqtype.StateStore // nil: none
	log   *slog.Logger
	// mu orders the writes of the lanes' refusals to the Store.
	mu sync.Mutex
}

// NewRefusals keeps lanes' refusals in store when it is a StateStore.
func NewRefusals(lanes *lane.Set, store captchaqtype.Store, log *slog.Logger) *Refusals {
	ss, _ := store.(captchaqtype.StateStore)
	return &Refusals{lanes: lanes, store: ss, log: log}
}

// Save stores the lanes' refusals.
func (r *Refusals) Save(ctx context.Context) {
	if r.store == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b, _ := json.Marshal(r.lanes.Refusals())
	if err := r.store.SaveState(ctx, refusalsState, b); err != nil {
		r.log.Error("storing the providers' refusals of types failed", "err", err)
	}
}

// Load gives the lanes back the refusals Save stored.
func (r *Refusals) Load(ctx context.Context) error {
	if r.store == nil {
		return nil
	}
	b, err := r.store.LoadState(ctx, refusalsState)
	if err != nil || b == nil {
		return err
	}
	var rs []lane.Refusal
	if err := json.Unmarshal(b, &rs); err != nil {
		r.log.Warn("stored refusals of types unreadable; starting without them", "err", err)
		return nil
	}
	for _, l := range r.lanes.Lanes() {
		l.Refusals.Restore(rs)
	}
	return nil
}
