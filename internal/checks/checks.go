// Package checks is where a process says which checks a task goes through
// on its way to a provider: the queue's own fields (Task.check in
// captchaqtype/validate.go), the provider's params (provider.Task's
// validation) and a post or base64 task's image decoded (provider). Each
// of them calls Count with the task's params; Watch sees every call.
//
// A task is checked once per process, at the door it comes in by
// (captchaqtype/validate.go): Watch is how that is observed, by the tests
// that hold it (internal/tasktest.Checks counts by kind for the tasks a
// test picks by their params). Checks are pure functions of a task, not of a Queue, so
// they are seen here, process-wide, and not in a Queue's Metrics. With no
// watcher, Count is one atomic load.
package checks

import (
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
// any goroutine, one call at a time; fn tells the tasks it is after by
// their params. fn must not modify params.
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
