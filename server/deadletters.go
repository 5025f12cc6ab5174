package server

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/captchaq/captchaq"
)

// deadLetters calls fn for the dead letters cs may see.
// A client's own are found by tenant (an index in the Store), not by
// reading every client's.
func (s *apiSide) deadLetters(ctx context.Context, cs *clientState, fn func(captchaq.Record) error) error {
	f := captchaq.DeadLetterFilter{All: true}
	if !cs.Admin {
		f.Tenant = cs.Name
	}
	return s.backend.DeadLetters(ctx, f, func(r captchaq.Record) error {
		if !cs.Admin && r.Task.Tenant != cs.Name {
			return nil
		}
		return fn(r)
	})
}

// errEnough stops an iteration that has what it needs.
var errEnough = errors.New("enough")

// replaySlot lets one replay of cs run at a time, and at most one start
// per Config.ReplayEvery; otherwise it answers 429 and returns false. The
// caller gives the slot back with cs.replays.give(1).
func (s *apiSide) replaySlot(w http.ResponseWriter, cs *clientState) bool {
	if !cs.replays.take(1, 1) {
		retryAfter(w, time.Second)
		apiFail(w, http.StatusTooManyRequests, "", "a replay of this client is running: wait for its answer")
		return false
	}
	now := time.Now()
	res := cs.replayRate.ReserveN(now, 1)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		cs.replays.give(1)
		retryAfter(w, d)
		apiFail(w, http.StatusTooManyRequests, "", fmt.Sprintf("a client replays at most once per %v: try again in %v", s.cfg.ReplayEvery, d.Round(time.Millisecond)))
		return false
	}
	return true
}

// deadLettersMax bounds one listing.
const deadLettersMax = 1000

func (s *apiSide) handleDeadLetters(w http.ResponseWriter, r *http.Request, cs *clientState) {
	out := []TaskView{}
	total := 0
	err := s.deadLetters(r.Context(), cs, func(rec captchaq.Record) error {
		total++
		if len(out) < deadLettersMax {
			out = append(out, view(rec, cs))
		}
		return nil
	})
	if err != nil {
		apiFail(w, http.StatusServiceUnavailable, "", "the store could not be read; try again shortly")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"dead_letters": out, "total": total})
}

