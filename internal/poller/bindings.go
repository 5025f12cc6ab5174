package poller

import (
	"time"

	"github.com/captchaq/captchaq/provider"
)

// probeMisses is how many polls of one id alone, each answering no
// bindings, show that a provider answers a kind without them.
const probeMisses = 3

// binds is a kind's count of misses once a poll alone brought bindings.
const binds = -1

// chunksOf splits the ids due in a round into requests: ids= requests
// of up to Chunk ids, and one request each for the ids polled alone.
func chunksOf[T any](due []*entry[T]) [][]*entry[T] {
	var bulk, chunks [][]*entry[T]
	var rest []*entry[T]
	for _, e := range due {
		if e.alone {
			chunks = append(chunks, []*entry[T]{e})
			continue
		}
		rest = append(rest, e)
	}
	for start := 0; start < len(rest); start += Chunk {
		bulk = append(bulk, rest[start:min(start+Chunk, len(rest))])
	}
	return append(bulk, chunks...)
}

// lastPollLocked reports whether e, polled in the round that started at
// sent, may not be polled again: its budget is spent, or its window ends
// within two rounds. Its ready token is taken as it is.
func (p *Poller[T]) lastPollLocked(e *entry[T], sent time.Time) bool {
	end := p.endLocked(e)
	return !end.IsZero() && end.Before(sent.Add(2*max(p.cfg.Repoll, p.cfg.PollInterval, p.cfg.PollGap, p.cfg.Rule)))
}

// holdForBindingsLocked decides whether e's ready answer r, polled in a
// round that started at sent, waits for a poll of e's id alone, and
// learns from such a poll's answer. An ids= request answers a token
// alone: one of a kind that may be bound to a user agent, cookies or a
// proxy (provider.MayBind) waits, and e's id goes alone in a later round,
// no sooner than its poll gap allows, in a request of its own: its json=1
// answer carries them. That is one request more per such task, while the
// provider shows it answers the kind with bindings; a kind whose polls
// alone brought none probeMisses times is taken from the ids= answer, and
// until then one id of the kind at a time probes it, the others waiting
// for the next round. A reCAPTCHA v2's cookies come back only for a task
// given some: such a task (Track's given) goes alone whatever its kind's probes
// showed.
func (p *Poller[T]) holdForBindingsLocked(e *entry[T], r provider.PollResult, sent time.Time) bool {
	k := e.kind
	if e.alone {
		if got := !provider.BindingsOf(r.Answer.JSON).Empty(); got {
			p.misses[k] = binds
		} else if p.misses[k] != binds {
			p.misses[k]++
		}
		if p.probes[k] == e {
			delete(p.probes, k)
		}
		return false
	}
	if !r.Bulk || !provider.MayBind(k) || !provider.BindingsOf(r.Answer.JSON).Empty() || p.lastPollLocked(e, sent) {
		return false
	}
	switch n := p.misses[k]; {
	case e.given:
		e.alone = true
	case n >= probeMisses:
		return false
	case n == binds:
		e.alone = true
	default:
		if pr := p.probes[k]; pr == nil || p.tasks[pr.id] != pr {
			p.probes[k] = e
			e.alone = true
		}
	}
	// due again with its round, as a task not ready
	e.due = sent.Add(p.cfg.Repoll)
	return true
}
