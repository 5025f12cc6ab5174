package reservoir

import "time"

// MinLifeShare: by default a token is handed out only with at least
// 1/MinLifeShare of its kind's lifetime left, so a client has time to use
// it (Turnstile: 75 s of 300; reCAPTCHA: 30 s of 120).
const MinLifeShare = 4

// Sizer decides a reservoir's refills from its demand and solve times.
type Sizer struct {
	// Size fixes the target; 0 sizes it from the demand ("auto").
	Size int
	// Max bounds the tokens in stock and in flight together.
	Max int
	// Life is how long a token lives after it is solved; MinLife, how
	// much of it must be left when one is handed out.
	Life, MinLife time.Duration
	// Demand counts the reservoir's matching requests, hits and misses.
	Demand *Demand
	// Solves times its refills.
	Solves *SolveTimes
	// planned is when Refills was last asked.
	planned time.Time
}

// Target is how many tokens the reservoir holds in stock and in flight
// at now.
func (s *Sizer) Target(now time.Time) int {
	if s.Size > 0 {
		return min(s.Size, s.Max)
	}
	return Target(s.Demand.Rate(now), s.Solves.Quantile(SolveQuantile), s.Life-s.MinLife, s.Max)
}

// Refills is how many solves to start at now, with stock tokens that may
// still be handed out and inflight solves running, and room threads free
// for refills: what the target lacks, within room. An auto-sized
// reservoir starts refills only while its demand is live (Demand.Live: a
// request since the last call, or a silence no longer than the window's
// longest gap between requests), so when the demand stops, refills stop
// starting within one gap, even when too few threads left the target
// unmet, and the last one ends within a solve time after that.
func (s *Sizer) Refills(now time.Time, stock, inflight, room int) int {
	since := s.planned
	s.planned = now
	if s.Size <= 0 && !s.Demand.Live(now, since) {
		return 0
	}
	return max(min(s.Target(now)-stock-inflight, room), 0)
}
