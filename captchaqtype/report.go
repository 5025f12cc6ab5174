package captchaqtype

import (
	"errors"

	"github.com/captchaq/captchaq/provider"
)

// What came of a client's report (reportbad, reportgood) forwarded to the
// provider, in ReportOutcome.Outcome. A report is sent when the outcome
// is ReportAccepted, ReportRefused or ReportFailed.
const (
	// ReportAccepted: the provider recorded it (OK_REPORT_RECORDED,
	// errorId 0).
	ReportAccepted = "accepted"
	// ReportRefused: the provider answered an error code (ReportOutcome.Code:
	// ERROR_REPORT_NOT_RECORDED, ERROR_DUPLICATE_REPORT, ...).
	ReportRefused = "refused"
	// ReportFailed: sent, and no answer came (network, 5xx, an answer that
	// is not one).
	ReportFailed = "failed"
	// ReportTooLate: past the provider's ProviderConfig.ReportWindow; not
	// sent, so it costs no call.
	ReportTooLate = "too_late"
	// ReportNotSent: no captcha id, or no provider of that name to send it
	// to.
	ReportNotSent = "not_sent"
)

// ReportOutcomes are the outcomes in the order /v1/stats and the
// dashboard show them.
var ReportOutcomes = []string{ReportAccepted, ReportRefused, ReportFailed, ReportTooLate, ReportNotSent}

var (
	// ErrReportTooLate: a report past its provider's ReportWindow, not
	// sent (ReportTooLate).
	ErrReportTooLate = errors.New("captchaq: report past the provider's report window; not sent")
	// ErrReportNotSent: a report with nowhere to go (ReportNotSent): no
	// captcha id, or no provider of its name.
	ErrReportNotSent = errors.New("captchaq: report not sent")
)

// ReportOutcome is what came of one client's report.
type ReportOutcome struct {
	// Task is the reported task's Store id ("<client>/<id>" behind
	// server.Server).
	Task     string `json:"task"`
	Provider string `json:"provider,omitempty"`
	Good     bool   `json:"good"`
	// Outcome is one of ReportOutcomes; Code is the provider's error code
	// when it is ReportRefused.
	Outcome string `json:"outcome"`
	Code    string `json:"code,omitempty"`
}

// ReportOutcomeOf classifies the error of forwarding a report: nil is
// ReportAccepted, ErrReportTooLate ReportTooLate, ErrReportNotSent
// ReportNotSent, a provider's error code (a *provider.Error of a task's
// or an account's class) ReportRefused with the code, anything else
// ReportFailed.
func ReportOutcomeOf(err error) (outcome, code string) {
	var pe *provider.Error
	switch {
	case err == nil:
		return ReportAccepted, ""
	case errors.Is(err, ErrReportTooLate):
		return ReportTooLate, ""
	case errors.Is(err, ErrReportNotSent):
		return ReportNotSent, ""
	case errors.As(err, &pe) && pe.Class != provider.ClassTransient:
		return ReportRefused, pe.Code
	}
	return ReportFailed, ""
}
