package reservoir

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Spec is one reservoir as a Pool runs it.
type Spec struct {
	// Name names it in refill ids, counts and the store's stock.
	Name string
	// Key is the fingerprint of the requests it answers (the task's
	// method and solving params, hashed by the caller).
	Key string
	// Clients are the tenants that may draw from it; empty: all.
	Clients []string
	// Size, Max, Life and MinLife are the Sizer's.
	Size, Max     int
	Life, MinLife time.Duration
	// Solve is the solve time planned on before a refill is timed.
	Solve time.Duration
}

// Counts are one reservoir's numbers at one moment.
type Counts struct {
	Name string
	// Target is what the sizer holds in stock and in flight; Stock the
	// tokens that may be handed out, as the store last counted them;
	// InFlight the refills running.
	Target, Stock, InFlight int
	// Hits and Misses count the draws: a hit takes a token, a miss is an
	// ordinary task.
	Hits, Misses int64
	// TimeToToken is from a matching request to its token's answer, hits
	// (about 0) and misses (a solve) alike: the median and the 99th
	// percentile of the latest.
	TimeToTokenP50, TimeToTokenP99 time.Duration
	// Solved counts refills solved, HandedOut tokens taken, Expired
	// tokens aged out unused, Failed refills that failed.
	Solved, HandedOut, Expired, Failed int64
}

// Refill is a refill to submit: the reservoir's name and the task's id.
type Refill struct {
	Reservoir string
	ID        string
}

// RefillPrefix starts the id of every refill task: "reservoir-NAME-…".
const RefillPrefix = "reservoir-"

// tokenSamples is how many of the latest times to token a reservoir's
// quantiles are taken over: a p99 needs a few hundred.
const tokenSamples = 1000

// A reservoir whose refills fail holds its next refills back: failHold
// after one failure, twice as long after each failure in a row, at most
// failHoldMax. A template the provider cannot solve (a wrong sitekey)
// costs a refill a minute, not the whole share every second.
const (
	failHold    = time.Second
	failHoldMax = time.Minute
)

// maxMisses bounds the misses a Pool times at once; past it, a miss is
// counted but not timed.
const maxMisses = 10000

// Pool runs a queue's reservoirs: which requests draw from which, the
// refills each needs and the refills in flight, and their counts. It reads
// no clock and no store: the caller passes the time, the store's stock
// and what it dropped. All methods are safe for concurrent use (one lock).
type Pool struct {
	mu     sync.Mutex
	limit  int // refills in flight at most, all reservoirs together
	list   []*pool
	byKey  map[string]*pool
	byName map[string]*pool
	// inflight are the refills running, by task id; misses the misses
	// not yet answered, by task id.
	inflight map[string]*pool
	misses   map[string]miss
	seq      int64
}

// pool is one reservoir's state in a Pool.
type pool struct {
	spec    Spec
	clients map[string]bool // nil: all
	gone    bool            // swapped out: its refills stock nowhere
	sizer   Sizer
	toToken *SolveTimes
	stock   int
	// fails counts the refills failed in a row; none starts before
	// holdUntil.
	fails     int
	holdUntil time.Time
	inflight,
	hits, misses, solved, handed, expired, failed int64
}

type miss struct {
	p  *pool
	at time.Time
}

// NewPool returns a Pool of specs whose refills take at most limit threads
// at once. Names and keys are unique (the caller checks them).
func NewPool(specs []Spec, limit int) *Pool {
	pl := &Pool{limit: limit, inflight: map[string]*pool{}, misses: map[string]miss{}}
	pl.Swap(specs)
	return pl
}

// Change is what a Swap changed, by reservoir name.
type Change struct {
	// Added are new names; Removed names gone; Changed names kept with
	// a new size, max, min life or clients (their counts, demand and
	// stock stay). A name whose Key changed is both removed and added:
	// it starts afresh.
	Added, Removed, Changed []string
}

// Empty reports whether the Swap changed nothing.
func (c Change) Empty() bool {
	return len(c.Added)+len(c.Removed)+len(c.Changed) == 0
}

// Swap makes specs the pool's reservoirs. A name kept with its Key keeps
// its counts, demand, solve times and refills in flight; the stock of a
// removed one (in Change.Removed) is the caller's to drop, and its
// refills still running are answered as refills but stocked nowhere
// (Finished returns no name). Names and keys are unique (the caller
// checks them).
func (pl *Pool) Swap(specs []Spec) Change {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	var ch Change
	list, byKey, byName := make([]*pool, 0, len(specs)), map[string]*pool{}, map[string]*pool{}
	for _, s := range specs {
		p := pl.byName[s.Name]
		switch {
		case p == nil:
			ch.Added = append(ch.Added, s.Name)
			p = &pool{toToken: &SolveTimes{size: tokenSamples},
				sizer: Sizer{Demand: NewDemand(0), Solves: NewSolveTimes(s.Solve)}}
		case p.spec.Key != s.Key:
			ch.Removed, ch.Added = append(ch.Removed, s.Name), append(ch.Added, s.Name)
			p.gone = true
			p = &pool{toToken: &SolveTimes{size: tokenSamples},
				sizer: Sizer{Demand: NewDemand(0), Solves: NewSolveTimes(s.Solve)}}
		case p.spec.Size != s.Size || p.spec.Max != s.Max || p.spec.MinLife != s.MinLife ||
			!slices.Equal(p.spec.Clients, s.Clients):
			ch.Changed = append(ch.Changed, s.Name)
		}
		p.spec = s
		p.sizer.Size, p.sizer.Max, p.sizer.Life, p.sizer.MinLife = s.Size, s.Max, s.Life, s.MinLife
		p.clients = nil
		if len(s.Clients) > 0 {
			p.clients = map[string]bool{}
			for _, c := range s.Clients {
				p.clients[c] = true
			}
		}
		list = append(list, p)
		byKey[s.Key], byName[s.Name] = p, p
	}
	for _, p := range pl.list {
		if byName[p.spec.Name] == nil {
			ch.Removed = append(ch.Removed, p.spec.Name)
			p.gone = true
		}
	}
	pl.list, pl.byKey, pl.byName = list, byKey, byName
	return ch
}

