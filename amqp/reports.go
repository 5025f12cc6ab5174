package amqp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
)

// ProviderReport is a client's reportbad (Good false) or reportgood about
// a solved task, by the provider's captcha id (captchaq.Result.CaptchaID)
// and, in a fleet on several providers, the provider's name
// (captchaq.Result.Provider): two providers may give the same captcha id
// to different tasks. A Gateway publishes it on Names.Reports, replying
// to its reply queue; a worker, which holds the provider keys, forwards
// it within the provider's report window (AnsweredAt is when the answer
// came) and sends its captchaq.ReportOutcome to the reply queue.
type ProviderReport struct {
	Provider   string    `json:"provider,omitempty"`
	CaptchaID  string    `json:"captcha_id"`
	Good       bool      `json:"good"`
	At         time.Time `json:"at"`
	Task       string    `json:"task,omitempty"` // the Store id
	AnsweredAt time.Time `json:"answered_at,omitzero"`
}

// messageTypeReportOutcome is the Type of a worker's reply that carries a
// captchaq.ReportOutcome.
const messageTypeReportOutcome = "report_outcome"

// reportTTL is how long a report waits for a worker: the provider takes
// reports for a limited time after the solve.
const reportTTL = time.Hour

// PublishReport publishes r on the reports queue, confirmed; a worker
// sends what came of it to replyTo (none when empty).
func (p *Publisher) PublishReport(ctx context.Context, r ProviderReport, replyTo string) error {
	if r.CaptchaID == "" {
		return errors.New("amqp: report: no captcha id")
	}
	body, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return p.Publish(ctx, "", p.c.Names().Reports, amqp091.Publishing{
		ContentType: contentTypeJSON, Timestamp: r.At, Body: body, ReplyTo: replyTo,
		Expiration: fmt.Sprint(reportTTL.Milliseconds()),
	})
}

// Report sends a client's report about the solved result r to the
// provider through the fleet (server.Config.Report): a worker forwards it
// with the provider key (WorkerConfig.Report) and sends what came of it
// back, to the function given to AttachReports.
func (g *Gateway) Report(ctx context.Context, r captchaq.Result, good bool) error {
	if err := g.life.open(); err != nil {
		return err
	}
	return g.pub.PublishReport(ctx, ProviderReport{Provider: r.Provider, CaptchaID: r.CaptchaID, Good: good,
		At: time.Now(), Task: r.ID, AnsweredAt: r.FinishedAt}, g.reply)
}

// AttachReports sets the function told what came of each report Report
// sent, as its worker answers (server.ReportOutcomer). Call it before
// Start. A report that waits on the broker past its TTL (an hour) with no
// worker to take it is never answered.
func (g *Gateway) AttachReports(onOutcome func(captchaq.ReportOutcome)) error {
	return g.life.beforeStart("AttachReports", func() { g.replies.reports = onOutcome })
}

// reportForwarder consumes the reports queue and hands each report to the
// provider. A report the provider refuses (reported already, or too
// late: not sent) is dropped with a log line; one that could not reach it
// goes back to the queue after a pause. What came of a report the
// provider answered, or that was not sent, goes to the report's reply
// queue (Delivery.ReplyTo).
type reportForwarder struct {
	k       *Consumer
	pub     *Publisher
	forward func(ctx context.Context, providerName, captchaID string, good bool, answeredAt time.Time) error
	// providers are the names of the worker's providers (nil: one,
	// unnamed). A report for a provider the worker does not have is
	// dropped: forwarding it to another would report another task.
	providers []string
	log       *slog.Logger
}

// reportRetryAfter is the pause before a report that failed on the way is
// handed back.
const reportRetryAfter = 5 * time.Second

// run forwards reports until ctx ends or the consumer closes; a report
// not yet handed on stays unacked and goes back to the queue.
func (f *reportForwarder) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case d, ok := <-f.k.Deliveries():
			if !ok {
				return
			}
			f.handle(ctx, d)
		}
	}
}

func (f *reportForwarder) handle(ctx context.Context, d *Delivery) {
	var r ProviderReport
	if err := json.Unmarshal(d.Body, &r); err != nil || r.CaptchaID == "" {
		f.log.Warn("dropping a report that is not one", "message_id", d.MessageID, "err", err)
		_ = d.Ack()
		return
	}
	if !slices.Contains(f.providers, r.Provider) && (len(f.providers) > 0 || r.Provider != "") {
		f.log.Warn("dropping a report for a provider this worker does not have; run every worker with the same --providers file",
			"provider", r.Provider, "captcha_id", r.CaptchaID)
		f.answer(ctx, d, r, captchaq.ReportNotSent, "")
		_ = d.Ack()
		return
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	err := f.forward(rctx, r.Provider, r.CaptchaID, r.Good, r.AnsweredAt)
	cancel()
	outcome, code := captchaq.ReportOutcomeOf(err)
	switch cls := provider.ClassOf(err); {
	case err == nil, outcome == captchaq.ReportTooLate, outcome == captchaq.ReportNotSent:
		f.answer(ctx, d, r, outcome, code)
		_ = d.Ack()
	case cls == provider.ClassTask || cls == provider.ClassUnsolvable:
		f.log.Warn("the provider refused a report", "captcha_id", r.CaptchaID, "good", r.Good, "err", err)
		f.answer(ctx, d, r, outcome, code)
		_ = d.Ack()
	default:
		f.log.Warn("a report could not reach the provider; it goes back to the queue", "captcha_id", r.CaptchaID, "err", err)
		select {
		case <-time.After(reportRetryAfter):
		case <-ctx.Done():
		}
		_ = d.Nack(true)
	}
}

// answer sends what came of r to the gateway that published it, when it
// asked (ReplyTo). A failed send is logged: the report is not sent to the
// provider again for it.
func (f *reportForwarder) answer(ctx context.Context, d *Delivery, r ProviderReport, outcome, code string) {
	if d.ReplyTo == "" || f.pub == nil {
		return
	}
	body, _ := json.Marshal(captchaq.ReportOutcome{Task: r.Task, Provider: r.Provider, Good: r.Good, Outcome: outcome, Code: code})
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := f.pub.Publish(pctx, "", d.ReplyTo, amqp091.Publishing{ContentType: contentTypeJSON, Type: messageTypeReportOutcome, Timestamp: time.Now(), Body: body})
	if err != nil {
		f.log.Warn("the outcome of a report did not reach its gateway", "task", r.Task, "outcome", outcome, "err", err)
	}
}
