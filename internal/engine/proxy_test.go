package engine

import (
	"context"
	"net/netip"
	"testing"

	"github.com/captchaq/captchaq/provider"
)

// lookups is a Resolver that answers one public address and counts its
// lookups.
type lookups struct{ n int }

func (r *lookups) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	r.n++
	return []netip.Addr{netip.MustParseAddr("203.0.113.7")}, nil
}

// A provider taking any host is sent the task as checked; one taking
// only public IP addresses is sent the proxy's address, resolved once
// however many submits ask, in a params map of its own.
func TestTaskProxyResolvesOnceForPublicIPProviders(t *testing.T) {
	pt := provider.Checked{Task: provider.Task{Method: "turnstile", Params: map[string]string{"proxy": "u:p@proxy.example:8080", "proxytype": "HTTP"}}}
	var tp TaskProxy
	r := &lookups{}
	got, err := tp.For(context.Background(), pt, provider.ProxyAnyHost, r)
	if err != nil || got.Params["proxy"] != "u:p@proxy.example:8080" || r.n != 0 {
		t.Fatalf("any host: %v, %v, %d lookups; want the task as checked, no lookup", got.Params, err, r.n)
	}
	for range 2 {
		got, err = tp.For(context.Background(), pt, provider.ProxyPublicIP, r)
		if err != nil || got.Params["proxy"] != "u:p@203.0.113.7:8080" {
			t.Fatalf("public IP: %v, %v; want the proxy's address", got.Params, err)
		}
	}
	if r.n != 1 || pt.Params["proxy"] != "u:p@proxy.example:8080" {
		t.Fatalf("%d lookups, checked task's proxy %q; want 1 lookup and the checked task unchanged", r.n, pt.Params["proxy"])
	}
}
