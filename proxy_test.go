package captchaq_test

import (
	"net/netip"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/tasktest"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/provider/createtask"
	"github.com/captchaq/captchaq/sim"
)

// proxySecret is the password of the proxies here: no result shows it.
const proxySecret = "s3:cr@t"

// TestProxyForIPOnlyProvider: through simulators speaking createTask, the
// first taking only public IP addresses as Anti-Captcha does (it answers
// a host name ERROR_BAD_PROXY), a task's proxy given as a host name
// reaches it as the name's public address and is solved there; a proxy
// in a local network, or a name that does not resolve, is never sent to
// it: the task goes to the second provider, which takes host names (a
// task with a public proxy still goes to the first), or, with no second,
// fails with ERROR_BAD_PROXY and the reason, before
// anything is paid.
func TestProxyForIPOnlyProvider(t *testing.T) {
	r := tasktest.Resolver{
		"proxy.example": {netip.MustParseAddr("10.0.0.9"), netip.MustParseAddr("203.0.113.7")},
		"lan.example":   {netip.MustParseAddr("192.168.1.5")},
	}
	for _, c := range []struct {
		name, host   string
		two          bool
		provider     string // "": the task fails
		text         string
		firstSubmits int64
	}{
		{"host name", "proxy.example", false, "ip-only", "", 1},
		{"address in a local network", "10.0.0.5", false, "", "params.proxy: 10.0.0.5 is an address in a local network; this provider takes only public IP addresses: give a proxy reachable from the internet", 0},
		{"name of a local address", "lan.example", false, "", `params.proxy: host "lan.example" resolves only to 192.168.1.5, in a local network`, 0},
		{"name that does not resolve", "gone.example", false, "", `params.proxy: host "gone.example" does not resolve`, 0},
		{"address in a local network, two providers", "10.0.0.5", true, "any-host", "", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sims := []*sim.Server{proxySim(t, true)}
				ps := []captchaq.ProviderConfig{proxyLane(t, "ip-only", sims[0], provider.ProxyPublicIP)}
				if c.two {
					sims = append(sims, proxySim(t, false))
					ps = append(ps, proxyLane(t, "any-host", sims[1], ""))
					ps[1].SpillAfter = time.Hour // what ip-only takes waits for it
				}
				q, err := captchaq.New(captchaq.Config{Providers: ps, ProxyResolver: r, PollInterval: 10 * time.Millisecond})
				if err != nil {
					t.Fatal(err)
				}
				defer q.Close()
				if err := q.Start(testbound.Context(t)); err != nil {
					t.Fatal(err)
				}
				tk := task("proxied", 0)
				tk.Params["proxy"], tk.Params["proxytype"] = "u:"+proxySecret+"@"+c.host+":3128", "socks5"
				tasks := []captchaq.Task{tk}
				if c.two { // the skip is the task's alone: a public proxy still goes to ip-only
					pub := task("public", 0)
					pub.Params["proxy"] = "proxy.example:3128"
					tasks = append(tasks, pub)
				}
				rs, err := q.SolveBatch(testbound.Context(t), tasks)
				if err != nil {
					t.Fatal(err)
				}
				if c.two && (rs[1].Status != captchaq.StatusSolved || rs[1].Provider != "ip-only") {
					t.Fatalf("the public proxy's task: %s at %q, want solved at ip-only", rs[1].Status, rs[1].Provider)
				}
				res, submits := rs[0], sims[0].Stats().Calls.Submit
				if strings.Contains(res.Error, proxySecret) {
					t.Fatalf("the result shows the proxy's password: %q", strings.ReplaceAll(res.Error, proxySecret, "***"))
				}
				if c.provider != "" {
					if res.Status != captchaq.StatusSolved || res.Provider != c.provider || submits != c.firstSubmits {
						t.Fatalf("%s at %q (%s %s), %d submits to ip-only; want solved at %q, %d submits", res.Status, res.Provider, res.ErrorCode, res.Error, submits, c.provider, c.firstSubmits)
					}
					return
				}
				if res.Status != captchaq.StatusFailed || res.ErrorCode != provider.ProxyRefused || !strings.Contains(res.Error, c.text) || res.Attempts != 0 || submits != 0 {
					t.Fatalf("%s, %s %q, %d attempts, %d submits; want failed, %s %q, 0 attempts, 0 submits", res.Status, res.ErrorCode, res.Error, res.Attempts, submits, provider.ProxyRefused, c.text)
				}
			})
		})
	}
}

// proxySim is an in-process simulator; ipOnly: it takes only public IP
// addresses as a proxy's address.
func proxySim(t *testing.T, ipOnly bool) *sim.Server {
	t.Helper()
	srv, err := sim.New(simDefaults(sim.Config{ProxyIPOnly: ipOnly}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// proxyLane is a createTask provider on srv taking proxies as a says.
func proxyLane(t *testing.T, name string, srv *sim.Server, a provider.ProxyAddresses) captchaq.ProviderConfig {
	t.Helper()
	cl, err := createtask.NewClient(provider.ClientConfig{BaseURL: sim.InProcessBaseURL, Key: "test-key", HTTPClient: srv.InProcessClient()})
	if err != nil {
		t.Fatal(err)
	}
	return captchaq.ProviderConfig{Name: name, Provider: cl, Threads: 2, ProxyAddresses: a}
}
