package amqp

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/captchaq/captchaq"
)

// stateTimeout bounds one read or write of the fleet's state.
const stateTimeout = 10 * time.Second

// stateQueueArgs are Names.State's arguments: the newest message
// replaces the one before.
func stateQueueArgs() amqp091.Table {
	return amqp091.Table{"x-queue-type": "classic", "x-max-length": int32(1), "x-overflow": "drop-head"}
}

// fleetState is a worker queue's store: the worker's memory store, and a
// captchaq.StateStore on the broker, so the small values a queue keeps
// across restarts (its providers' refusals of types) are the fleet's. They
// are one message in Names.State, every name's value in it, the newest
// replacing the one before. A worker's queue loads it when it starts: a
// worker started after another learned that a provider refuses a type
// sends that provider no task of it until the hold ends. A worker saves
// its own values when they change, replacing what another saved: the
// workers agree on the providers (Routing), and a refusal lost that way
// costs a worker that starts later one refused submit.
type fleetState struct {
	*captchaq.MemoryStore
	c   *Conn
	log *slog.Logger

	mu     sync.Mutex
	values map[string][]byte // as last loaded or saved
}

var _ captchaq.StateStore = (*fleetState)(nil)

// LoadState implements captchaq.StateStore: name's value in the message
// Names.State holds (put back at once), or nil. A message that cannot be
// read is logged and taken as none, so the worker starts without it.
func (s *fleetState) LoadState(ctx context.Context, name string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, stateTimeout)
	defer cancel()
	values, err := s.read(ctx)
	if err != nil {
		s.log.Warn("the fleet's state on the broker is not readable; starting without it", "err", err)
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.values = values
	return values[name], nil
}

func (s *fleetState) read(ctx context.Context) (map[string][]byte, error) {
	ch, _, err := s.c.channel(ctx)
	if err != nil {
		return nil, err
	}
	defer ch.Close()
	m, ok, err := ch.Get(s.c.Names().State, false)
	if err != nil || !ok {
		return nil, err
	}
	var values map[string][]byte
	if err := json.Unmarshal(m.Body, &values); err != nil {
		return nil, fmt.Errorf("amqp: %s: %w", s.c.Names().State, err)
	}
	return values, m.Nack(false, true)
}

// SaveState implements captchaq.StateStore: the values last loaded or
// saved, with name's replaced, published to Names.State (persistent,
// confirmed).
func (s *fleetState) SaveState(ctx context.Context, name string, value []byte) error {
	ctx, cancel := context.WithTimeout(ctx, stateTimeout)
	defer cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	next := maps.Clone(s.values)
	if next == nil {
		next = map[string][]byte{}
	}
	next[name] = value
	body, err := json.Marshal(next)
	if err != nil {
		return err
	}
	ch, _, err := s.c.channel(ctx)
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("amqp: %s: %w", s.c.Names().State, err)
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", s.c.Names().State, false, false, amqp091.Publishing{
		ContentType: contentTypeJSON, DeliveryMode: amqp091.Persistent, Timestamp: time.Now(), Body: body,
	})
	if err != nil {
		return fmt.Errorf("amqp: %s: %w", s.c.Names().State, err)
	}
	if ok, err := dc.WaitContext(ctx); err != nil || !ok {
		return fmt.Errorf("amqp: %s: not confirmed (%v)", s.c.Names().State, err)
	}
	s.values = next
	return nil
}
