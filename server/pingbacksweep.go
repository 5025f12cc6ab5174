package server

import (
	"context"
	"time"

	"github.com/captchaq/captchaq/internal/startstop"
)

// pingbackSweepMax bounds the pingbacks one sweep claims.
const pingbackSweepMax = 100

// pingbackSweepEvery is how often the sweeper looks for pingbacks owed
// past the grace period: every grace, at most this.
const pingbackSweepEvery = 5 * time.Second

// sweep is the sweeper's loop: every min(grace, pingbackSweepEvery) it
// claims, with a lease, the pingbacks owed for longer than the grace
// period (their recorder died, or could not mark them: see
// pingbackSender) and queues them to their clients' senders. Any replica
// may claim one; the lease gives it to one.
func (ps *pingbackSender) sweep(ctx context.Context) {
	startstop.Every(ctx, min(ps.p.grace, pingbackSweepEvery), ps.sweepOnce)
}

func (ps *pingbackSender) sweepOnce(ctx context.Context) {
	lease := ps.lease()
	recs, err := ps.p.ledger.ClaimPingbacks(ctx, ps.p.grace, lease, pingbackSweepMax)
	if err != nil {
		if ctx.Err() == nil {
			ps.p.log.Warn("client pingbacks owed: claim failed; trying again at the next sweep", "err", err)
		}
		return
	}
	// A send begun by then ends within the lease: lease() is its
	// attempts plus the grace period.
	sendBy := time.Now().Add(ps.p.grace)
	for _, rec := range recs {
		if rec.Result == nil {
			continue
		}
		_, local := splitID(rec.Task.ID)
		ps.p.log.Info("client pingback owed past its grace period: sending it", "id", rec.Task.ID)
		ps.enqueueJob(pingbackJob{store: ps.p.store, res: scrubResult(*rec.Result), local: local, claimed: &rec, sendBy: sendBy})
	}
}

// start starts the sweeper, with a ledger.
func (ps *pingbackSender) start() {
	if ps.sweeper != nil {
		_ = ps.sweeper.Start(context.Background())
	}
}

// stopSweeper stops the sweeper and waits for a sweep under way.
func (ps *pingbackSender) stopSweeper() {
	if ps.sweeper != nil {
		ps.sweeper.Stop()
	}
}
