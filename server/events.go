package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/captchaq/captchaq"
)

// eventBuffer is how many results a slow event stream may fall behind
// before it misses some (it is told with a "dropped" event).
const eventBuffer = 256

// broker fans results out to event streams (by client) and to long polls
// (by task id).
type broker struct {
	mu     sync.Mutex
	closed bool
	subs   map[*subscription]struct{}
	done   chan struct{}
}

type subscription struct {
	tenant string // "" with all: every client
	all    bool
	id     string // a long poll's task id
	ch     chan captchaq.Result
	drops  int
}

func newBroker() *broker {
	return &broker{subs: map[*subscription]struct{}{}, done: make(chan struct{})}
}

func (b *broker) add(s *subscription) *subscription {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		close(s.ch)
		return s
	}
	b.subs[s] = struct{}{}
	return s
}

func (b *broker) subscribeID(id string) *subscription {
	return b.add(&subscription{id: id, ch: make(chan captchaq.Result, 1)})
}

func (b *broker) subscribe(tenant string, all bool) *subscription {
	return b.add(&subscription{tenant: tenant, all: all, ch: make(chan captchaq.Result, eventBuffer)})
}

func (b *broker) unsubscribe(s *subscription) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.subs, s)
}

// publish never blocks: a full stream drops the result and counts it.
func (b *broker) publish(tenant string, r captchaq.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.subs {
		if s.id != "" && s.id != r.ID {
			continue
		}
		if s.id == "" && !s.all && s.tenant != tenant {
			continue
		}
		select {
		case s.ch <- r:
		default:
			s.drops++
		}
	}
}

func (b *broker) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.closed = true
		close(b.done)
	}
}

// sseKeepAlive is the interval of comment lines that keep proxies from
// closing an idle stream.
const sseKeepAlive = 15 * time.Second

func (s *apiSide) handleEvents(w http.ResponseWriter, r *http.Request, cs *clientState) {
	if !slot(w, &cs.streams, s.streams, s.cfg.MaxStreamsPerClient, s.cfg.MaxStreams, "event streams") {
		return
	}
	defer func() { cs.streams.give(1); s.streams.give(1) }()
	rc := http.NewResponseController(w)
	rc.SetWriteDeadline(time.Time{}) // a stream outlives WriteTimeout
	sub := s.events.subscribe(cs.Name, cs.Admin)
	defer s.events.unsubscribe(sub)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, ": connected\n\n")
	rc.Flush()
	tick := time.NewTicker(sseKeepAlive)
	defer tick.Stop()
	for {
		select {
		case res, ok := <-sub.ch:
			if !ok {
				return
			}
			bindings := s.eventBindings(r.Context(), res.ID, res)
			client, local := splitID(res.ID)
			if !cs.Admin || client == cs.Name {
				res.ID = local
			}
			b, _ := json.Marshal(resultJSON{Result: res, Bindings: bindings})
			if _, err := fmt.Fprintf(w, "event: result\ndata: %s\n\n", b); err != nil {
				return
			}
			s.events.mu.Lock()
			drops := sub.drops
			sub.drops = 0
			s.events.mu.Unlock()
			if drops > 0 {
				fmt.Fprintf(w, "event: dropped\ndata: {\"dropped\":%d}\n\n", drops)
			}
		case <-tick.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
		case <-r.Context().Done():
			return
		case <-s.events.done:
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}
