package amqp

import (
	"encoding/hex"
	"sync"

	"github.com/captchaq/captchaq"
)

// idMemoryDefault is how many finished ids a worker remembers the task of
// (by fingerprint) for its id-conflict check: about 120 bytes each, some
// 24 MB at this bound, and far past the results its MemoryStore keeps
// (captchaq.MaxFinishedDefault).
const idMemoryDefault = 200_000

// idMemory remembers the fingerprints of the last ids a worker finished,
// in a ring of fixed size: bounded by design, whatever the run's length.
// An id older than the ring is forgotten here; the producers check their
// own ids (a gateway against its Store, enqueue within its input).
type idMemory struct {
	mu   sync.Mutex
	byID map[string][32]byte
	ring []string // ids in finish order; next is the oldest once full
	next int
}

func newIDMemory(size int) *idMemory {
	return &idMemory{byID: make(map[string][32]byte), ring: make([]string, 0, min(size, 1024))}
}

// add remembers that id named the task t (a later finish of the same id
// replaces it).
func (m *idMemory) add(t captchaq.Task, size int) {
	var fp [32]byte
	hex.Decode(fp[:], []byte(t.Fingerprint()))
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.byID[t.ID]; ok {
		m.byID[t.ID] = fp
		return
	}
	if len(m.ring) < size {
		m.ring = append(m.ring, t.ID)
	} else {
		delete(m.byID, m.ring[m.next])
		m.ring[m.next] = t.ID
		m.next = (m.next + 1) % size
	}
	m.byID[t.ID] = fp
}

// conflict returns an *captchaq.IDConflictError when t's id is remembered
// for another task (captchaq.ConflictByFingerprint).
func (m *idMemory) conflict(t captchaq.Task) error {
	m.mu.Lock()
	fp, ok := m.byID[t.ID]
	m.mu.Unlock()
	if !ok {
		return nil
	}
	return captchaq.ConflictByFingerprint(t, hex.EncodeToString(fp[:]), "a task this worker finished had another method, params or proxy")
}
