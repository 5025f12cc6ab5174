package poller

import (
	"errors"
	"sync"
	"time"

	"github.com/captchaq/captchaq/internal/lane"
	"github.com/captchaq/captchaq/internal/startstop"
	"github.com/captchaq/captchaq/provider"
)

// parallel bounds poll requests in flight within one round.
const parallel = 4

// round polls, in bulk, every task due before the next round: asking for
// an id a little early costs nothing in a bulk request, while leaving it
// for the next round would let its answer sit ready for up to a whole
// interval.
func (p *Poller[T]) round(now time.Time) {
	idle := !p.busy.Load()
	each := p.eachID()
	p.mu.Lock()
	p.last = now
	chunks := chunksOf(p.dueLocked(now, idle))
	p.mu.Unlock()
	// Chunks go out a few at a time, so a plan with thousands of threads
	// still gets through a round within the interval.
	var (
		pool = startstop.NewPool(parallel)
		fmu  sync.Mutex
		fail error
		fAt  time.Time
		fEp  int
		ok   bool
	)
	for _, chunk := range chunks {
		chunkIDs := make([]string, len(chunk))
		for i, e := range chunk {
			chunkIDs[i] = e.captchaID
		}
		pool.Go(func() {
			epoch := p.sink.Epoch()
			res, err := p.cfg.Lane.Provider().PollMany(p.cfg.Requests, chunkIDs)
			at := p.cfg.Now()
			if each {
				// Its requests went out one by one, some well after the
				// round began: the gap of each id runs from this answer,
				// which came after all of them, so the service never sees
				// one id polled twice within PollGap however long a round
				// takes.
				p.mu.Lock()
				for _, e := range chunk {
					e.polledAt = at
				}
				p.mu.Unlock()
			}
			fmu.Lock()
			if err != nil {
				fail, fAt, fEp = err, at, epoch
			} else {
				ok = true
			}
			fmu.Unlock()
			if err != nil {
				return
			}
			for i, e := range chunk {
				if i < len(res) {
					p.handle(e, chunkIDs[i], res[i], now, at, epoch)
				}
			}
		})
	}
	pool.Wait()
	if ok {
		p.mu.Lock()
		p.failures = 0
		p.mu.Unlock()
		if p.cfg.Lane.Health.Answered() {
			p.sink.Recovered()
		}
	}
	if fail != nil && p.cfg.Requests.Err() == nil {
		p.failed(fail, fAt, fEp)
	}
}

// failed acts on a round that failed as a whole.
func (p *Poller[T]) failed(err error, now time.Time, epoch int) {
	var pe *provider.Error
	errors.As(err, &pe)
	switch provider.ClassOf(err) {
	case provider.ClassAccount:
		p.sink.RoundFailed(err, now, epoch)
	case provider.ClassRateLimit:
		wait := p.cfg.PollInterval
		if pe != nil && pe.RetryAfter > 0 {
			wait = pe.RetryAfter
		}
		p.mu.Lock()
		p.pollsHeldUntil = now.Add(wait)
		p.mu.Unlock()
		p.cfg.Logger.Warn("provider rate limit: polls held", "for", wait)
	default:
		if lane.TransportFailure(err) {
			p.sink.RoundFailed(err, now, epoch)
		}
		p.mu.Lock()
		p.failures++
		n := p.failures
		p.pollsHeldUntil = now.Add(p.cfg.Backoff(n))
		p.mu.Unlock()
		p.cfg.Logger.Warn("poll failed; retrying", "provider", p.cfg.Lane.Name(), "err", err, "retry", n)
	}
}

// handle acts on the poll result for captchaID, e's id when the round
// started at sent asked for it, answered at at.
func (p *Poller[T]) handle(e *entry[T], captchaID string, r provider.PollResult, sent, at time.Time, epoch int) {
	switch {
	case r.Ready:
		p.mu.Lock()
		if p.holdForBindingsLocked(e, r, sent) {
			p.mu.Unlock()
			return
		}
		lastPoll := e.lastPoll
		p.mu.Unlock()
		if p.sink.Ready(e.ref, captchaID, r.Answer, at, lastPoll) && p.cfg.Adaptive {
			p.mu.Lock()
			p.learned.Learn(e.kind, e.submitted, lastPoll, at)
			p.mu.Unlock()
		}
	case r.Err != nil:
		switch provider.ClassOf(r.Err) {
		case provider.ClassUnsolvable, provider.ClassTask, provider.ClassAccount:
			p.sink.Refused(e.ref, captchaID, r.Err, at, epoch)
		default:
			p.mu.Lock()
			e.due = at.Add(p.cfg.PollInterval)
			p.mu.Unlock()
		}
	default:
		p.mu.Lock()
		e.lastPoll = at
		// Due again with the rest of its round: tasks polled together stay
		// together, so one request per PollInterval covers them all.
		e.due = sent.Add(p.cfg.Repoll)
		p.mu.Unlock()
	}
}
