package amqp

import (
	"maps"
	"slices"
	"sync"
	"time"
)

// holdings is what a worker holds: the entries of its tasks by id, the
// claims it heard lately and its copies whose transaction's outcome is
// not known, under one lock, as a task's entry, claim and copy are read
// and changed together (WorkerStore.receive, claimed, holdCheckpoint,
// letGo).
type holdings struct {
	mu      sync.Mutex
	entries map[string]*entry
	// claims are the ids other workers claimed lately, by when heard.
	claims map[string]time.Time
	// uncommitted are the copies whose transaction's outcome is not
	// known, by task id (see WorkerStore.parkWith): such a copy that
	// comes to this worker goes to the fleet.
	uncommitted map[string]uncommittedCopy
}

// unsureAcks are the task deliveries acked at their task's first
// checkpoint whose connection has not yet been heard from ackUnsure
// after the ack, by task id (see lost), under their own lock.
type unsureAcks struct {
	mu   sync.Mutex
	acks map[string]unsureAck
}

// storeHooks are a WorkerStore's test hooks; each, when set, runs at its
// step.
type storeHooks struct {
	// afterFirstConfirm runs between a task's first checkpoint's confirm
	// and the acks of its task deliveries.
	afterFirstConfirm func(id string)
	// afterLetGo runs once Finish has let go of a task the fleet holds
	// now, before the queue forgets it.
	afterLetGo func(id string)
	// beforeCommit runs once a transaction's messages are sent on a
	// holder's channel (Finish's answer, parkWith's copy), before its
	// commit.
	beforeCommit func(id string)
}

// unmarkLost undoes letGo for a task the queue could not let go of now
// (its submit was being answered): the next sweep decides again.
func (h *holdings) unmarkLost(id string) {
	h.mu.Lock()
	if e, ok := h.entries[id]; ok {
		e.lost = false
	}
	h.mu.Unlock()
}

// admit reports whether a task may be submitted: the broker's copy of it
// is still this worker's, as a confirmed checkpoint or a task delivery on
// a live channel. A task whose deliveries all came on channels that died
// is back in its queue for the fleet; submitting it would solve it twice
// (the stale sweeper hands it back).
func (h *holdings) admit(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.entries[id]
	if !ok || e.handback {
		return false
	}
	if e.confirmed > 0 {
		return true
	}
	for _, d := range e.deliveries {
		if d.live() {
			return true
		}
	}
	return false
}

// waits reports whether id is held waiting, not yet given to the queue.
func (h *holdings) waits(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.entries[id]
	return ok && e.waiting
}

// endWait ends the wait of id; false when a claim dropped it meanwhile.
func (h *holdings) endWait(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.entries[id]
	if !ok || !e.waiting {
		return false
	}
	e.waiting = false
	return true
}

func (h *holdings) unmarkClaimed(id string) {
	h.mu.Lock()
	if e, ok := h.entries[id]; ok && e.claimed {
		e.handback, e.claimed = false, false
	}
	h.mu.Unlock()
}

// drop forgets an entry whose task never reached the queue.
func (h *holdings) drop(id string) {
	h.mu.Lock()
	delete(h.entries, id)
	h.mu.Unlock()
}

// ids lists the tasks held.
func (h *holdings) ids() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Collect(maps.Keys(h.entries))
}

// liveHeld counts the live deliveries held for task id.
func (h *holdings) liveHeld(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.entries[id]
	if !ok {
		return 0
	}
	n := 0
	for _, d := range e.deliveries {
		if d.live() {
			n++
		}
	}
	for _, d := range e.checkpoints {
		if d.live() {
			n++
		}
	}
	return n
}

// held returns the entry of task id, nil when none is held.
func (h *holdings) held(id string) *entry {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.entries[id]
}

// orphaned reports whether e, the entry of task id when the queue took
// it, is still held with no Finish of its own begun, after the queue's
// task of that id finished: the queue took the delivery as one more
// waiter of a task it was finishing (the entry before e was let go of
// and forgotten, and the queue not yet), and no Finish for e will come.
func (h *holdings) orphaned(id string, e *entry) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return e != nil && h.entries[id] == e && !e.finishing && !e.handback
}

// markHandBack flags a task so that its coming Finish hands it back
// instead. It returns false for a task that already has a confirmed
// checkpoint or none held.
func (h *holdings) markHandBack(id string, onlyStale bool) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.entries[id]
	if !ok || e.handback {
		return false
	}
	if onlyStale {
		if e.confirmed > 0 || len(e.deliveries) == 0 {
			return false
		}
		for _, d := range e.deliveries {
			if d.live() {
				return false
			}
		}
	} else if e.msg.CaptchaID != "" {
		return false
	}
	e.handback = true
	return true
}

func (h *holdings) unmarkHandBack(id string) {
	h.mu.Lock()
	if e, ok := h.entries[id]; ok {
		e.handback = false
	}
	h.mu.Unlock()
}

// lost returns the tasks whose task delivery's ack, sent when their
// first checkpoint was confirmed, may have died with its connection: the
// connection ended before it was heard from ackUnsure after the ack. The
// broker then gives the task back to the fleet while this worker's
// checkpoint carries it on, so the caller claims it: a worker that
// received the copy again drops it instead of solving it a second time,
// even when this worker has answered the task by then. An ack whose
// connection was heard from past ackUnsure is forgotten.
func (u *unsureAcks) lost(c *Conn) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	var ids []string
	for id, a := range u.acks {
		sure, lost := true, false
		for _, d := range a.deliveries {
			switch {
			case c.lastHeard(d.epoch).Sub(a.at) > ackUnsure:
			case !d.sess.ended().IsZero():
				lost = true
			default:
				sure = false
			}
		}
		if lost {
			ids = append(ids, id)
		}
		if lost || sure {
			delete(u.acks, id)
		}
	}
	return ids
}
