package server_test

import (
	"net/url"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/simrig"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/server"
	"github.com/captchaq/captchaq/sim"
)

// withBackup puts a second, per-solve provider that solves hCaptcha
// behind the server's queue, after the bundle's simulator.
func withBackup(t *testing.T) func(*server.Config) {
	return func(cfg *server.Config) {
		methods := []string{"hcaptcha", "turnstile"}
		bc := simrig.Start(t, simrig.Options{Sim: sim.Config{LatencyScale: 0.01, Seed: 8, PollBan: sim.PollBan{Disabled: true},
			Methods: methods, PricePer1000: 2}, Key: "backup-secret", Methods: methods}).Client
		q := &cfg.Queue
		q.Providers = []captchaq.ProviderConfig{
			{Name: "main", Provider: q.Provider, Threads: 5, Methods: provider.CaptchaAIMethods},
			{Name: "backup", Provider: bc, Threads: 5, Methods: methods, PricePer1000: map[string]float64{"default": 2}, SpillAfter: time.Hour},
		}
		q.Provider, q.Threads = nil, 0
	}
}

func hcaptcha() url.Values {
	return url.Values{"method": {"hcaptcha"}, "sitekey": {"10000000-ffff-ffff-ffff-000000000001"}, "pageurl": {"https://shop.example/signup"}}
}

// Behind a server, a type only the second provider solves is accepted by
// in.php and solved there; its result names the provider and price.
func TestServerProvidersRouteByType(t *testing.T) {
	t.Parallel()
	b := setup(t, options{server: withBackup(t)})
	id := b.inOK(t, keyQA, hcaptcha())
	v := b.waitFinal(t, keyQA, id)
	if v.Status != captchaq.StatusSolved || v.Result.Provider != "backup" || v.Result.Price != 0.002 {
		t.Fatalf("hcaptcha task: %+v", v.Result)
	}
	v = b.waitFinal(t, keyQA, b.inOK(t, keyQA, turnstile()))
	if v.Result.Provider != "main" || v.Result.Price != 0 {
		t.Fatalf("turnstile task: %+v", v.Result)
	}
}

func TestDashboardShowsProviders(t *testing.T) {
	b := setup(t, options{server: withBackup(t)})
	ctx := browser(t)
	b.waitFinal(t, keyQA, b.inOK(t, keyQA, hcaptcha()))
	if err := chromedp.Do(ctx,
		openDashboard(b.url, keyAdmin),
		waitText("#providers tr:nth-child(2) td:first-child", "backup"),
		waitText("#providers tr:nth-child(2) td:nth-child(4)", "1"),
		waitText("#providers tr:nth-child(2) td:nth-child(7)", "0.0020"),
		waitText("#providers tr:nth-child(1) td:nth-child(2)", "in routing"),
	); err != nil {
		t.Fatalf("providers table: %v", err)
	}
}
