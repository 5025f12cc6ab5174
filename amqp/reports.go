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

	"github.com/captchaq/captchaq/provider"
)

// ProviderReport is a client's reportbad (Good false) or reportgood about
// a solved task, by the provider's captcha id (captchaq.Result.CaptchaID)
// and, in a fleet on several providers, the provider's name
// (captchaq.Result.Provider): two providers may give the same captcha id
// to different tasks. A Gateway publishes it on Names.Reports; a worker,
// which holds the provider keys, forwards it.
type ProviderReport struct {
	Provider  string    `json:"provider,omitempty"`
	CaptchaID string    `json:"captcha_id"`
	Good      bool      `json:"good"`
	At        time.Time `json:"at"`
}

// reportTTL is how long a report waits for a worker: the provider takes
// reports for a limited time after the solve.
const reportTTL = time.Hour

// PublishReport publishes r on the reports queue, confirmed.
func (p *Publisher) PublishReport(ctx context.Context, r ProviderReport) error {
	if r.CaptchaID == "" {
		return errors.New("amqp: report: no captcha id")
	}
	body, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return p.Publish(ctx, "", p.c.Names().Reports, amqp091.Publishing{
		ContentType: contentTypeJSON, Timestamp: r.At, Body: body,
		Expiration: fmt.Sprint(reportTTL.Milliseconds()),
	})
}

// Report sends a client's report about a solved task to the provider
// through the fleet (server.Config.Report): a worker forwards it with the
// provider key (WorkerConfig.Report). providerName is the result's
// Provider: empty in a fleet on one provider.
func (g *Gateway) Report(ctx context.Context, providerName, captchaID string, good bool) error {
	if err := g.life.open(); err != nil {
		return err
	}
	return g.pub.PublishReport(ctx, ProviderReport{Provider: providerName, CaptchaID: captchaID, Good: good, At: time.Now()})
}

// reportForwarder consumes the reports queue and hands each report to the
// provider. A report the provider refuses (too late, reported already) is
// dropped with a log line; one that could not reach it goes back to the
// queue after a pause.
type reportForwarder struct {
	k       *Consumer
	forward func(ctx context.Context, providerName, captchaID string, good bool) error
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
		_ = d.Ack()
		return
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	err := f.forward(rctx, r.Provider, r.CaptchaID, r.Good)
	cancel()
	switch cls := provider.ClassOf(err); {
	case err == nil:
		_ = d.Ack()
	case cls == provider.ClassTask || cls == provider.ClassUnsolvable:
		f.log.Warn("the provider refused a report", "captcha_id", r.CaptchaID, "good", r.Good, "err", err)
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
