package amqp

import (
	"errors"
	"strings"
	"testing"

	"github.com/captchaq/captchaq"
)

// The worker's memory of finished ids is a ring: the same task under a
// remembered id passes, another task is refused naming the id, and an id
// pushed out by newer ones is forgotten, so memory stays bounded.
func TestIDMemoryBoundedRing(t *testing.T) {
	t.Parallel()
	m := newIDMemory(2)
	m.add(task("a", 0), 2)
	m.add(task("b", 0), 2)
	if err := m.conflict(task("a", 0)); err != nil {
		t.Fatalf("the same task under a: %v", err)
	}
	err := m.conflict(otherSite("a"))
	if !errors.Is(err, captchaq.ErrIDConflict) || !strings.Contains(err.Error(), `id "a"`) {
		t.Fatalf("another task under a: %v", err)
	}
	if err := m.conflict(otherSite("new")); err != nil {
		t.Fatalf("an unknown id: %v", err)
	}
	// A finish of a known id does not take a second place.
	m.add(task("b", 0), 2)
	m.add(task("c", 0), 2)
	if err := m.conflict(otherSite("a")); err != nil {
		t.Fatalf("a, pushed out by c: %v", err)
	}
	for _, id := range []string{"b", "c"} {
		if err := m.conflict(otherSite(id)); !errors.Is(err, captchaq.ErrIDConflict) {
			t.Fatalf("%s: %v", id, err)
		}
	}
	if len(m.byID) != 2 || len(m.ring) != 2 {
		t.Fatalf("%d ids, ring of %d; want 2 and 2", len(m.byID), len(m.ring))
	}
}
