package lane

import (
	"sync"
	"time"

	"github.com/captchaq/captchaq/provider"
)

// SpendWindow is the window MaxSpendPerHour bounds.
const SpendWindow = time.Hour

// ZeroBalanceStreak is how many ERROR_ZERO_BALANCE refusals in a row,
// with nothing in flight here, pause the lane.
const ZeroBalanceStreak = 10

// Ledger is a lane's submits and what they cost: the submits in progress
// and their prices, the prices of submits accepted in the last hour (for
// MaxSpendPerHour), the counts and spend Stats reports, and the run of
// zero-balance refusals. Its methods are safe for concurrent use and
// never call out.
type Ledger struct {
	maxSpendPerHour float64

	mu                sync.Mutex
	submits           int     // submit requests in progress
	launching         float64 // their prices
	reserved          []spendEntry
	zeroBalanceStreak int // ERROR_ZERO_BALANCE refusals in a row with nothing in flight here
	counts            counts
}

// counts are a ledger's totals: submits accepted, results solved and
// failed, tasks moved elsewhere, and the spend of solves.
type counts struct {
	submitted, solved, failed, moved int64
	spend                            float64
}

type spendEntry struct {
	at    time.Time
	price float64
}

// spentLocked is what the lane reserved in the hour before now.
func (g *Ledger) spentLocked(now time.Time) float64 {
	cut := now.Add(-SpendWindow)
	i := 0
	for i < len(g.reserved) && !g.reserved[i].at.After(cut) {
		i++
	}
	g.reserved = g.reserved[i:]
	var s float64
	for _, e := range g.reserved {
		s += e.price
	}
	return s
}

// Affords reports whether a solve at price fits under MaxSpendPerHour at
// now, with the submits in progress; when it does not, retry is when the
// oldest reserved solve leaves the hour (zero: not by waiting).
func (g *Ledger) Affords(now time.Time, price float64) (ok bool, retry time.Time) {
	if g.maxSpendPerHour <= 0 {
		return true, time.Time{}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.spentLocked(now)+g.launching+price <= g.maxSpendPerHour+1e-9 {
		return true, time.Time{}
	}
	if len(g.reserved) > 0 {
		return false, g.reserved[0].at.Add(SpendWindow)
	}
	return false, time.Time{}
}

// Submits is how many submits are in progress.
func (g *Ledger) Submits() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.submits
}

// StartSubmit counts a submit in progress at price.
func (g *Ledger) StartSubmit(price float64) {
	g.mu.Lock()
	g.submits++
	g.launching += price
	g.mu.Unlock()
}

// EndSubmit ends a submit StartSubmit counted.
func (g *Ledger) EndSubmit(price float64) {
	g.mu.Lock()
	g.submits--
	g.launching -= price
	g.mu.Unlock()
}

// Accepted counts a submit the provider accepted at now, with its price
// against the hourly bound, and ends any run of zero-balance refusals.
func (g *Ledger) Accepted(now time.Time, price float64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.counts.submitted++
	g.zeroBalanceStreak = 0
	if price > 0 {
		g.reserved = append(g.reserved, spendEntry{at: now, price: price})
	}
}

// Finished counts a task's final result whose last attempt was here.
func (g *Ledger) Finished(solved bool, price float64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if solved {
		g.counts.solved++
		g.counts.spend += price
	} else {
		g.counts.failed++
	}
}

// Moved counts tasks in flight here submitted elsewhere, and the spend of
// their abandoned solves.
func (g *Ledger) Moved(n int, spend float64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.counts.moved += int64(n)
	g.counts.spend += spend
}

// ZeroBalance counts a refusal with code while inflight tasks are in
// flight here, and reports whether the run of zero-balance refusals is
// long enough to pause.
func (g *Ledger) ZeroBalance(code string, inflight int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if code != provider.ErrZeroBalance.Code || inflight > 0 {
		g.zeroBalanceStreak = 0
		return false
	}
	g.zeroBalanceStreak++
	if g.zeroBalanceStreak < ZeroBalanceStreak {
		return false
	}
	g.zeroBalanceStreak = 0
	return true
}

// totals reports at once the ledger's counts and what was spent in the
// hour before now.
func (g *Ledger) totals(now time.Time) (c counts, lastHour float64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.counts, g.spentLocked(now)
}
