package server_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/reportfwd"
	"github.com/captchaq/captchaq/server"
)

// What came of each report is counted per provider and per client, in
// /v1/stats and /metrics: one the provider records (accepted), one it
// refuses as reported already (refused, by code), and one past the
// provider's report window (too late: answered ERROR_REPORT_NOT_RECORDED
// and never sent, so the provider sees no call for it).
func TestReportOutcomesCounted(t *testing.T) {
	t.Parallel()
	var later atomic.Int64 // how far the forwarder's clock is ahead
	b := setup(t, options{server: func(c *server.Config) {
		c.Queue.Providers = []captchaq.ProviderConfig{{Name: "main", Provider: c.Queue.Provider, ReportWindow: 15 * time.Minute}}
		c.Queue.Provider = nil
		fwd := reportfwd.New(c.Queue)
		fwd.Now = func() time.Time { return time.Now().Add(time.Duration(later.Load())) }
		c.Report = fwd.ForwardResult
	}})
	solved := func(key string) string {
		id := b.inOK(t, key, turnstile())
		if v := b.waitFinal(t, key, id); v.Status != "solved" {
			t.Fatalf("task: %+v", v)
		}
		return id
	}
	report := func(key, action, id string) string {
		return b.form(t, http.MethodGet, "/res.php", url.Values{"key": {key}, "action": {action}, "id": {id}})
	}
	accepted, dup, late := solved(keyQA), solved(keyQA), solved(keyAdmin)
	if got := report(keyQA, "reportbad", accepted); got != "OK_REPORT_RECORDED" {
		t.Errorf("a report in time: %q", got)
	}
	// Someone else with the provider key reported dup first.
	rec, err := b.srv.Queue().Get(context.Background(), "qa/"+dup)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.simReport(t, rec.Result.CaptchaID); got != "OK_REPORT_RECORDED" {
		t.Fatalf("the report at the provider: %q", got)
	}
	if got := report(keyQA, "reportbad", dup); got != "ERROR_DUPLICATE_REPORT" {
		t.Errorf("a report the provider had: %q, want ERROR_DUPLICATE_REPORT", got)
	}
	later.Store(int64(16 * time.Minute))
	if got := report(keyAdmin, "reportgood", late); got != "ERROR_REPORT_NOT_RECORDED" {
		t.Errorf("a report 16 minutes after the answer: %q, want ERROR_REPORT_NOT_RECORDED", got)
	}
	if st := b.sim.Stats(); st.Calls.Report != 3 || st.ReportsBad != 2 || st.ReportsGood != 0 {
		t.Errorf("the provider got %d report calls (%d bad, %d good), want 3 (2 bad): the late one not sent",
			st.Calls.Report, st.ReportsBad, st.ReportsGood)
	}

	var st server.Stats
	b.api(t, "GET", "/v1/stats", keyAdmin, "", http.StatusOK, &st)
	byClient := map[string]server.ReportCounts{}
	for _, c := range st.Clients {
		byClient[c.Name] = c.Reports
	}
	qa := server.ReportCounts{Sent: 2, Accepted: 1, Refused: 1, RefusedByCode: map[string]int64{"ERROR_DUPLICATE_REPORT": 1}}
	want := map[string]server.ReportCounts{"qa": qa, "other": {}, "ops": {TooLate: 1}}
	if diff := cmp.Diff(want, byClient); diff != "" {
		t.Errorf("clients' reports (-want +got):\n%s", diff)
	}
	if len(st.Metrics.Providers) != 1 || st.Metrics.Providers[0].Name != "main" {
		t.Fatalf("providers: %+v", st.Metrics.Providers)
	}
	main := qa
	main.TooLate = 1
	if diff := cmp.Diff(main, st.Metrics.Providers[0].Reports); diff != "" {
		t.Errorf("main's reports (-want +got):\n%s", diff)
	}

	series := `# HELP captchaq_report_outcomes_total What came of the reports forwarded to providers, by provider, report (good, bad) and outcome.
# TYPE captchaq_report_outcomes_total counter
captchaq_report_outcomes_total{outcome="accepted",provider="main",report="bad"} 1
captchaq_report_outcomes_total{outcome="refused",provider="main",report="bad"} 1
captchaq_report_outcomes_total{outcome="too_late",provider="main",report="good"} 1
`
	ops := httptest.NewServer(b.srv.MetricsHandler())
	defer ops.Close()
	if err := testutil.ScrapeAndCompare(ops.URL+"/metrics", strings.NewReader(series), "captchaq_report_outcomes_total"); err != nil {
		t.Error(err)
	}
}

// simReport sends reportbad on captchaID to the simulator itself, with
// the provider key.
func (b *bundle) simReport(t *testing.T, captchaID string) string {
	t.Helper()
	resp, err := http.Get(b.simBase + "/res.php?" + url.Values{"key": {"provider-secret"}, "action": {"reportbad"}, "id": {captchaID}}.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return readAll(t, resp)
}
