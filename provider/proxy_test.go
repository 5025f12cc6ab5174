package provider_test

import (
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/captchaq/captchaq/internal/tasktest"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/provider/createtask"
)

// secret is the password of every proxy here: no error may show it.
const secret = "s3:cr@t"

// TestProxyRoundTrip: every shape users send reads into one Proxy, which
// writes back as in.php's proxy and proxytype unchanged (the type in upper
// case) and as createTask's fields, which read back into the same Proxy.
func TestProxyRoundTrip(t *testing.T) {
	for _, c := range []struct {
		proxy, typ string
		want       provider.Proxy
	}{
		{"proxy.example:3128", "http", provider.Proxy{Type: "HTTP", Host: "proxy.example", Port: 3128}},
		{"203.0.113.7:1080", "Socks5", provider.Proxy{Type: "SOCKS5", Host: "203.0.113.7", Port: 1080}},
		{"[2001:db8::1]:8080", "HTTPS", provider.Proxy{Type: "HTTPS", Host: "2001:db8::1", Port: 8080}},
		{"u:" + secret + "@proxy.example:3128", "socks4", provider.Proxy{Type: "SOCKS4", Host: "proxy.example", Port: 3128, Login: "u", Password: secret}},
		{"me@mail.example:" + secret + "@203.0.113.7:65535", "SOCKS5", provider.Proxy{Type: "SOCKS5", Host: "203.0.113.7", Port: 65535, Login: "me@mail.example", Password: secret}},
		{"u:p@[2001:db8::1]:1", "https", provider.Proxy{Type: "HTTPS", Host: "2001:db8::1", Port: 1, Login: "u", Password: "p"}},
		{"u:a://b@proxy.example:80", "", provider.Proxy{Type: "HTTP", Host: "proxy.example", Port: 80, Login: "u", Password: "a://b"}},
	} {
		p, err := provider.ParseProxy(c.proxy, c.typ)
		if err != nil || p != c.want {
			t.Errorf("ParseProxy(%s) = %v, %v; want %v", c.want, p, err, c.want)
			continue
		}
		if proxy, typ := p.InPHP(); proxy != c.proxy || typ != c.want.Type {
			t.Errorf("%s: InPHP = %q, %q; want %q, %q", c.want, proxy, typ, c.proxy, c.want.Type)
		}
		task := provider.Task{Method: "userrecaptcha", Params: map[string]string{"googlekey": "k", "pageurl": "https://a.example/", "proxy": c.proxy, "proxytype": c.typ}}
		obj, err := createtask.TaskObject(task)
		if err != nil {
			t.Fatalf("%s: TaskObject: %v", c.want, err)
		}
		raw, _ := json.Marshal(obj)
		back, f := createtask.ParseTask(raw)
		if f != nil {
			t.Fatalf("%s: ParseTask of its task object: %s", c.want, strings.ReplaceAll(f.Description, secret, "***"))
		}
		if got, _ := provider.ParseProxy(back.Params["proxy"], back.Params["proxytype"]); got != c.want {
			t.Errorf("%s: through createTask = %v, want %v", c.want, got, c.want)
		}
	}
}

