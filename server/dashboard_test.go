package server_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/reportfwd"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/server"
)

const chromiumPath = "/usr/bin/chromium"

// browser starts a headless chromium, or skips when there is none (fails
// instead under CI=true).
func browser(t *testing.T) context.Context {
	t.Helper()
	if _, err := exec.LookPath(chromiumPath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("chromium not found at %s: the dashboard test needs it in CI", chromiumPath)
		}
		t.Skipf("chromium not found at %s", chromiumPath)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
	}
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	ctx, cancel3 := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(cancel3)
	return ctx
}

// waitText waits until the element's text is want.
func waitText(sel, want string) chromedp.Action[chromedp.Void] {
	p := chromedp.Poll[bool](`(document.querySelector(`+strconv.Quote(sel)+`) || {}).textContent === `+strconv.Quote(want), chromedp.WithPollingInterval(50*time.Millisecond))
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := p(ctx, t)
		if err != nil {
			err = fmt.Errorf("waiting for %s to read %q: %w", sel, want, err)
		}
		return chromedp.Void{}, err
	}
}

// openDashboard opens the dashboard at base and types the admin key into
// its form, as an operator does; the key never enters the address.
func openDashboard(base, key string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		err := chromedp.Do(ctx,
			chromedp.Navigate(base+"/"),
			chromedp.WaitVisible(chromedp.CSS("#key")),
			chromedp.SendKeys(chromedp.CSS("#key"), key),
			chromedp.Click(chromedp.CSS(`#login button[type="submit"]`)),
			chromedp.WaitVisible(chromedp.CSS("#board")),
		)
		return chromedp.Void{}, err
	}
}

func TestDashboardInBrowser(t *testing.T) {
	b := setup(t, options{server: func(c *server.Config) { c.Report = reportfwd.New(c.Queue).ForwardResult }})
	ctx := browser(t)
	if err := chromedp.Do(ctx,
		openDashboard(b.url, keyAdmin),
		waitText("#solved", "0"),
		waitText("#threads", "5"),
	); err != nil {
		t.Fatalf("dashboard did not load: %v", err)
	}
	if loc, err := chromedp.Run(ctx, chromedp.Location()); err != nil || loc != b.url+"/" {
		t.Errorf("the dashboard's address: %q (%v), want %q", loc, err, b.url+"/")
	}
	// Five tasks solved: the page shows 5.
	var ids []string
	for range 5 {
		ids = append(ids, b.inOK(t, keyQA, turnstile()))
	}
	if err := chromedp.Do(ctx, waitText("#solved", "5"), waitText("#submitted", "5"), waitText("#success", "100.0%")); err != nil {
		t.Fatalf("solved count did not reach 5: %v", err)
	}
	// Two reports, one the provider had already: a row for the provider
	// and one for the client, each 2 sent, 1 accepted, 1 refused.
	rec, err := b.srv.Queue().Get(t.Context(), "qa/"+ids[1])
	if err != nil {
		t.Fatal(err)
	}
	b.simReport(t, rec.Result.CaptchaID)
	for _, id := range ids[:2] {
		b.form(t, http.MethodGet, "/res.php", url.Values{"key": {keyQA}, "action": {"reportbad"}, "id": {id}})
	}
	refused := "1 ERROR_DUPLICATE_REPORT: 1"
	if err := chromedp.Do(ctx, waitText("#reports tr:nth-child(1) td:nth-child(1)", "provider (the only one)"),
		waitText("#reports tr:nth-child(1) td:nth-child(2)", "2"), waitText("#reports tr:nth-child(1) td:nth-child(4)", refused),
		waitText("#reports tr:nth-child(2) td:nth-child(1)", "client qa"), waitText("#reports tr:nth-child(2) td:nth-child(3)", "1"),
		waitText("#reports tr:nth-child(2) td:nth-child(4)", refused)); err != nil {
		t.Fatalf("reports not shown: %v", err)
	}
	// A dead letter: a task canceled while sending is paused.
	b.sim.SetAccount(simBadKey())
	b.api(t, "POST", "/v1/tasks", keyQA, apiTurnstile("dl"), http.StatusAccepted, nil)
	testbound.Until(t, "sending paused by the bad key", func() bool { return b.srv.Queue().Paused() != nil })
	b.api(t, "DELETE", "/v1/tasks/dl", keyQA, "", http.StatusOK, nil)
	b.sim.SetAccount(simGoodKey())
	b.srv.Queue().Resume()
	if err := chromedp.Do(ctx, waitText("#dead-count", "1"), waitText("#failed", "1"),
		waitText("#dead tr td:first-child", "qa/dl")); err != nil {
		t.Fatalf("dead letter not shown: %v", err)
	}
	// Replay from the page: the dead letter goes, the task is solved.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`button.replay[data-id="qa/dl"]`)),
		waitText("#dead-count", "0"), waitText("#solved", "6")); err != nil {
		t.Fatalf("replay from the page: %v", err)
	}
	v := b.waitFinal(t, keyQA, "dl")
	if v.Status != captchaq.StatusSolved {
		t.Errorf("replayed task: %+v", v)
	}
}

