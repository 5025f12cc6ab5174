package postgres

import (
	"context"
	"time"
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

// announceBuffer bounds the events waiting to be sent; past it an event
// is dropped (and logged).
const announceBuffer = 8192

// announceBatch bounds the events one statement sends.
const announceBatch = 1000

// announceTimeout bounds one statement.
const announceTimeout = 5 * time.Second

// announce queues an event for the other Stores on the database.
func (s *Store) announce(kind EventKind, id string) {
	select {
	case s.announced <- s.instance + ":" + string(kind) + ":" + id:
	default:
		s.log.Warn("postgres store: too many events waiting to be announced; the other processes miss this one", "store", s.name, "id", id)
	}
}

// announceLoop sends the queued events until ctx ends, then those still
// queued.
func (s *Store) announceLoop(ctx context.Context) {
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

func (s *Store) send(payloads []string) {
	ctx, cancel := context.WithTimeout(context.Background(), announceTimeout)
	defer cancel()
	if _, err := s.pool.Exec(ctx, `SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p`, notifyChannel, payloads); err != nil {
		s.log.Warn("postgres store: announcing tasks to the other processes failed; they miss these", "store", s.name, "events", len(payloads), "err", err)
	}
}
