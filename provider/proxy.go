package provider

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Proxy is a task's proxy in one shape for both protocols: in.php's
// proxy=login:password@host:port with proxytype, and createTask's
// proxyType, proxyAddress, proxyPort, proxyLogin and proxyPassword.
// ParseProxy reads in.php's; InPHP writes it back. Host is a host name
// or an IP address, an IPv6 one without brackets.
type Proxy struct {
	Type     string // HTTP, HTTPS, SOCKS4 or SOCKS5
	Host     string
	Port     int
	Login    string // empty: no login; never holds ':'
	Password string // may hold ':' and '@'
}

// ProxyTypes are the proxy types both protocols take.
var ProxyTypes = []string{"HTTP", "HTTPS", "SOCKS4", "SOCKS5"}

// ParseProxy reads in.php's proxy (login:password@host:port, the login
// part optional, an IPv6 host in brackets) and proxytype (any letter
// case; empty: HTTP). The password is everything between the first ':'
// and the last '@', so it may hold both. An error is a *ValidationError
// naming params.proxy or params.proxytype and the fix; it never carries
// the password.
func ParseProxy(proxy, proxyType string) (Proxy, error) {
	typ, err := proxyTypeOf(proxyType, "params.proxytype")
	if err != nil {
		return Proxy{}, err
	}
	v := strings.TrimSpace(proxy)
	bad := func(reason string) (Proxy, error) {
		return Proxy{}, &ValidationError{Field: "params.proxy", Reason: reason + "; " + proxyHint}
	}
	if v == "" {
		return bad("empty")
	}
	if i := strings.Index(v, "://"); i > 0 && !strings.ContainsAny(v[:i], ":@") {
		return Proxy{}, &ValidationError{Field: "params.proxy", Reason: "must not carry a scheme; give user:pass@host:port and put the protocol in proxytype"}
	}
	p := Proxy{Type: typ}
	hostport := v
	if i := strings.LastIndex(v, "@"); i >= 0 {
		login, pass, ok := strings.Cut(v[:i], ":")
		if !ok || login == "" || pass == "" {
			return bad("the part before '@' is not login:password")
		}
		p.Login, p.Password, hostport = login, pass, v[i+1:]
	}
	host, port, reason := splitProxyAddr(hostport)
	if reason != "" {
		return bad(reason)
	}
	p.Host, p.Port = host, port
	return p, nil
}

// splitProxyAddr splits host:port, saying what is wrong in terms of the
// proxy (reason empty: fine).
func splitProxyAddr(hostport string) (host string, port int, reason string) {
	i := strings.LastIndex(hostport, ":")
	if i < 0 || strings.HasSuffix(hostport, "]") {
		return "", 0, "has no port"
	}
	h, ps, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", 0, "an IPv6 address goes in brackets, [2001:db8::1]:3128"
	}
	if r := checkProxyHost(h); r != "" {
		return "", 0, r
	}
	n, reason := proxyPort(ps)
	return h, n, reason
}

// proxyPort reads a port, 1 to 65535.
func proxyPort(s string) (int, string) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	switch {
	case s == "":
		return 0, "has no port"
	case err != nil:
		return 0, fmt.Sprintf("port %s is not a number", quoteShort(s))
	case n < 1 || n > 65535:
		return 0, fmt.Sprintf("port %d is out of range; use 1 to 65535", n)
	}
	return n, ""
}

// checkProxyHost says what is wrong with a proxy's host ("": nothing).
func checkProxyHost(h string) string {
	switch {
	case strings.TrimSpace(h) == "":
		return "has no host"
	case strings.ContainsAny(h, " /?#@[]"):
		return fmt.Sprintf("%s is not a host name or IP address", quoteShort(h))
	}
	return ""
}

// proxyTypeOf is a proxy type in upper case (empty: HTTP), or an error
// naming field.
func proxyTypeOf(v, field string) (string, error) {
	t := strings.ToUpper(strings.TrimSpace(v))
	if t == "" {
		return "HTTP", nil
	}
	for _, k := range ProxyTypes {
		if t == k {
			return t, nil
		}
	}
	return "", &ValidationError{Field: field, Reason: fmt.Sprintf("%s is not a proxy type; use one of HTTP, HTTPS, SOCKS4, SOCKS5", quoteShort(v))}
}

