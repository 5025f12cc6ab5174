// Package checkspy counts the checks a task goes through on its way to a
// provider, for the tests that prove a door validates a task once and
// the steps after it carry the validated form (validate.go). Nothing
// watches in production: Count is one atomic load.
package checkspy

import (
	"maps"
	"sync"
	"sync/atomic"
)

// Kind is what was checked.
type Kind string

const (
	// Queue is captchaq's Task.check: the queue's own fields.
	Queue Kind = "queue"
	// Provider is provider.Task's validation: type and params.
	Provider Kind = "provider"
	// Decode is a task's base64 image decoded.
	Decode Kind = "decode"
)

var (
	watching atomic.Bool
	mu       sync.Mutex
	watchers = map[*func(Kind, map[string]string)]struct{}{}
)

// Count tells the watchers that a task of these params went through a
// check of kind k.
func Count(k Kind, params map[string]string) {
	if !watching.Load() {
		return
	}
	mu.Lock()
	defer mu.Unlock()
	for fn := range watchers {
		(*fn)(k, params)
	}
}

// Watch calls fn for every check from now until stop is called, from
// any goroutine, one call at a time; fn filters the tasks it counts by
// their params (a value of the test's own).
func Watch(fn func(k Kind, params map[string]string)) (stop func()) {
	mu.Lock()
	defer mu.Unlock()
	watchers[&fn] = struct{}{}
	watching.Store(true)
	return func() {
		mu.Lock()
		defer mu.Unlock()
		delete(watchers, &fn)
		watching.Store(len(watchers) > 0)
	}
}

// Tally counts, by kind, the checks of the tasks match picks by their
// params, from now until stop is called.
func Tally(match func(params map[string]string) bool) (counts func() map[Kind]int, stop func()) {
	var tmu sync.Mutex
	n := map[Kind]int{}
	stop = Watch(func(k Kind, params map[string]string) {
		if match(params) {
			tmu.Lock()
			n[k]++
			tmu.Unlock()
		}
	})
	return func() map[Kind]int {
		tmu.Lock()
		defer tmu.Unlock()
		return maps.Clone(n)
	}, stop
}