// TestProxyRefused: bad input is refused naming the field and the fix,
// never showing the password.
func TestProxyRefused(t *testing.T) {
	for _, c := range []struct{ proxy, typ, want string }{
		{"proxy.example", "HTTP", "params.proxy: has no port"},
		{"u:" + secret + "@proxy.example", "HTTP", "params.proxy: has no port"},
		{"proxy.example:0", "HTTP", "params.proxy: port 0 is out of range; use 1 to 65535"},
		{"u:" + secret + "@proxy.example:65536", "HTTP", "params.proxy: port 65536 is out of range"},
		{"proxy.example:http", "HTTP", `params.proxy: port "http" is not a number`},
		{":3128", "HTTP", "params.proxy: has no host"},
		{"u:" + secret + "@:3128", "HTTP", "params.proxy: has no host"},
		{"2001:db8::1:3128", "HTTP", "params.proxy: an IPv6 address goes in brackets, [2001:db8::1]:3128"},
		{"[2001:db8::1]", "HTTP", "params.proxy: has no port"},
		{"proxy.example:3128", "FTP", `params.proxytype: "FTP" is not a proxy type; use one of HTTP, HTTPS, SOCKS4, SOCKS5`},
		{"http://proxy.example:3128", "HTTP", "params.proxy: must not carry a scheme"},
		{"token@proxy.example:3128", "HTTP", "params.proxy: the part before '@' is not login:password"},
		{"", "HTTP", "params.proxy: empty"},
	} {
		_, err := provider.ParseProxy(c.proxy, c.typ)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) || strings.Contains(err.Error(), secret) || !errors.Is(err, provider.ErrInvalidTask) {
			t.Errorf("ParseProxy(%q) = %v, want an invalid-task error starting %q without the password", strings.ReplaceAll(c.proxy, secret, "***"), err, c.want)
		}
	}
	for _, pass := range []string{`{"p":"` + secret + `"}`, `["` + secret + `"]`} {
		_, f := createtask.ParseTask([]byte(`{"type":"RecaptchaV2Task","websiteURL":"https://a.example/","websiteKey":"k","proxyType":"http",` +
			`"proxyAddress":"203.0.113.7","proxyPort":80,"proxyLogin":"u","proxyPassword":` + pass + `}`))
		if f == nil || f.Description != "task.proxyPassword: must be a string" {
			t.Errorf("a password of JSON %s: %v, want task.proxyPassword: must be a string", strings.ReplaceAll(pass, secret, "***"), f != nil)
		}
	}
	p := provider.Proxy{Type: "SOCKS5", Host: "proxy.example", Port: 1080, Login: "u", Password: secret}

	if s := p.String(); s != "socks5://u:***@proxy.example:1080" {
		t.Errorf("String = %q", s)
	}
}

// TestProxyFor: a service taking only public IP addresses is sent a host
// name's first public address, an address as given, and nothing for a
// name that does not resolve or an address in a local network; a service
// taking host names is sent the proxy as it came.
func TestProxyFor(t *testing.T) {
	r := tasktest.Resolver{
		"proxy.example": {netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("203.0.113.7")},
		"v6.example":    {netip.MustParseAddr("2001:db8::7")},
		"lan.example":   {netip.MustParseAddr("192.168.1.5"), netip.MustParseAddr("fe80::1")},
	}
	for _, c := range []struct {
		host, want, err string
	}{
		{"proxy.example", "203.0.113.7", ""},
		{"v6.example", "2001:db8::7", ""},
		{"198.51.100.1", "198.51.100.1", ""},
		{"lan.example", "", `params.proxy: host "lan.example" resolves only to 192.168.1.5, in a local network; this provider takes only public IP addresses`},
		{"gone.example", "", `params.proxy: host "gone.example" does not resolve`},
		{"127.0.0.1", "", "params.proxy: 127.0.0.1 is an address in a local network"},
		{"10.1.2.3", "", "params.proxy: 10.1.2.3 is an address in a local network"},
		{"fe80::1", "", "params.proxy: fe80::1 is an address in a local network"},
		{"0.0.0.0", "", "params.proxy: 0.0.0.0 is an address in a local network"},
	} {
		p := provider.Proxy{Type: "HTTP", Host: c.host, Port: 3128, Login: "u", Password: secret}
		if same, err := p.ProxyFor(t.Context(), provider.ProxyAnyHost, r); err != nil || same != p {
			t.Errorf("%s for any host = %v, %v; want it unchanged", c.host, same, err)
		}
		got, err := p.ProxyFor(t.Context(), provider.ProxyPublicIP, r)
		switch {
		case c.err == "" && (err != nil || got.Host != c.want || got.Password != secret):
			t.Errorf("%s: got %v, %v; want host %s", c.host, got, err, c.want)
		case c.err != "" && !refused(err, c.err):
			t.Errorf("%s: got %v; want %s, %q", c.host, err, provider.ProxyRefused, c.err)
		}
	}
}

// refused reports whether err is ProxyFor's refusal, its text starting
// with text and never showing the password.
func refused(err error, text string) bool {
	var pe *provider.Error
	return errors.As(err, &pe) && pe.Code == provider.ProxyRefused && pe.Class == provider.ClassTask &&
		strings.HasPrefix(pe.Text, text) && !strings.Contains(err.Error(), secret)
}
