package server

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/captchaq/captchaq"
)

// idMaker hands out the numeric ids of tasks that come without one: from
// the clock's counter, or from the blocks of an IDSource, each counter
// permuted (idperm.go).
type idMaker struct {
	clock    atomic.Uint64 // the last counter of a clock id handed out
	localIDs *idPerm       // the clock counter's permutation
	store    Backend       // where a clock id is looked up (freshID)

	mu        sync.Mutex
	source    IDSource // nil: ids from the clock
	next, end uint64   // with source: the next id of the block taken, and its end
	sharedIDs *idPerm  // the IDSource's, with its key
}

// newIDMaker starts the clock's counter at the clock in microseconds,
// under a key drawn here; an id that names a stored task is skipped
// (freshID). source may be nil.
func newIDMaker(store Backend, source IDSource) *idMaker {
	m := &idMaker{store: store, source: source, localIDs: randomIDPerm()}
	m.clock.Store(uint64(time.Now().UnixMicro()))
	return m
}

// newID hands out a numeric id: from the clock, or from the blocks of the
// Backend's IDSource (shared: no process on the front handed it out
// before), each counter permuted (idperm.go says why).
func (m *idMaker) newID(ctx context.Context) (id string, shared bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.source == nil {
		return m.localID(), false, nil
	}
	if m.next >= m.end {
		first, n, err := m.source.IDBlock(ctx)
		if err != nil {
			return "", false, err
		}
		if n == 0 {
			m.source = nil // no shared ids: the clock's
			return m.localID(), false, nil
		}
		if m.sharedIDs == nil {
			key, err := m.source.IDKey(ctx)
			if err != nil {
				return "", false, err
			}
			if m.sharedIDs, err = newIDPerm(key); err != nil {
				return "", false, err
			}
		}
		m.next, m.end = first, first+uint64(n)
	}
	next := m.next
	m.next++
	return strconv.FormatUint(m.sharedIDs.id(next), 10), true, nil
}

// localID is the id of the clock counter's next value.
func (m *idMaker) localID() string {
	return strconv.FormatUint(m.localIDs.id(m.clock.Add(1)), 10)
}

// freshIDTries bounds the stored ids one request skips.
const freshIDTries = 1000

// errNoFreshID: every id tried names a stored task.
var errNoFreshID = errors.New("the ids tried all name stored tasks: try again")

// freshID hands out a numeric id that names no stored task of client.
// The clock's ids are under a key of this process, and the clock may read
// earlier than at the last run's: an id may name a task the store holds,
// and would answer a new task with an old one's result (or refuse it as a
// conflict), so it is looked up and skipped. An id
// of the IDSource's blocks is never handed out twice, and is not looked
// up: one store round trip less a submit on a front's replica (a client
// that chose such an id for a task of its own through the API finds its
// in.php with another task refused as a conflict by the Backend).
// isNew says the id came from the IDSource: no process handed it out
// before (see NewSubmitter).
func (m *idMaker) freshID(ctx context.Context, client string) (id string, isNew bool, err error) {
	for range freshIDTries {
		id, shared, err := m.newID(ctx)
		if err != nil || shared {
			return id, shared, err
		}
		_, err = m.store.Get(ctx, storeID(client, id))
		if errors.Is(err, captchaq.ErrNotFound) {
			return id, false, nil
		}
		if err != nil {
			return "", false, err
		}
	}
	return "", false, errNoFreshID
}
