package reportfwd_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/reportfwd"
	"github.com/captchaq/captchaq/provider"
)

// fakeProvider takes reports and remembers them; window is its published
// report window.
type fakeProvider struct {
	captchaq.Provider
	window time.Duration
	got    []string
}

func (p *fakeProvider) ReportWindow() time.Duration { return p.window }

func (p *fakeProvider) ReportGood(_ context.Context, id string) error {
	p.got = append(p.got, "good "+id)
	return nil
}

func (p *fakeProvider) ReportBad(_ context.Context, id string) error {
	p.got = append(p.got, "bad "+id)
	if id == "dup" {
		return provider.ErrDuplicateReport
	}
	return nil
}

// A report goes to the provider it names within that provider's window:
// the one set, else the one it publishes, none when negative. A report
// past it, for no provider or with no captcha id makes no call.
func TestForward(t *testing.T) {
	t.Parallel()
	set, published, none := &fakeProvider{window: time.Hour}, &fakeProvider{window: time.Minute}, &fakeProvider{window: time.Minute}
	f := reportfwd.New(captchaq.Config{Providers: []captchaq.ProviderConfig{
		{Name: "set", Provider: set, ReportWindow: 10 * time.Minute},
		{Name: "published", Provider: published},
		{Name: "none", Provider: none, ReportWindow: -1},
	}})
	answered := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	now := answered
	f.Now = func() time.Time { return now }
	for _, tc := range []struct {
		name, provider, id string
		after              time.Duration
		outcome, code      string
	}{
		{"in time", "set", "1", 10 * time.Minute, captchaq.ReportAccepted, ""},
		{"past the window set", "set", "2", 10*time.Minute + time.Second, captchaq.ReportTooLate, ""},
		{"in the published window", "published", "3", time.Minute, captchaq.ReportAccepted, ""},
		{"past the published window", "published", "4", time.Minute + time.Second, captchaq.ReportTooLate, ""},
		{"no window", "none", "5", 24 * time.Hour, captchaq.ReportAccepted, ""},
		{"refused", "none", "dup", 0, captchaq.ReportRefused, "ERROR_DUPLICATE_REPORT"},
		{"unknown provider", "gone", "6", 0, captchaq.ReportNotSent, ""},
		{"no captcha id", "set", "", 0, captchaq.ReportNotSent, ""},
	} {
		now = answered.Add(tc.after)
		err := f.Forward(t.Context(), tc.provider, tc.id, false, answered)
		if outcome, code := captchaq.ReportOutcomeOf(err); outcome != tc.outcome || code != tc.code {
			t.Errorf("%s: %v: outcome %s %s, want %s %s", tc.name, err, outcome, code, tc.outcome, tc.code)
		}
	}
	calls := [][]string{set.got, published.got, none.got}
	if diff := cmp.Diff([][]string{{"bad 1"}, {"bad 3"}, {"bad 5", "bad dup"}}, calls); diff != "" {
		t.Errorf("calls at set, published, none (-want +got):\n%s", diff)
	}
	if err := f.Forward(t.Context(), "set", "7", true, answered.Add(-time.Hour)); !errors.Is(err, captchaq.ErrReportTooLate) {
		t.Errorf("a good report an hour late: %v", err)
	}
}
