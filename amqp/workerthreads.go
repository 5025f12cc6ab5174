package amqp

import (
	"cmp"
	"log/slog"
	"slices"
	"strings"

	"github.com/captchaq/captchaq"
)

// Threads implements captchaq.Fleet.
func (f *workerFleet) Threads(provider string) captchaq.ThreadPool {
	if i := slices.Index(f.names, provider); i >= 0 {
		return f.pools[i]
	}
	return nil // not a nil *threadPool: no pool at all
}

// sharedThreads makes the queue's thread pools and names their
// providers: the plan's pool (Names.PlanThreads) for a queue of one
// provider (""); for a queue of several, one per provider
// (Names.ProviderThreads), so the fleet never has more tasks at any
// provider than its Threads.
func sharedThreads(c *Conn, qc captchaq.Config, threads int, log *slog.Logger) (names []string, pools []*threadPool) {
	if len(qc.Providers) == 0 {
		return []string{""}, []*threadPool{newThreadPool(c, c.Names().PlanThreads(), threads, log)}
	}
	for _, pc := range qc.Providers {
		names = append(names, pc.Name)
		pools = append(pools, newThreadPool(c, c.Names().ProviderThreads(pc.Name), cmp.Or(pc.Threads, captchaq.ThreadsDefault), log.With("provider", pc.Name)))
	}
	return names, pools
}

// Threads reports the fleet's shared threads (SharedThreads): the ones
// this worker holds, the plan's, and the fleet's in use (-1 until first
// read, about once a second). ok is false without SharedThreads.
//
// With several providers, the sums over their pools (fleetInUse -1 until
// every pool was read); ProviderThreads tells them apart.
func (w *Worker) Threads() (held, plan, fleetInUse int, ok bool) {
	if len(w.pools) == 0 {
		return 0, 0, 0, false
	}
	for _, p := range w.pools {
		h, n, u := p.Threads()
		held, plan = held+h, plan+n
		if u < 0 || fleetInUse < 0 {
			fleetInUse = -1
		} else {
			fleetInUse += u
		}
	}
	return held, plan, fleetInUse, true
}

// ProviderThreads are one provider's shared threads, as Threads reports
// them for the plan's.
type ProviderThreads struct {
	Provider   string
	Held, Plan int
	FleetInUse int // -1 until first read
}

// ProviderThreads reports each provider's shared threads, in the order
// of WorkerConfig.Queue.Providers; nil without SharedThreads or without
// Providers.
func (w *Worker) ProviderThreads() []ProviderThreads {
	if len(w.cfg.Queue.Providers) == 0 {
		return nil
	}
	var out []ProviderThreads
	for i, p := range w.pools {
		h, n, u := p.Threads()
		out = append(out, ProviderThreads{Provider: w.cfg.Queue.Providers[i].Name, Held: h, Plan: n, FleetInUse: u})
	}
	return out
}

// providerNames are the names of Queue's Providers (nil without).
func (w *Worker) providerNames() []string {
	var names []string
	for _, p := range w.cfg.Queue.Providers {
		names = append(names, p.Name)
	}
	return names
}

// poolOf is the thread pool of the provider of captchaID (NAME:ID with
// several providers), nil without SharedThreads.
func (w *Worker) poolOf(captchaID string) *threadPool {
	if len(w.pools) == 0 {
		return nil
	}
	if len(w.cfg.Queue.Providers) == 0 {
		return w.pools[0]
	}
	name, _, _ := strings.Cut(captchaID, ":")
	for i, p := range w.cfg.Queue.Providers {
		if p.Name == name {
			return w.pools[i]
		}
	}
	return nil
}
