package amqp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/startstop"
)

// replyReceiver takes a gateway's reply queue: each result, or dead
// letter of one of its tasks, goes to the task recorder, is acked once
// recorded and then told (deliver, the server's onResult). It holds no
// state of its own.
type replyReceiver struct {
	log      *slog.Logger
	reply    string // the reply queue
	ids      wireIDs
	prefetch int // GatewayConfig.Prefetch
	tasks    *taskRecorder
	deliver  func(captchaq.Result)
	// reports, when set (Gateway.AttachReports), is told what came of
	// each report the gateway published, as workers answer.
	reports func(captchaq.ReportOutcome)
}

// receive hands each delivery of the reply queue to a handler of its own,
// at most Prefetch at once, until ctx ends (Shutdown); it returns once the
// handlers have.
func (rr *replyReceiver) receive(ctx context.Context, k *Consumer) {
	handlers := startstop.NewPool(rr.prefetch)
	defer handlers.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case d, ok := <-k.Deliveries():
			if !ok {
				return
			}
			handlers.Go(func() { rr.handle(ctx, d) })
		}
	}
}

// handle records one reply and acks it, then tells onResult. A reply that
// is not for this gateway, or that answers nothing new, is only acked. A
// store failure sends the reply back to the queue after a pause, cut
// short when ctx ends.
func (rr *replyReceiver) handle(ctx context.Context, d *Delivery) {
	if d.Type == messageTypeReportOutcome {
		rr.reportOutcome(d)
		return
	}
	r, gen, ok := rr.outcome(d)
	if !ok {
		ackAll(rr.log, d)
		return
	}
	fresh, err := rr.tasks.record(r, gen)
	pause := storeRetryAfter
	if errors.Is(err, errNotRecordedYet) {
		// The record is a round trip away: look again soon.
		pause = notRecordedRetryAfter
		rr.log.Debug("a result came before its task's record; it goes back to the reply queue", "id", r.ID)
	} else if err != nil {
		rr.log.Error("recording a result failed; it goes back to the reply queue", "id", r.ID, "err", err)
	}
	if err != nil {
		select {
		case <-time.After(pause):
		case <-ctx.Done():
		}
		if err := d.Nack(true); err != nil && !errors.Is(err, ErrStaleDelivery) {
			rr.log.Warn("nack failed", "id", r.ID, "err", err)
		}
		return
	}
	ackAll(rr.log, d)
	if fresh {
		rr.deliver(r)
	}
}

// outcome reads a reply as a result of one of this gateway's tasks, with
// the Store's id: a worker's result, or a task the broker dead-lettered
// (its TTL ran out in a task queue) turned into a failure. Dead letters of
// other gateways and those a worker made (a worker sends their result
// itself) are not outcomes. gen is the generation of the solve it answers
// (see wireIDs.wireID).
func (rr *replyReceiver) outcome(d *Delivery) (r captchaq.Result, gen string, ok bool) {
	if d.Type == messageTypeResul {
		r, err := DecodeResult(d.Body)
		if err != nil {
			rr.log.Warn("dropping a reply that is not a result", "message_id", d.MessageID, "err", err)
			return r, "", false
		}
		id, gen, ours := rr.ids.storeID(r.ID)
		if !ours {
			rr.log.Warn("dropping a result for another gateway's task", "id", r.ID)
			return r, "", false
		}
		r.ID = id
		return r, gen, true
	}
	if d.ReplyTo != rr.reply || headerString(d.Headers, HeaderReason) != "" {
		return captchaq.Result{}, "", false
	}
	m, err := d.Task()
	if err != nil {
		return captchaq.Result{}, "", false
	}
	id, gen, ours := rr.ids.storeID(m.ownID())
	death, dead := LastDeath(d.Headers)
	if !ours || !dead {
		return captchaq.Result{}, "", false
	}
	r = captchaq.Result{
		ID: id, Status: captchaq.StatusFailed, Method: m.Task.Method, Attempts: m.Attempts,
		AcceptedAt: m.Accepted, FinishedAt: time.Now(),
	}
	if death.Reason == "expired" {
		r.ErrorCode = captchaq.CodeExpired
		r.Error = "no worker took it before the task queue's TTL ran out; the broker dead-lettered it"
	} else {
		r.ErrorCode = "DEAD_LETTERED"
		r.Error = fmt.Sprintf("the broker dead-lettered it from %s (%s)", death.Queue, death.Reason)
	}
	if m.LastError != "" {
		r.Error += "; last error: " + m.LastError
	}
	return r, gen, true
}

// reportOutcome hands a worker's answer to a report on to reports.
func (rr *replyReceiver) reportOutcome(d *Delivery) {
	ackAll(rr.log, d)
	var o captchaq.ReportOutcome
	if err := json.Unmarshal(d.Body, &o); err != nil || o.Outcome == "" {
		rr.log.Warn("dropping a report outcome that is not one", "message_id", d.MessageID, "err", err)
		return
	}
	if rr.reports != nil {
		rr.reports(o)
	}
}
