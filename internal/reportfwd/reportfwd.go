// Package reportfwd forwards a client's report on a solved task
// (reportbad, reportgood) to the provider that solved it, by its captcha
// id, within the provider's report window (captchaq.ProviderConfig's
// ReportWindow): a report past it is not sent and costs no call. serve
// forwards through it, and so does each worker of a fleet.
package reportfwd

import (
	"context"
	"fmt"
	"time"

	"github.com/captchaq/captchaq"
)

// reporter is a Provider that takes reports.
type reporter interface {
	ReportGood(ctx context.Context, captchaID string) error
	ReportBad(ctx context.Context, captchaID string) error
}

// target is one provider and its report window (0: none).
type target struct {
	p      captchaq.Provider
	window time.Duration
}

// Forwarder sends reports to a queue's providers. It is safe for
// concurrent use.
type Forwarder struct {
	byName map[string]target
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// New builds the Forwarder of qc's providers: each of qc.Providers by its
// Name, or qc.Provider under "".
func New(qc captchaq.Config) *Forwarder {
	f := &Forwarder{byName: map[string]target{}, Now: time.Now}
	if len(qc.Providers) == 0 {
		f.byName[""] = target{p: qc.Provider, window: captchaq.PublishedReportWindow(qc.Provider)}
	}
	for _, p := range qc.Providers {
		f.byName[p.Name] = target{p: p.Provider, window: windowOf(p.ReportWindow, captchaq.PublishedReportWindow(p.Provider))}
	}
	return f
}

// windowOf is set unless it is 0, else published; negative is none.
func windowOf(set, published time.Duration) time.Duration {
	if set == 0 {
		set = published
	}
	return max(set, 0)
}

// Window is the report window of the provider named providerName (0:
// none, or no such provider).
func (f *Forwarder) Window(providerName string) time.Duration {
	return f.byName[providerName].window
}

// Forward sends a report (good: reportgood) on captchaID to the provider
// named providerName, never to another: two providers may give the same
// captcha id to different tasks. answeredAt is when the answer came
// (captchaq.Result.FinishedAt). The error is captchaq.ErrReportNotSent
// (no captcha id, no such provider), captchaq.ErrReportTooLate (past the
// provider's window: not sent), or the provider's; classify it with
// captchaq.ReportOutcomeOf.
func (f *Forwarder) Forward(ctx context.Context, providerName, captchaID string, good bool, answeredAt time.Time) error {
	t, known := f.byName[providerName]
	pc, ok := t.p.(reporter)
	switch {
	case captchaID == "":
		return fmt.Errorf("%w: the result has no captcha id", captchaq.ErrReportNotSent)
	case !known || !ok:
		return fmt.Errorf("%w: no provider %q to report to", captchaq.ErrReportNotSent, providerName)
	}
	if age := f.Now().Sub(answeredAt); t.window > 0 && !answeredAt.IsZero() && age > t.window {
		return fmt.Errorf("%w: %v after the answer; provider %q takes reports within %v",
			captchaq.ErrReportTooLate, age.Round(time.Second), providerName, t.window)
	}
	if good {
		return pc.ReportGood(ctx, captchaID)
	}
	return pc.ReportBad(ctx, captchaID)
}

// ForwardResult is Forward of the solved result r, to r.Provider by
// r.CaptchaID, answered at r.FinishedAt (server.Config.Report); the error
// names the task.
func (f *Forwarder) ForwardResult(ctx context.Context, r captchaq.Result, good bool) error {
	if err := f.Forward(ctx, r.Provider, r.CaptchaID, good, r.FinishedAt); err != nil {
		return fmt.Errorf("task %s: %w", r.ID, err)
	}
	return nil
}
