package tasktest

import (
	"context"
	"errors"
	"net/netip"
)

// Resolver answers a host name's lookup from the map, without the
// network; a name it lacks does not resolve. It is a provider.Resolver.
type Resolver map[string][]netip.Addr

// LookupNetIP is the addresses of host in r.
func (r Resolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if ips, ok := r[host]; ok {
		return ips, nil
	}
	return nil, errors.New("lookup " + host + ": no such host")
}