// The dashboard lists the reservoirs with their stock against their
// target and their draws, and charts each one's hits, misses and tokens
// expired unused per minute: "checkout" answers one task from its stock
// (a hit), "stale" keeps none long enough to hand out (its min life is
// a millisecond short of a Turnstile token's life), so its one task is a
// miss and every token it is refilled with ages out unused.
func TestDashboardShowsReservoirs(t *testing.T) {
	v := turnstile()
	stale := turnstile()
	stale.Set("pageurl", "https://shop.example/stale")
	template := func(v url.Values) captchaq.Task {
		return captchaq.Task{Method: v.Get("method"), Params: map[string]string{"sitekey": v.Get("sitekey"), "pageurl": v.Get("pageurl")}}
	}
	b := setup(t, options{server: func(c *server.Config) {
		c.Queue.Threads = 4
		c.Queue.Reservoirs = []captchaq.ReservoirConfig{{Name: "checkout", Task: template(v), Size: 1},
			{Name: "stale", Task: template(stale), Size: 1, MinLife: 5*time.Minute - time.Millisecond}}
		c.HistoryEvery = 100 * time.Millisecond
	}})
	testbound.Until(t, "a token in stock, one aged out", func() bool {
		rs := b.srv.Queue().Reservoirs()
		return rs[0].Stock == 1 && rs[1].Expired > 0
	})
	b.inOK(t, keyQA, v)
	b.inOK(t, keyQA, stale)
	ctx := browser(t)
	if err := chromedp.Do(ctx, openDashboard(b.url, keyAdmin),
		waitText("#reservoirs tr td:first-child", "checkout"),
		waitText("#reservoirs tr td:nth-child(5)", "1"), // hits
		waitText("#reservoirs tr td:nth-child(8)", "1"), // handed out
		waitText("#reservoirs tr td:nth-child(3)", "1 / 1"),
		waitText("#reservoirs tr:nth-child(2) td:nth-child(6)", "1"), // stale's misses
	); err != nil {
		t.Fatalf("reservoirs not shown: %v", err)
	}
	// The chart: a line for each reservoir's hits, misses and waste.
	ready := `(() => { const u = (window.captchaqCharts || {})["chart-reservoirs"]; if (!u) return false;
	  const max = (label) => { const i = u.series.findIndex((s) => s.label === label);
	    return i < 1 ? -1 : Math.max(-1, ...u.data[i].filter((v) => v !== null)); };
	  return max("checkout hits") > 0 && max("stale misses") > 0 && max("stale expired unused") > 0; })()`
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](ready, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(60*time.Second))); err != nil {
		charts, _ := chromedp.Run(ctx, chromedp.Evaluate[map[string]chartData](readCharts))
		t.Fatalf("the reservoirs chart did not fill: %v\npage holds: %+v", err, charts["chart-reservoirs"])
	}
	charts, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]chartData](readCharts))
	if err != nil {
		t.Fatal(err)
	}
	c := charts["chart-reservoirs"]
	var labels []string
	for _, s := range c.Series {
		labels = append(labels, s.Label)
	}
	want := []string{"checkout hits", "checkout misses", "checkout expired unused", "stale hits", "stale misses", "stale expired unused"}
	if !slices.Equal(labels, want) {
		t.Errorf("the reservoirs chart's lines: %q, want %q", labels, want)
	}
	for _, label := range []string{"checkout misses", "checkout expired unused", "stale hits"} {
		if s := c.series(label); s.Max != 0 || s.Values == 0 {
			t.Errorf("%s: %+v, want 0 at every sample with a value", label, s)
		}
	}
	if hidden, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("chart-reservoirs").closest(".chart").hidden`)); err != nil || hidden {
		t.Errorf("the reservoirs chart is hidden (%v)", err)
	}
}