// NewProxy is createTask's proxy fields as a Proxy: field names each
// field as the error names it (e.g. "task.proxyAddress"). Login and
// password come both or neither; a login may not hold ':'.
func NewProxy(typ, host, port, login, password string, field func(string) string) (Proxy, error) {
	t, err := proxyTypeOf(typ, field("proxyType"))
	if err != nil {
		return Proxy{}, err
	}
	host = strings.Trim(strings.TrimSpace(host), "[]")
	if r := checkProxyHost(host); r != "" {
		return Proxy{}, &ValidationError{Field: field("proxyAddress"), Reason: r + "; give the proxy's host name or IP address"}
	}
	if strings.TrimSpace(port) == "" {
		return Proxy{}, &ValidationError{Field: field("proxyPort"), Reason: "required with " + field("proxyAddress") + ": the proxy's port, 1 to 65535"}
	}
	n, r := proxyPort(port)
	if r != "" {
		return Proxy{}, &ValidationError{Field: field("proxyPort"), Reason: r}
	}
	switch {
	case (login == "") != (password == ""):
		return Proxy{}, &ValidationError{Field: field("proxyLogin") + " and " + field("proxyPassword"), Reason: "give both or neither"}
	case strings.Contains(login, ":"):
		return Proxy{}, &ValidationError{Field: field("proxyLogin"), Reason: "may not hold ':' (in.php's proxy is login:password@host:port)"}
	}
	return Proxy{Type: t, Host: host, Port: n, Login: login, Password: password}, nil
}

// InPHP is p as in.php's proxy and proxytype.
func (p Proxy) InPHP() (proxy, proxyType string) {
	s := net.JoinHostPort(p.Host, strconv.Itoa(p.Port))
	if p.Login != "" {
		s = p.Login + ":" + p.Password + "@" + s
	}
	return s, p.Type
}

// String is p for a log or an error: its password is never shown.
func (p Proxy) String() string {
	s := strings.ToLower(p.Type) + "://"
	if p.Login != "" {
		s += p.Login + ":***@"
	}
	return s + net.JoinHostPort(p.Host, strconv.Itoa(p.Port))
}

// ProxyAddresses is what a service takes as a proxy's address.
type ProxyAddresses string

const (
	// ProxyAnyHost: host names and IP addresses.
	ProxyAnyHost ProxyAddresses = "host"
	// ProxyPublicIP: IP addresses only, none in a local network
	// (Anti-Captcha's and CapMonster Cloud's rule).
	ProxyPublicIP ProxyAddresses = "public_ip"
)

// Resolver looks up a host's addresses; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// ProxyRefused is the code of a task whose proxy a provider cannot take
// (ProxyFor): a host name that does not resolve, or an address in a local
// network for a service that takes only public ones.
const ProxyRefused = "ERROR_BAD_PROXY"

// ProxyFor is p as a service taking a proxies: unchanged for
// ProxyAnyHost; for ProxyPublicIP, a host name is resolved through r and
// sent as its first public address. A name that does not resolve, or an
// address (given or resolved) in a local network (loopback, private,
// link-local, unspecified), is refused with an *Error of code
// ProxyRefused and ClassTask saying why; it never carries the password.
func (p Proxy) ProxyFor(ctx context.Context, a ProxyAddresses, r Resolver) (Proxy, error) {
	if a != ProxyPublicIP {
		return p, nil
	}
	refuse := func(why string) (Proxy, error) {
		return Proxy{}, &Error{Op: "submit", Code: ProxyRefused, Class: ClassTask,
			Text: "params.proxy: " + why + "; this provider takes only public IP addresses: give a proxy reachable from the internet"}
	}
	if ip, err := netip.ParseAddr(p.Host); err == nil {
		if localAddr(ip) {
			return refuse(fmt.Sprintf("%s is an address in a local network", ip))
		}
		return p, nil
	}
	ips, err := r.LookupNetIP(ctx, "ip", p.Host)
	if err != nil || len(ips) == 0 {
		return refuse(fmt.Sprintf("host %s does not resolve", quoteShort(p.Host)))
	}
	for _, ip := range ips {
		if !localAddr(ip) {
			p.Host = ip.Unmap().String()
			return p, nil
		}
	}
	return refuse(fmt.Sprintf("host %s resolves only to %s, in a local network", quoteShort(p.Host), ips[0]))
}

// localAddr reports whether ip is not reachable from the internet.
func localAddr(ip netip.Addr) bool {
	ip = ip.Unmap()
	return ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsUnspecified() ||
		ip.IsLinkLocalMulticast() || ip.IsMulticast()
}
