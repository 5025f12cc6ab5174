package amqp

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/reportfwd"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/sim"
)

// Clients' reportbad and reportgood through a gateway reach the provider:
// the gateway publishes them on the reports queue by the result's
// provider captcha id, and a worker forwards them with the key. A report
// the provider refuses is dropped, not retried forever. What came of each
// comes back to the gateway (AttachReports); one past the provider's
// report window is not sent.
func TestGatewayReportsReachTheProviderThroughAWorker(t *testing.T) {
	t.Parallel()
	r := newGatewayRig(t, testConfig(t))
	outcomes := make(chan captchaq.ReportOutcome, 10)
	r.reports = func(o captchaq.ReportOutcome) { outcomes <- o }
	ctx := testCtx(t)
	srv := r.workerWith("rep-w1", sim.Config{LatencyScale: 0.005, PollBan: sim.PollBan{Disabled: true}}, 4, 4, func(wc *WorkerConfig) {
		// The provider takes reports for 15 minutes after an answer.
		p := windowed{wc.Queue.Provider.(*provider.Client), 15 * time.Minute}
		wc.Report = reportfwd.New(captchaq.Config{Provider: p}).Forward
	})
	g, results := r.gateway("rep", nil, nil)
	for _, id := range []string{"bad", "good"} {
		if err := g.submitTask(ctx, task(id, 0)); err != nil {
			t.Fatal(err)
		}
	}
	byID := map[string]captchaq.Result{}
	for _, res := range await(t, ctx, results, 2) {
		if res.Status != captchaq.StatusSolved || res.CaptchaID == "" {
			t.Fatalf("%s: %+v", res.ID, res)
		}
		byID[res.ID] = res
	}
	unknown, late := byID["bad"], byID["bad"]
	unknown.ID, unknown.CaptchaID = "unknown", "999"
	late.ID, late.FinishedAt = "late", time.Now().Add(-16*time.Minute)
	for _, rep := range []struct {
		r    captchaq.Result
		good bool
	}{{unknown, false}, {late, false}, {byID["bad"], false}, {byID["good"], true}} {
		if err := g.Report(ctx, rep.r, rep.good); err != nil {
			t.Fatalf("report of %s: %v", rep.r.ID, err)
		}
	}
	testbound.Until(t, "one bad and one good report at the provider", func() bool {
		st := srv.Stats()
		return st.ReportsBad == 1 && st.ReportsGood == 1
	})
	// The refused report is gone from the queue too.
	testbound.Until(t, "the reports queue empty after three report calls", func() bool {
		d, err := r.c.Depths(ctx, r.c.Names().Reports)
		if err != nil {
			t.Fatal(err)
		}
		return d[0].Ready == 0 && srv.Stats().Calls.Report >= 3
	})
	if st := srv.Stats(); st.ReportsBad != 1 || st.ReportsGood != 1 || st.Calls.Report != 3 {
		t.Fatalf("provider: %d bad, %d good reports, %d report calls; want 1, 1, 3 (the late one not sent)", st.ReportsBad, st.ReportsGood, st.Calls.Report)
	}
	got := map[string]captchaq.ReportOutcome{}
	for range 4 {
		select {
		case o := <-outcomes:
			got[o.Task] = o
		case <-ctx.Done():
			t.Fatalf("outcomes %v, want 4", got)
		}
	}
	want := map[string]captchaq.ReportOutcome{
		"unknown": {Task: "unknown", Outcome: captchaq.ReportRefused, Code: "ERROR_WRONG_CAPTCHA_ID"},
		"late":    {Task: "late", Outcome: captchaq.ReportTooLate},
		"bad":     {Task: "bad", Outcome: captchaq.ReportAccepted},
		"good":    {Task: "good", Good: true, Outcome: captchaq.ReportAccepted},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("outcomes at the gateway (-want +got):\n%s", diff)
	}
}

// windowed is a provider client that publishes a report window.
type windowed struct {
	*provider.Client
	window time.Duration
}

func (w windowed) ReportWindow() time.Duration { return w.window }
