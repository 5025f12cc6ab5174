package engine

import (
	"context"
	"maps"
	"strings"
	"time"

	"github.com/captchaq/captchaq/provider"
)

// proxyResolveTimeout bounds the lookup of a task proxy's host name.
const proxyResolveTimeout = 10 * time.Second

// TaskProxy is a task's proxy as the providers taking only public IP
// addresses are sent it: resolved once, at its first submit to one. Its
// task's submit goroutine alone touches it.
type TaskProxy struct {
	done bool
	sent provider.Proxy
	err  error // why none of them can take it
}

// For is pt, a task as checked, as a provider taking addrs is sent it:
// as it is, or, for a provider taking only public IP addresses, with its
// proxy's host name replaced by its address (provider.Proxy.ProxyFor,
// through resolver within ctx, once). The error says why the provider
// cannot take the proxy.
func (tp *TaskProxy) For(ctx context.Context, pt provider.Checked, addrs provider.ProxyAddresses, resolver provider.Resolver) (provider.Checked, error) {
	proxyKey, typeKey := paramKey(pt.Params, "proxy"), paramKey(pt.Params, "proxytype")
	if strings.TrimSpace(pt.Params[proxyKey]) == "" || addrs != provider.ProxyPublicIP {
		return pt, nil
	}
	if !tp.done {
		p, err := provider.ParseProxy(pt.Params[proxyKey], pt.Params[typeKey])
		if err == nil {
			ctx, cancel := context.WithTimeout(ctx, proxyResolveTimeout)
			p, err = p.ProxyFor(ctx, provider.ProxyPublicIP, resolver)
			cancel()
		}
		*tp = TaskProxy{done: true, sent: p, err: err}
	}
	if tp.err != nil {
		return provider.Checked{}, tp.err
	}
	pt.Params = maps.Clone(pt.Params)
	pt.Params[proxyKey], pt.Params[typeKey] = tp.sent.InPHP()
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
