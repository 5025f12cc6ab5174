package server_test

import (
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/server"
	"github.com/captchaq/captchaq/sim"
)

// reportbad and reportgood on res.php in front of a fleet reach the
// provider: the gateway publishes them by the result's captcha id and a
// worker forwards them with the provider key. A task is reported once: 50
// reports of it at once make one message, and one request to the
// provider. The worker answers what came of each: /v1/stats counts them.
func TestGatewayForwardsReportsToTheProvider(t *testing.T) {
	t.Parallel()
	f := newFleetRig(t, sim.Config{LatencyScale: 0.005, PollBan: sim.PollBan{Disabled: true}})
	stopWorker := f.worker("rep-w", 4)
	g := f.serve("rep", filepath.Join(t.TempDir(), "gw.db"), nil)
	var ids []string
	for _, n := range []string{"1", "2"} {
		id := g.inOK(t, keyQA, distinct(turnstile(), n))
		if got := g.resFinal(t, keyQA, id); !strings.HasPrefix(got, "OK|") {
			t.Fatalf("task %s: %q", id, got)
		}
		ids = append(ids, id)
	}
	// No worker takes reports while they are counted on the broker.
	stopWorker()
	// 50 bad reports of the first task at once, one good of the second.
	var wg sync.WaitGroup
	for i, action := range []string{"reportbad", "reportgood"} {
		n := 1
		if action == "reportbad" {
			n = 50
		}
		for range n {
			wg.Go(func() {
				resp, err := g.http.Get(g.url + "/res.php?" + url.Values{"key": {keyQA}, "action": {action}, "id": {ids[i]}}.Encode())
				if err != nil {
					t.Error(err)
					return
				}
				defer resp.Body.Close()
				if got, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK || string(got) != "OK_REPORT_RECORDED" {
					t.Errorf("%s: HTTP %d %q", action, resp.StatusCode, got)
				}
			})
		}
	}
	wg.Wait()
	c := f.dial()
	depth, err := c.Depths(t.Context(), c.Names().Reports)
	c.Close()
	if err != nil || len(depth) != 1 || depth[0].Ready != 2 {
		t.Fatalf("the reports queue after 50 bad reports of one task and 1 good of another: %+v %v, want 2 messages", depth, err)
	}
	f.worker("rep-w2", 4)
	if !testbound.Eventually(func() bool { st := f.sim.Stats(); return st.ReportsBad == 1 && st.ReportsGood == 1 }) {
		st := f.sim.Stats()
		t.Fatalf("the provider recorded %d bad and %d good reports, want 1 and 1", st.ReportsBad, st.ReportsGood)
	}
	if n := f.sim.Stats().Calls.Report; n != 2 {
		t.Errorf("the provider got %d report calls, want 2", n)
	}
	want := server.ReportCounts{Sent: 2, Accepted: 2}
	var qa, fleet server.ReportCounts
	counted := testbound.Eventually(func() bool {
		var st server.Stats
		g.api(t, "GET", "/v1/stats", keyAdmin, "", http.StatusOK, &st)
		for _, c := range st.Clients {
			if c.Name == "qa" {
				qa = c.Reports
			}
		}
		for _, p := range st.Metrics.Providers {
			if p.Name == "" {
				fleet = p.Reports
			}
		}
		return cmp.Equal(qa, want) && cmp.Equal(fleet, want)
	})
	if !counted {
		t.Fatalf("reports counted for qa %+v, for the provider %+v; want %+v for each", qa, fleet, want)
	}
}
