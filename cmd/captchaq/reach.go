package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/captchaq/captchaq"
)

// unreachableStop is how many failures in a row, of a provider that never
// answered this run, stop batch and solve: a wrong --api-url or a
// provider that is down would otherwise be retried forever. With the
// default backoff five failures of one task take 7 to 15 s.
const unreachableStop = 5

// reachEvery is how often the watcher reads the queue's metrics.
const reachEvery = 250 * time.Millisecond

// unreachableError stops a command whose providers never answered: exit
// code 1, the tool could not do its job; every task stays in the store.
type unreachableError struct {
	p captchaq.ProviderMetrics
}

func (e *unreachableError) Error() string {
	return fmt.Sprintf("stopped: %s; check --api-url (or CAPTCHAAI_URL) and the network, then run the same command again "+
		"(--patient keeps trying instead)", unreachableText(e.p, time.Now()))
}

// unreachableText says which provider fails to answer, since when and how
// (the last failure names its URL and the cause), or "" while it answers.
func unreachableText(p captchaq.ProviderMetrics, now time.Time) string {
	if p.Failures == 0 {
		return ""
	}
	who := "the provider"
	if p.Name != "" {
		who = "provider " + p.Name
	}
	state := "unreachable"
	if !p.EverAnswered {
		state = "never answered"
	}
	return fmt.Sprintf("%s %s: %d failures in a row over %s, the last: %s",
		who, state, p.Failures, now.Sub(p.FailingSince).Round(time.Second), p.LastFailure)
}

// reachNote is what the progress line adds while providers fail to
// answer: each one's unreachableText.
func reachNote(m captchaq.Metrics, now time.Time) string {
	var notes []string
	for _, p := range m.Providers {
		if t := unreachableText(p, now); t != "" {
			notes = append(notes, t)
		}
	}
	return strings.Join(notes, "; ")
}

// watchReach sends an unreachableError to rt.fatal once every provider of
// the queue failed unreachableStop times in a row without ever
// answering, and returns then or when ctx ends.
func (rt *queueRuntime) watchReach(ctx context.Context) {
	t := time.NewTicker(reachEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ps := rt.queue.Metrics().Providers
		stuck := len(ps) > 0
		for _, p := range ps {
			stuck = stuck && !p.EverAnswered && p.Failures >= unreachableStop
		}
		if stuck {
			select {
			case rt.fatal <- &unreachableError{p: ps[0]}:
			default:
			}
			return
		}
	}
}
