package tasktest

import (
	"maps"
	"sync"

	"github.com/captchaq/captchaq/internal/checks"
)

// Checks counts, by kind, the checks (internal/checks) of the tasks match
// picks by their params, from now until stop is called: how a door's test
// proves the door validates a task once.
func Checks(match func(params map[string]string) bool) (counts func() map[checks.Kind]int, stop func()) {
	var mu sync.Mutex
	n := map[checks.Kind]int{}
	stop = checks.Watch(func(k checks.Kind, params map[string]string) {
		if match(params) {
			mu.Lock()
			n[k]++
			mu.Unlock()
		}
	})
	return func() map[checks.Kind]int {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(n)
	}, stop
}
