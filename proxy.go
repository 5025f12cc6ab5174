package captchaq

import (
	"context"
	"maps"
	"strings"
	"time"

	"github.com/captchaq/captchaq/internal/lane"
	"github.com/captchaq/captchaq/provider"
)

// proxyResolveTimeout bounds the lookup of a task proxy's host name.
const proxyResolveTimeout = 10 * time.Second

// taskProxy is a task's proxy as the providers taking only public IP
// addresses are sent it: resolved once, at its first submit to one.
type taskProxy struct {
	done bool
	sent provider.Proxy
	err  error // why none of them can take it
}

// proxyAddressesOf is what l's service takes as a proxy's address.
func (c Config) proxyAddressesOf(l *lane.Lane) provider.ProxyAddresses {
	if len(c.Providers) > 0 {
		return c.Providers[l.Index()].ProxyAddresses
	}
	return publishedProxyAddresses(c.Provider)
}

// publishedProxyAddresses is what p's service takes as a proxy's address
// (its ProxyAddresses() method: a *createtask.Client has one), else any
// host.
func publishedProxyAddresses(p Provider) provider.ProxyAddresses {
	if a, ok := p.(proxyRuled); ok {
		return a.ProxyAddresses()
	}
	return provider.ProxyAnyHost
}

// proxyRuled is a Provider that says what its service takes as a
// proxy's address.
type proxyRuled interface {
	ProxyAddresses() provider.ProxyAddresses
}

// proxyFor is st's task as l is sent it: as checked, or, for a provider
// taking only public IP addresses, with its proxy's host name replaced by
// its address (provider.Proxy.ProxyFor). The error says why l cannot take
// the proxy. It runs on st's submit goroutine, which alone touches
// st.proxy.
func (q *Queue) proxyFor(l *lane.Lane, st *taskState) (provider.Checked, error) {
	pt := st.pt
	proxyKey, typeKey := paramKey(pt.Params, "proxy"), paramKey(pt.Params, "proxytype")
	if strings.TrimSpace(pt.Params[proxyKey]) == "" || q.cfg.proxyAddressesOf(l) != provider.ProxyPublicIP {
		return pt, nil
	}
	if !st.proxy.done {
		p, err := provider.ParseProxy(pt.Params[proxyKey], pt.Params[typeKey])
		if err == nil {
			ctx, cancel := context.WithTimeout(q.runCtx, proxyResolveTimeout)
			p, err = p.ProxyFor(ctx, provider.ProxyPublicIP, q.cfg.ProxyResolver)
			cancel()
		}
		st.proxy = taskProxy{done: true, sent: p, err: err}
	}
	if st.proxy.err != nil {
		return provider.Checked{}, st.proxy.err
	}
	pt.Params = maps.Clone(pt.Params)
	pt.Params[proxyKey], pt.Params[typeKey] = st.proxy.sent.InPHP()
	return pt, nil
}

// paramKey is the key of params that names name in any letter case
// (name itself when none does).
func paramKey(params map[string]string, name string) string {
	for k := range params {
		if strings.EqualFold(k, name) {
			return k
		}
	}
	return name
}

// proxyRefused acts on proxyFor's refusal of st at its lane, before
// anything was sent: st goes to another provider that solves it, its
// attempt not counted; with none left, it fails with the reason.
func (q *Queue) proxyRefused(st *taskState, err error) {
	l := st.lane
	var last bool
	q.table.Do(func(table) {
		st.class &^= 1 << l.Index()
		last = st.class == 0
	})
	q.log.Info("provider cannot take the task's proxy", "id", st.rec.Task.ID, "provider", l.Name(), "err", err)
	if last {
		q.finish(st, q.failure(st, st.rec.Attempts, provider.ProxyRefused, err.Error()))
		return
	}
	q.requeue(st, st.rec.Attempts, time.Time{}, provider.ProxyRefused, err)
}
