package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/captchaq/captchaq/internal/startstop"
)

// Announcements. A NOTIFY inside a writing transaction holds PostgreSQL's
// notification lock from before the commit until after its WAL flush, so
// every notifying commit of the database waits for the one before it:
// one fsync at a time, where plain commits share theirs (group commit).
// Measured with two replicas, that capped the front at a few hundred
// tasks a second with in.php at a second or more. So a Store announces
// after its write has committed, in batches: announce queues the event,
// and the announcer sends what is queued in one statement (a transaction
// that writes nothing, so needs no flush) as soon as the last one is
// done. The cost: an event comes a round trip later, and a process that
// dies between a commit and its announcement leaves the others without
// it, as a NOTIFY that fails does, until their next periodic read of the
// unfinished tasks (doc.go).

// events announces this Store's changes to the other Stores on the
// database and watches theirs (Watch).
type events struct {
	*db
	instance string // this Store among those on the database (Event)
	notify   bool   // Config.Notify

	// announced carries the events to announce to the other Stores;
	// announcer sends them.
	announced chan string
	announcer *startstop.Loop

	mu      sync.Mutex
	watcher *startstop.Loop // Watch's; nil until it is called
}

// announceBuffer bounds the events waiting to be sent; past it an event
// is dropped (and logged).
const announceBuffer = 8192

// announceBatch bounds the events one statement sends.
const announceBatch = 1000

// announceTimeout bounds one statement.
const announceTimeout = 5 * time.Second

// announce queues an event for the other Stores on the database.
func (s *events) announce(kind EventKind, id string) {
	select {
	case s.announced <- s.instance + ":" + string(kind) + ":" + id:
	default:
		s.log.Warn("postgres store: too many events waiting to be announced; the other processes miss this one", "store", s.name, "id", id)
	}
}

// announceLoop sends the queued events until ctx ends, then those still
// queued.
func (s *events) announceLoop(ctx context.Context) {
	batch := make([]string, 0, announceBatch)
	for {
		select {
		case <-ctx.Done():
			for {
				select {
				case p := <-s.announced:
					batch = append(batch, p)
					if len(batch) == announceBatch {
						s.send(batch)
						batch = batch[:0]
					}
				default:
					if len(batch) > 0 {
						s.send(batch)
					}
					return
				}
			}
		case p := <-s.announced:
			batch = append(batch[:0], p)
		more:
			for len(batch) < announceBatch {
				select {
				case p := <-s.announced:
					batch = append(batch, p)
				default:
					break more
				}
			}
			s.send(batch)
		}
	}
}

func (s *events) send(payloads []string) {
	ctx, cancel := context.WithTimeout(context.Background(), announceTimeout)
	defer cancel()
	if _, err := s.pool.Exec(ctx, `SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p`, notifyChannel, payloads); err != nil {
		s.log.Warn("postgres store: announcing tasks to the other processes failed; they miss these", "store", s.name, "events", len(payloads), "err", err)
	}
}

// notifyChannel is the LISTEN/NOTIFY channel of task events. A payload
// is INSTANCE:KIND:ID, INSTANCE the Store that wrote it.
const notifyChannel = "captchaq_tasks"

// EventKind says what happened to a task.
type EventKind byte

// Event kinds.
const (
	// EventAccepted: another Store enqueued the task (Config.Notify).
	EventAccepted EventKind = 'a'
	// EventFinished: another Store finished the task (FinishIf).
	EventFinished EventKind = 'f'
	// EventResync: the listening connection was lost and is back; events
	// of the time between are lost, so read again what matters.
	EventResync EventKind = 'r'
)

// Event is a change another Store on the database made.
type Event struct {
	Kind EventKind
	ID   string
}

// newInstance names a Store among those that share a database.
func newInstance() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Watch starts calling fn, on one goroutine of the store, with each task
// another Store on the database accepted (when it has Config.Notify) or
// finished (FinishIf). It listens on a connection of its own (not one of
// the pool's); when that connection drops it opens another, once a second
// until it can, and then calls fn with EventResync. Call it once; Close
// stops it. It returns once the first connection listens (or its first
// try failed, or listenWait passed): a task another Store accepts after
// that is told, unless its announcement is lost (see the package doc),
// which no event tells.
func (s *events) Watch(fn func(Event)) error {
	if s.closed.Load() {
		return ErrClosed
	}
	s.mu.Lock()
	if s.watcher != nil {
		s.mu.Unlock()
		return errors.New("postgres: Watch called twice")
	}
	first := make(chan struct{})
	ready := sync.OnceFunc(func() { close(first) })
	s.watcher = startstop.New(func(ctx context.Context) { s.listen(ctx, fn, ready) })
	err := s.watcher.Start(context.Background())
	s.mu.Unlock()
	if err != nil {
		return err
	}
	select {
	case <-first:
	case <-time.After(listenWait):
	}
	return nil
}

// relistenAfter is the pause before the watcher takes a new connection.
const relistenAfter = time.Second

// listenWait bounds Watch's wait for its first connection to listen.
const listenWait = 30 * time.Second

// listen listens until ctx ends, calling ready once the first connection
// listens or fails.
func (s *events) listen(ctx context.Context, fn func(Event), ready func()) {
	defer ready()
	for first := true; ctx.Err() == nil; first = false {
		err := s.listenOnce(ctx, fn, !first, ready)
		ready()
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("postgres store: listening for other processes' tasks failed; trying again", "store", s.name, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(relistenAfter):
		}
	}
}

func (s *events) listenOnce(ctx context.Context, fn func(Event), resync bool, listening func()) error {
	// A connection of its own, not the pool's: it waits all the time.
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
		return err
	}
	listening()
	if resync {
		fn(Event{Kind: EventResync})
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		inst, rest, ok := strings.Cut(n.Payload, ":")
		if !ok || inst == s.instance {
			continue
		}
		kind, id, ok := strings.Cut(rest, ":")
		if !ok || len(kind) != 1 {
			continue
		}
		fn(Event{Kind: EventKind(kind[0]), ID: id})
	}
}
