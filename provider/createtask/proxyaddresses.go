package createtask

import (
	"net/url"
	"strings"

	"github.com/captchaq/captchaq/provider"
)

// publishedProxyAddresses are the services whose documents restrict a
// proxy's address, by host. CapSolver's and 2captcha's take host names
// (their documents say "IP address or hostname", or nothing).
var publishedProxyAddresses = map[string]provider.ProxyAddresses{
	// Anti-Captcha's proxyAddress: "Proxy IP address ipv4/ipv6. No host
	// names or IP addresses from local networks."
	"api.anti-captcha.com": provider.ProxyPublicIP,
	// CapMonster Cloud's: an IPv4/IPv6 address; no host names, no
	// transparent proxies, none from local networks (192.*, 10.*, 127.*).
	"api.capmonster.cloud": provider.ProxyPublicIP,
}

// PublishedProxyAddresses is what the service at baseURL takes as a
// proxy's address: public IP addresses only at Anti-Captcha and
// CapMonster Cloud, host names too elsewhere.
func PublishedProxyAddresses(baseURL string) provider.ProxyAddresses {
	if u, err := url.Parse(strings.TrimSpace(baseURL)); err == nil {
		if a, ok := publishedProxyAddresses[strings.ToLower(u.Hostname())]; ok {
			return a
		}
	}
	return provider.ProxyAnyHost
}

// ProxyAddresses is what the Client's service takes as a proxy's
// address (PublishedProxyAddresses). The queue keeps to it for a
// provider whose ProviderConfig.ProxyAddresses is left empty.
func (c *Client) ProxyAddresses() provider.ProxyAddresses { return PublishedProxyAddresses(c.root) }
