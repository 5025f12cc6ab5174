package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// errBlockedAddress is returned when a pingback would connect to an
// address the service keeps to itself.
var errBlockedAddress = errors.New("pingback: the address is loopback, private, link-local or otherwise internal, and not allowed")

// blockedPrefixes are the networks a client's pingback may not reach,
// besides what netip.Addr's predicates cover (loopback, private,
// link-local, multicast, unspecified).
var blockedPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),      // "this" network
	netip.MustParsePrefix("100.64.0.0/10"),  // CGNAT (some clouds' metadata)
	netip.MustParsePrefix("192.0.0.0/24"),   // IETF protocol assignments
	netip.MustParsePrefix("198.18.0.0/15"),  // benchmarking
	netip.MustParsePrefix("240.0.0.0/4"),    // reserved, broadcast
	netip.MustParsePrefix("64:ff9b::/96"),   // NAT64: reaches IPv4 inside
	netip.MustParsePrefix("64:ff9b:1::/48"), // local-use NAT64
	netip.MustParsePrefix("2002::/16"),      // 6to4: embeds an IPv4 address
	netip.MustParsePrefix("fec0::/10"),      // site-local (deprecated)
	netip.MustParsePrefix("100::/64"),       // discard-only
	netip.MustParsePrefix("2001:db8::/32"),  // documentation
	netip.MustParsePrefix("fd00:ec2::/32"),  // cloud metadata (IPv6)
	netip.MustParsePrefix("169.254.0.0/16"), // link-local, metadata (also IsLinkLocalUnicast)
	netip.MustParsePrefix("255.255.255.255/32"),
}

// blockedAddr says whether a is internal: where a client's pingback may
// not connect unless allow holds it.
func blockedAddr(a netip.Addr, allow []netip.Prefix) bool {
	a = a.Unmap()
	for _, p := range allow {
		if p.Contains(a) {
			return false
		}
	}
	if !a.IsValid() || a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsUnspecified() {
		return true
	}
	for _, p := range blockedPrefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// guardControl is a net.Dialer Control func: it runs for the address
// actually being connected to, after name resolution, so a name that
// resolves (or re-resolves) to an internal address is refused too.
func guardControl(allow []netip.Prefix) func(network, address string, c syscall.RawConn) error {
	return func(network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("pingback: %w", errBlockedAddress)
		}
		if blockedAddr(ap.Addr(), allow) {
			return errBlockedAddress
		}
		return nil
	}
}

// newEgressClient is the HTTP client for clients' pingbacks: guarded dials,
// no proxy from the environment (a proxy would dial on our behalf, past the
// guard), and redirects not followed (a 3xx is the answer).
func newEgressClient(timeout time.Duration, allow []netip.Prefix) *http.Client {
	d := &net.Dialer{Timeout: timeout, Control: guardControl(allow)}
	tr := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		},
		TLSHandshakeTimeout: timeout,
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     30 * time.Second,
	}
	return &http.Client{
		Timeout:   timeout,
		Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}