// Draw is a request of key from tenant at now: when a reservoir answers
// key and tenant may draw from it, its demand counts the request and Draw
// returns its name and the least expiry a token handed out must have
// (now + MinLife). The caller takes a token and says Hit or Miss.
func (pl *Pool) Draw(key, tenant string, now time.Time) (name string, notBefore time.Time, ok bool) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	p := pl.byKey[key]
	if p == nil || (p.clients != nil && !p.clients[tenant]) {
		return "", time.Time{}, false
	}
	p.sizer.Demand.Arrive(now)
	return p.spec.Name, now.Add(p.spec.MinLife), true
}

// Hit counts a draw of name that took a token, answered took after the
// request.
func (pl *Pool) Hit(name string, took time.Duration) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if p := pl.byName[name]; p != nil {
		p.hits++
		p.handed++
		p.toToken.Add(took)
	}
}

// Miss counts a draw of name at that found no token: task id is an
// ordinary task, timed until Finished is told of it.
func (pl *Pool) Miss(name, id string, at time.Time) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	p := pl.byName[name]
	if p == nil {
		return
	}
	p.misses++
	if len(pl.misses) < maxMisses {
		pl.misses[id] = miss{p, at}
	}
}

// Expired counts n tokens of name aged out unused: the store dropped them.
func (pl *Pool) Expired(name string, n int) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if p := pl.byName[name]; p != nil {
		p.expired += int64(n)
	}
}

// Plan takes stock (the store's counts by name, of tokens that may be
// handed out) at now and returns the refills to submit: each reservoir's
// Sizer.Refills, within the threads its limit leaves, in the order of
// the specs. The refills are in flight from now: tell Unsent of one that
// is not submitted after all.
func (pl *Pool) Plan(now time.Time, stock map[string]int) []Refill {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	room := pl.limit - len(pl.inflight)
	var out []Refill
	for _, p := range pl.list {
		p.stock = stock[p.spec.Name]
		if now.Before(p.holdUntil) {
			continue
		}
		n := p.sizer.Refills(now, p.stock, int(p.inflight), max(room, 0))
		for range n {
			pl.seq++
			id := fmt.Sprintf("%s%s-%d-%d", RefillPrefix, p.spec.Name, now.UnixNano(), pl.seq)
			pl.inflight[id] = p
			p.inflight++
			out = append(out, Refill{Reservoir: p.spec.Name, ID: id})
		}
		room -= n
	}
	return out
}

// Unsent takes refill id, which Plan returned, out of flight: it was
// not submitted.
func (pl *Pool) Unsent(id string) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if p := pl.inflight[id]; p != nil {
		delete(pl.inflight, id)
		p.inflight--
	}
}

// Resume counts task id in flight when it is a refill of one of the
// pool's reservoirs (a task pending in the store at a restart), and
// reports whether it is.
func (pl *Pool) Resume(id string) bool {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	p := pl.byName[RefillOf(id)]
	if p == nil || pl.inflight[id] != nil {
		return p != nil
	}
	pl.inflight[id] = p
	p.inflight++
	return true
}

// RefillOf is the name of the reservoir whose refill task id is, or ""
// for a task that is not one: ids are RefillPrefix, the name, then two
// numbers (names may hold '-').
func RefillOf(id string) string {
	rest, ok := strings.CutPrefix(id, RefillPrefix)
	if !ok {
		return ""
	}
	for range 2 {
		i := strings.LastIndexByte(rest, '-')
		if i < 0 {
			return ""
		}
		rest = rest[:i]
	}
	return rest
}

// Finished is told that task id finished at, solved or not, took after
// it was accepted. For a refill it counts the solve (timed for the sizer)
// or the failure (which holds the reservoir's refills back), and returns
// its reservoir's name ("" for one Swap removed) and true: the caller
// stocks a solved one's token. For a miss it times the request.
func (pl *Pool) Finished(id string, solved bool, took time.Duration, at time.Time) (name string, refill bool) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if p := pl.inflight[id]; p != nil {
		delete(pl.inflight, id)
		p.inflight--
		if solved {
			p.solved++
			p.fails, p.holdUntil = 0, time.Time{}
			p.sizer.Solves.Add(took)
		} else {
			p.failed++
			p.fails++
			p.holdUntil = at.Add(min(failHold<<min(p.fails-1, 16), failHoldMax))
		}
		if p.gone {
			return "", true
		}
		return p.spec.Name, true
	}
	if m, ok := pl.misses[id]; ok {
		delete(pl.misses, id)
		if solved {
			m.p.toToken.Add(at.Sub(m.at))
		}
	}
	return "", false
}

// Counts returns each reservoir's counts at now, in the order of the
// specs.
func (pl *Pool) Counts(now time.Time) []Counts {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	out := make([]Counts, 0, len(pl.list))
	for _, p := range pl.list {
		out = append(out, Counts{
			Name: p.spec.Name, Target: p.sizer.Target(now), Stock: p.stock, InFlight: int(p.inflight),
			Hits: p.hits, Misses: p.misses, Solved: p.solved, HandedOut: p.handed, Expired: p.expired, Failed: p.failed,
			TimeToTokenP50: p.toToken.Quantile(0.5), TimeToTokenP99: p.toToken.Quantile(0.99),
		})
	}
	return out
}
