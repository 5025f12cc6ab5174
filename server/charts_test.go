package server_test

import (
	"bytes"
	"fmt"
	imagepng "image/png"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/server"
	"github.com/captchaq/captchaq/sim"
)

// chartSeries is one line of a chart as the page holds it: its label, how
// many samples have a value and the largest value.
type chartSeries struct {
	Label  string  `json:"label"`
	Values int     `json:"values"`
	Max    float64 `json:"max"`
}

type chartData struct {
	Points int           `json:"points"`
	Series []chartSeries `json:"series"`
}

// readCharts reads every chart's data out of the page's uPlot instances.
const readCharts = `Object.fromEntries(Object.entries(window.captchaqCharts || {}).map(([id, u]) => [id, {
  points: u.data[0].length,
  series: u.series.slice(1).map((s, i) => {
    const vs = u.data[i + 1].filter((v) => v !== null && v !== undefined);
    return { label: s.label, values: vs.length, max: vs.length ? Math.max(...vs) : 0 };
  }),
}]))`

func (c chartData) series(label string) chartSeries {
	for _, s := range c.Series {
		if s.Label == label {
			return s
		}
	}
	return chartSeries{}
}

// loadRun keeps the queue busy until stop is called: three reCAPTCHA
// tasks that stay at the provider (three of the five threads in use, one
// client in flight for the whole run) and a burst of turnstile tasks at
// every tick at two priorities and for two clients, more than the two
// free threads take at once, so tasks wait and are solved; each burst
// has one task of the checkout page, which draws from its reservoir.
func loadRun(t *testing.T, b *bundle, every time.Duration) (stop func()) {
	t.Helper()
	for i := range 3 {
		b.api(t, "POST", "/v1/tasks", keyOther, fmt.Sprintf(`{"id":"slow-%d","method":"userrecaptcha","params":{"googlekey":"6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-","pageurl":"https://shop.example/%d"}}`, i, i), http.StatusAccepted, nil)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for n := 0; ; n++ {
			var tasks []string
			for i := range 3 + n%8 { // bursts that rise and fall
				tasks = append(tasks, fmt.Sprintf(`{"id":"t-%d-%d","method":"turnstile","priority":%d,"params":{"sitekey":"0x4AAAAAAA","pageurl":"https://shop.example/%d/%d"}}`, n, i, 1+4*(i%2), n, i))
			}
			tasks = append(tasks, fmt.Sprintf(`{"id":"c-%d","method":"turnstile","params":{"sitekey":"0x4AAAAAAA","pageurl":"https://shop.example/checkout"}}`, n))
			req, _ := http.NewRequest("POST", b.url+"/v1/tasks", strings.NewReader("["+strings.Join(tasks, ",")+"]"))
			req.Header.Set("Authorization", "Bearer "+keyQA)
			req.Header.Set("Content-Type", "application/json")
			if resp, err := b.http.Do(req); err == nil {
				resp.Body.Close()
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// TestDashboardChartsInBrowser loads the dashboard in headless Chromium
// while tasks are solved and reads the charts' data out of the page: the
// threads in use reach the three held by reCAPTCHA tasks against a plan of
// 5, tasks wait at both priorities, solved per minute rises above zero,
// the client "other" has its three tasks in flight, the reservoir of the
// checkout page (full when the load starts) has hits. A reload shows at
// least as many samples at once (the history is the server's). At a
// phone's width nothing is wider than the screen. A screenshot is taken
// (and kept at $CAPTCHAQ_DASHBOARD_PNG when that is set).
func TestDashboardChartsInBrowser(t *testing.T) {
	// A sample every 100 ms, 20 of them before the checks; for the
	// README's picture ($CAPTCHAQ_DASHBOARD_PNG), 70 seconds of samples
	// half a second apart.
	every, points := 100*time.Millisecond, 20
	shotPath := os.Getenv("CAPTCHAQ_DASHBOARD_PNG")
	if shotPath != "" {
		every, points = 500*time.Millisecond, 140
	}
	latency, bursts := 0.01, 500*time.Millisecond
	if shotPath != "" {
		// Slower answers and fewer tasks: the queue rises and falls.
		latency, bursts = 0.05, 2*time.Second
	}
	b := setup(t, options{threads: 5, server: func(c *server.Config) {
		c.HistoryEvery = every
		c.Queue.Reservoirs = []captchaq.ReservoirConfig{{Name: "checkout", Size: 2, Task: captchaq.Task{Method: "turnstile",
			Params: map[string]string{"sitekey": "0x4AAAAAAA", "pageurl": "https://shop.example/checkout"}}}}
	}, sim: func(c *sim.Config) { c.LatencyScale = latency }})
	ctx := browser(t)
	testbound.Until(t, "the reservoir full", func() bool { return b.srv.Queue().Reservoirs()[0].Stock == 2 })
	stop := loadRun(t, b, bursts)
	defer stop()

	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900), openDashboard(b.url, keyAdmin)); err != nil {
		t.Fatal(err)
	}
	// Wait until every chart has what this run must put in it.
	ready := `(() => { const c = window.captchaqCharts || {};
	  const max = (id, label) => { const u = c[id]; if (!u) return -1;
	    const i = u.series.findIndex((s) => s.label === label); if (i < 1) return -1;
	    return Math.max(-1, ...u.data[i].filter((v) => v !== null)); };
	  return c["chart-threads"] && c["chart-threads"].data[0].length >= ` + strconv.Itoa(points) + ` &&
	    max("chart-threads", "in use") >= 3 && max("chart-threads", "plan") === 5 &&
	    max("chart-depth", "priority 1") > 0 && max("chart-depth", "priority 5") > 0 &&
	    max("chart-rate", "solved") > 0 && max("chart-clients", "other") === 3 && max("chart-clients", "qa") > 0 &&
	    max("chart-delay", "p99") > 0 && max("chart-reservoirs", "checkout hits") > 0; })()`
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](ready, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(80*time.Second))); err != nil {
		charts, _ := chromedp.Run(ctx, chromedp.Evaluate[map[string]chartData](readCharts))
		t.Fatalf("charts did not fill: %v\npage holds: %+v", err, charts)
	}
	charts, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]chartData](readCharts))
	if err != nil {
		t.Fatal(err)
	}
	th := charts["chart-threads"]
	if got := th.series("plan"); got.Values != th.Points || got.Max != 5 {
		t.Errorf("threads chart plan series %+v over %d points, want 5 at every point", got, th.Points)
	}
	if got := th.series("AIMD window"); got.Values != th.Points || got.Max != 5 {
		t.Errorf("threads chart window series %+v, want 5 at every point", got)
	}
	if got := charts["chart-rate"].series("failed"); got.Max != 0 {
		t.Errorf("failed per minute %+v, want 0: nothing failed", got)
	}
	if _, ok := charts["chart-broker"]; ok {
		t.Errorf("a broker chart without a broker: %+v", charts["chart-broker"])
	}
	for _, id := range []string{"chart-threads", "chart-depth", "chart-rate", "chart-delay", "chart-clients", "chart-reservoirs"} {
		if charts[id].Points != th.Points {
			t.Errorf("%s has %d points, %s %d: every chart draws the same samples", id, charts[id].Points, "chart-threads", th.Points)
		}
	}

	// A reload: the first drawing already has the samples seen before.
	before := th.Points
	if err := chromedp.Do(ctx, chromedp.Reload()); err != nil {
		t.Fatal(err)
	}
	after, err := chromedp.Run(ctx, chromedp.Poll[int](`window.captchaqCharts && window.captchaqCharts["chart-threads"] && window.captchaqCharts["chart-threads"].data[0].length`, chromedp.WithPollingInterval(20*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	if after < before {
		t.Errorf("after a reload the threads chart has %d points, before it %d: the history should come from the server", after, before)
	}

	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	img, err := imagepng.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	if w := img.Bounds().Dx(); w != 1280 {
		t.Errorf("screenshot %d pixels wide, want 1280", w)
	}
	if shotPath != "" {
		if err := os.WriteFile(shotPath, shot, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// A phone: nothing is wider than the screen, and the charts fit it.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile)); err != nil {
		t.Fatal(err)
	}
	fits := `document.documentElement.scrollWidth <= window.innerWidth &&
	  [...document.querySelectorAll(".chart canvas")].every((c) => c.getBoundingClientRect().right <= window.innerWidth)`
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](fits, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(60*time.Second))); err != nil {
		w, _ := chromedp.Run(ctx, chromedp.Evaluate[[]float64](`[document.documentElement.scrollWidth, window.innerWidth]`))
		t.Errorf("at 390 px the page is wider than the screen (scroll width, screen): %v: %v", w, err)
	}
}

// TestHistoryAPI: /v1/history is an admin's; its columns line up, and
// after five tasks solved the solved column has risen.
func TestHistoryAPI(t *testing.T) {
	t.Parallel()
	b := setup(t, options{server: func(c *server.Config) { c.HistoryEvery = 20 * time.Millisecond }})
	b.api(t, "GET", "/v1/history", keyQA, "", http.StatusForbidden, nil)
	b.api(t, "GET", "/v1/history", "no-such-key-01", "", http.StatusUnauthorized, nil)
	for i := range 5 {
		b.api(t, "POST", "/v1/tasks", keyQA, apiTurnstile(fmt.Sprint("h", i)), http.StatusAccepted, nil)
	}
	for i := range 5 {
		b.waitFinal(t, keyQA, fmt.Sprint("h", i))
	}
	var h server.History
	if !testbound.Eventually(func() bool {
		b.api(t, "GET", "/v1/history", keyAdmin, "", http.StatusOK, &h)
		n := len(h.T)
		return n > 1 && h.SolvedPerMin[n-1] != nil && *h.SolvedPerMin[n-1] > 0
	}) {
		t.Fatalf("no solved per minute after %v: %+v", testbound.Bound, h)
	}
	n := len(h.T)
	for name, col := range map[string]int{"threads_in_use": len(h.ThreadsInUse), "threads_plan": len(h.ThreadsPlan),
		"solved_per_min": len(h.SolvedPerMin), "delay_p99_ms": len(h.DelayP99Ms), "depth 5": len(h.Depth["5"]),
		"inflight qa": len(h.Inflight["qa"]), "inflight ops": len(h.Inflight["ops"])} {
		if col != n {
			t.Errorf("column %s has %d values for %d samples", name, col, n)
		}
	}
	if h.ThreadsPlan[n-1] != 5 || h.EverySeconds != 0.02 || h.WindowSeconds != 3600 {
		t.Errorf("plan %v, every %v s, window %v s; want 5, 0.02, 3600", h.ThreadsPlan[n-1], h.EverySeconds, h.WindowSeconds)
	}
	if h.Broker != nil {
		t.Errorf("broker columns without a broker: %v", h.Broker)
	}
}

// TestHistoryConfigRefused: a sampling period below zero, or a window
// shorter than it, is refused by New with both fields named.
func TestHistoryConfigRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ every, window time.Duration }{{-time.Second, 0}, {time.Minute, time.Second}} {
		_, err := server.New(server.Config{
			Clients:      []server.Client{{Name: "qa", Key: keyQA}},
			HistoryEvery: c.every, HistoryWindow: c.window,
		})
		if err == nil || !strings.Contains(err.Error(), "HistoryEvery") || !strings.Contains(err.Error(), "HistoryWindow") {
			t.Errorf("every %v window %v: %v, want an error naming HistoryEvery and HistoryWindow", c.every, c.window, err)
		}
	}
}