func (s *apiSide) handleReplay(w http.ResponseWriter, r *http.Request, cs *clientState) {
	body, err := s.readClientBody(w, r, cs)
	if err != nil {
		if errors.Is(err, errBodiesBusy) {
			bodyRefused(w, err)
			return
		}
		apiFail(w, http.StatusBadRequest, "", "body could not be read: "+err.Error())
		return
	}
	var req struct {
		IDs []string `json:"ids"`
		All bool     `json:"all"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		apiFail(w, http.StatusBadRequest, "", `body: want {"ids":["…"]} or {"all":true}: `+err.Error())
		return
	}
	if req.All == (len(req.IDs) > 0) {
		apiFail(w, http.StatusBadRequest, "ids", `give either "ids" (a non-empty list) or "all": true`)
		return
	}
	if len(req.IDs) > s.cfg.MaxTasksPerRequest {
		apiFail(w, http.StatusRequestEntityTooLarge, "ids", fmt.Sprintf("ids: %d in one request; the server takes at most %d: split them", len(req.IDs), s.cfg.MaxTasksPerRequest))
		return
	}
	if !s.replaySlot(w, cs) {
		return
	}
	defer cs.replays.give(1)
	ids, more, aerr := s.replayTargets(r.Context(), cs, req.All, req.IDs)
	if aerr != nil {
		apiFail(w, cmp.Or(aerr.status, http.StatusBadRequest), aerr.Field, aerr.Error)
		return
	}
	replayed, held, err := s.replay(r.Context(), ids)
	if err != nil {
		s.log.Error("replay failed", "client", cs.Name, "replayed", len(replayed), "err", err)
		apiFail(w, http.StatusInternalServerError, "", fmt.Sprintf("the replay stopped (%d dead letters replayed): the store or the broker failed; try again shortly", len(replayed)))
		return
	}
	if held != nil && len(replayed) == 0 {
		retryAfter(w, held.retry)
		apiFail(w, http.StatusTooManyRequests, "", "no dead letter replayed: "+held.msg)
		return
	}
	views := make([]string, len(replayed))
	for i, id := range replayed {
		client, local := splitID(id)
		views[i] = local
		if cs.Admin && client != cs.Name {
			views[i] = id
		}
	}
	out := map[string]any{"replayed": len(replayed), "ids": views}
	if more {
		out["more"] = true
	}
	if held != nil {
		// Some were left as dead letters: replay counts against the
		// owner's max_inflight and rate like a new submit.
		out["held"] = held.n
		out["held_reason"] = held.msg
	}
	writeJSON(w, http.StatusOK, out)
}

// replayTargets is the Store ids a replay asks for: the client's dead
// letters, at most MaxTasksPerRequest of them (more: there are others),
// with all; else the ids given.
func (s *apiSide) replayTargets(ctx context.Context, cs *clientState, all bool, given []string) (ids []string, more bool, _ *apiError) {
	if !all {
		for _, id := range given {
			sid := visibleID(cs, id)
			if sid == "" {
				return nil, false, &apiError{Error: "ids: an id is empty", Field: "ids"}
			}
			ids = append(ids, sid)
		}
		return ids, false, nil
	}
	// At most MaxTasksPerRequest at once; "more" says to ask again.
	err := s.deadLetters(ctx, cs, func(rec captchaq.Record) error {
		if len(ids) == s.cfg.MaxTasksPerRequest {
			more = true
			return errEnough
		}
		ids = append(ids, rec.Task.ID)
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		s.log.Error("store read failed", "err", err)
		return nil, false, &apiError{Error: "the store could not be read; try again shortly", status: http.StatusServiceUnavailable}
	}
	return ids, more, nil
}

// Replay puts the dead letters with the given Store ids back to work
// (Backend.Replay: the local queue requeues them in the Store, attempts
// reset, and adopts each record). It returns the ids replayed.
//
// A replay counts against its owner's max_inflight and rate as a submit
// does: the dead letters past them stay dead letters, and Replay returns
// the ids it did replay.
func (s *Server) Replay(ctx context.Context, ids []string) ([]string, error) {
	replayed, _, err := s.api.replay(ctx, ids)
	return replayed, err
}

// replayHeld says how many dead letters a replay left over their owners'
// limits, and the first limit met.
type replayHeld struct {
	n     int
	msg   string
	retry time.Duration
}

func (s *apiSide) replay(ctx context.Context, ids []string) ([]string, *replayHeld, error) {
	if len(ids) == 0 {
		return nil, nil, nil
	}
	// Only ids that are dead letters now are replayed; they count as the
	// client's unfinished tasks before they run, so a quick result finds
	// them counted.
	var dead []string
	var held *replayHeld
	err := s.backend.DeadLetters(ctx, captchaq.DeadLetterFilter{IDs: ids}, func(r captchaq.Record) error {
		if cs := s.clients.byName[r.Task.Tenant]; cs != nil {
			if lerr := s.clients.reserve(ctx, cs, []string{r.Task.ID}); lerr != nil {
				if held == nil {
					held = &replayHeld{msg: lerr.msg, retry: lerr.retry}
				}
				held.n++
				return nil
			}
		}
		dead = append(dead, r.Task.ID)
		return nil
	})
	if err != nil || len(dead) == 0 {
		for _, id := range dead {
			s.clients.releaseID(id)
		}
		return nil, held, err
	}
	replayed, err := s.backend.Replay(ctx, dead)
	for _, id := range dead {
		if !slices.Contains(replayed, id) {
			s.clients.releaseID(id)
		}
	}
	return replayed, held, err
}
