package captchaq

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"sync"
	"time"

	"github.com/captchaq/captchaq/internal/reservoir"
	"github.com/captchaq/captchaq/internal/startstop"
	"github.com/captchaq/captchaq/provider"
)

// A reservoir keeps tokens of one captcha solved ahead of demand
// (Config.Reservoirs): a submitted task that asks for that captcha takes
// one and is answered at once. internal/reservoir owns the state (the
// demand, the sizing, the refills in flight, the counts); the tokens live
// in the Store (ReservoirStore). This file is the queue's side: the
// config, the draw at intake, the refill loop, and a refill's result.

// reservoirTick is how often the refill loop drops aged-out tokens and
// starts refills.
const reservoirTick = time.Second

// Reservoirs returns each reservoir's counts, in Config.Reservoirs'
// order; none without reservoirs.
func (q *Queue) Reservoirs() []ReservoirCounts {
	if q.res == nil {
		return nil
	}
	cs := q.res.pool.Counts(q.now())
	out := make([]ReservoirCounts, len(cs))
	for i, c := range cs {
		out[i] = ReservoirCounts(c)
	}
	return out
}

// checkReservoirs reports every problem of c.Reservoirs, after
// withDefaults, each naming the field and the fix; threads are the plan's.
func (c Config) checkReservoirs(threads int) []error {
	if len(c.Reservoirs) == 0 {
		return nil
	}
	var errs []error
	if _, ok := c.Store.(ReservoirStore); !ok {
		errs = append(errs, fmt.Errorf("Store: %T keeps no reservoir tokens (it is not a ReservoirStore); use the memory, SQLite or PostgreSQL store, or drop Reservoirs", c.Store))
	}
	if c.ReservoirShare <= 0 || c.ReservoirShare > 1 {
		errs = append(errs, fmt.Errorf("ReservoirShare: must be above 0 and at most 1 (default %v), got %v", ReservoirShareDefault, c.ReservoirShare))
	} else if refillThreads(c.ReservoirShare, threads) < 1 {
		errs = append(errs, fmt.Errorf("ReservoirShare: %v of %d threads leaves no thread for refills; raise it to at least %.2f", c.ReservoirShare, threads, 1/float64(max(threads, 1))))
	}
	names, keys := map[string]bool{}, map[string]string{}
	for i, rc := range c.Reservoirs {
		at := func(field, format string, args ...any) {
			errs = append(errs, fmt.Errorf("Reservoirs[%d].%s: %s", i, field, fmt.Sprintf(format, args...)))
		}
		if bad := nameProblem(rc.Name, names, "reservoir"); bad != "" {
			at("Name", "%s", bad)
		}
		life, err := c.reservoirLife(rc)
		switch {
		case err != nil:
			at("Task", "%v", err)
		case life <= 0:
			at("Task.Method", "%q answers with text that does not expire: only token types (turnstile, userrecaptcha, hcaptcha, …) can have a reservoir", rc.Task.Method)
		case rc.MinLife < 0 || rc.MinLife >= life:
			at("MinLife", "must be 0 (default %v) or more and less than the token's lifetime %v, got %v", life/reservoir.MinLifeShare, life, rc.MinLife)
		}
		if rc.Size < 0 {
			at("Size", "must be 0 (sized from demand) or more, got %d", rc.Size)
		}
		if rc.Max < rc.Size {
			at("Max", "%d is less than Size %d; raise Max or lower Size", rc.Max, rc.Size)
		}
		key := rc.Task.Fingerprint()
		if other, ok := keys[key]; ok {
			at("Task", "the same method and params as reservoir %q; merge the two (one template, one reservoir)", other)
		}
		keys[key] = rc.Name
	}
	return errs
}

// reservoirLife validates rc's template as a refill of it is validated
// and returns its type's token lifetime.
func (c Config) reservoirLife(rc ReservoirConfig) (time.Duration, error) {
	t := templateTask(rc)
	t.ID = reservoir.RefillPrefix + "template"
	var providers []ProviderConfig
	if len(c.Providers) > 0 {
		providers = c.Providers
	}
	v, err := t.CheckFor(providers)
	if err != nil {
		return 0, err
	}
	kind, err := v.Checked().KindFor(provider.KnownMethods)
	if err != nil {
		return 0, err
	}
	return provider.TokenLifetime(kind), nil
}

// templateTask is what rc's refills are sent: its task's solving fields,
// at PriorityLowest.
func templateTask(rc ReservoirConfig) Task {
	return Task{Method: rc.Task.Method, Params: rc.Task.Params, Proxy: rc.Task.Proxy, ProxyType: rc.Task.ProxyType, Priority: PriorityLowest}
}

// refillThreads is how many threads of threads refills may take at share.
func refillThreads(share float64, threads int) int {
	return int(math.Floor(share*float64(threads) + 1e-9))
}

// reservoirs is the queue's side of its reservoirs: nil without any.
type reservoirs struct {
	q     *Queue
	pool  *reservoir.Pool
	store ReservoirStore
	// mu guards templates, each reservoir's refill task, and minLife, its
	// MinLife, by name; SetReservoirs replaces both and swaps the pool's
	// reservoirs under it, so a refill planned has its template. No Store
	// call is made under it; pool.mu is taken under it.
	mu        sync.Mutex
	templates map[string]Task
	minLife   map[string]time.Duration
}

// newReservoirs builds q's reservoirs from its Config, validated.
func newReservoirs(q *Queue, threads int) *reservoirs {
	c := q.cfg
	if len(c.Reservoirs) == 0 {
		return nil
	}
	rs := &reservoirs{q: q, store: c.Store.(ReservoirStore)}
	rs.pool = reservoir.NewPool(rs.specs(c), refillThreads(c.ReservoirShare, threads))
	return rs
}

// specs sets rs's templates and min lives to c.Reservoirs' (validated)
// and returns their specs for the pool; rs.mu is held or rs is new.
func (rs *reservoirs) specs(c Config) []reservoir.Spec {
	templates, minLives := map[string]Task{}, map[string]time.Duration{}
	specs := make([]reservoir.Spec, len(c.Reservoirs))
	for i, rc := range c.Reservoirs {
		t := templateTask(rc)
		life, _ := c.reservoirLife(rc)
		minLife := rc.MinLife
		if minLife == 0 {
			minLife = life / reservoir.MinLifeShare
		}
		kind, _ := t.ProviderTask().KindFor(provider.KnownMethods)
		templates[rc.Name], minLives[rc.Name] = t, minLife
		specs[i] = reservoir.Spec{Name: rc.Name, Key: t.Fingerprint(), Clients: rc.Clients, Size: rc.Size, Max: rc.Max,
			Life: life, MinLife: minLife, Solve: provider.MedianSolveTime(kind)}
	}
	rs.templates, rs.minLife = templates, minLives
	return specs
}

// SetReservoirs makes rcs the reservoirs of a queue started with some,
// validated as Config.Reservoirs (nothing changes on an error). A
// reservoir kept by name with the same method and params keeps its stock,
// counts and refills in flight; the stock of one removed, or whose
// captcha changed, is dropped. It logs what changed.
func (q *Queue) SetReservoirs(rcs []ReservoirConfig) error {
	if q.res == nil {
		return errors.New("captchaq: Reservoirs: the queue was built without reservoirs and runs no refill loop; build it with them")
	}
	c := q.cfg
	c.Reservoirs = rcs
	c = c.withReservoirDefaults()
	if errs := c.checkReservoirs(c.threads()); len(errs) > 0 {
		return fmt.Errorf("captchaq: invalid Reservoirs: %w", errors.Join(errs...))
	}
	rs := q.res
	rs.mu.Lock()
	ch := rs.pool.Swap(rs.specs(c))
	rs.mu.Unlock()
	for _, name := range ch.Removed {
		// Tokens of a captcha no reservoir holds: none may be handed out.
		if _, err := rs.store.DropTokens(q.storeCtx(), name, q.now().Add(forever)); err != nil {
			q.log.Error("dropping a removed reservoir's tokens failed", "reservoir", name, "err", err)
		}
	}
	q.log.Info("reservoirs set", "count", len(rcs), "added", ch.Added, "removed", ch.Removed, "changed", ch.Changed)
	return nil
}

// forever is past any token's lifetime: DropTokens before now+forever
// drops a reservoir's whole stock.
const forever = 100 * 365 * 24 * time.Hour

// draw gives the new tasks of batch (not known to the Store, not
// adopted) that match a reservoir their tenant may draw from a token
// each, while there are tokens: such a task is finished at once with its
// token's answer, and recs[j] and existed[j] say so, so that the intake
// answers it as a stored, finished task. The others go on as ordinary
// tasks. It runs after Enqueue, in the intake round.
func (rs *reservoirs) draw(ctx context.Context, batch []Task, recs []Record, existed []bool, adopted func(j int) bool, now time.Time) {
	if rs == nil {
		return
	}
	q := rs.q
	for j, t := range batch {
		if existed[j] || adopted(j) || reservoir.RefillOf(t.ID) != "" {
			continue
		}
		key := recs[j].Fingerprint
		if key == "" {
			key = t.Fingerprint()
		}
		name, notBefore, ok := rs.pool.Draw(key, t.Tenant, now)
		if !ok {
			continue
		}
		tok, hit, err := rs.store.TakeToken(ctx, name, notBefore)
		if err != nil {
			q.log.Error("taking a reservoir token failed; the task is solved as any other", "reservoir", name, "id", t.ID, "err", err)
		}
		if !hit {
			rs.pool.Miss(name, t.ID, now)
			continue
		}
		r := tok
		r.ID, r.Method, r.Reservoir, r.SolveSeconds = t.ID, t.Method, name, 0
		r.AcceptedAt, r.SubmittedAt, r.FinishedAt = now, now, q.now()
		if err := q.journal.Finish(q.storeCtx(), r); err != nil {
			q.log.Error("storing a reservoir token's result failed; delivering it anyway", "reservoir", name, "id", t.ID, "err", err)
		}
		rs.pool.Hit(name, r.FinishedAt.Sub(now))
		recs[j].Status, recs[j].Result = StatusSolved, &r
		existed[j] = true
		q.metrics.Submitted()
		q.metrics.Result(true, 0, time.Time{}, r.FinishedAt)
		q.logResult(r)
		if q.cfg.OnResult != nil {
			q.cfg.OnResult(r)
		}
	}
}

// finished is told of every final result: a refill's token goes to its
// reservoir's stock (a failed refill is counted), and finished reports
// true, for the result goes to no client; a miss's answer is timed.
func (rs *reservoirs) finished(r Result) (refill bool) {
	if rs == nil {
		return false
	}
	name, refill := rs.pool.Finished(r.ID, r.Status == StatusSolved, r.FinishedAt.Sub(r.AcceptedAt), r.FinishedAt)
	if refill && name != "" && r.Status == StatusSolved {
		if err := rs.store.StockToken(rs.q.storeCtx(), name, r); err != nil {
			rs.q.log.Error("stocking a reservoir token failed; it is lost", "reservoir", name, "id", r.ID, "err", err)
		}
	}
	return refill
}

// resume counts a pending task of the Store, resumed at Start, in flight
// when it is a refill.
func (rs *reservoirs) resume(id string) {
	if rs != nil {
		rs.pool.Resume(id)
	}
}

// loop is the refill loop, started and stopped with the queue's loops.
func (rs *reservoirs) loop() *startstop.Loop {
	return startstop.New(func(ctx context.Context) { startstop.Every(ctx, reservoirTick, rs.tick) })
}

// tick drops the tokens with less than MinLife left, takes stock, and
// submits the refills the pool plans.
func (rs *reservoirs) tick(ctx context.Context) {
	q := rs.q
	now := q.now()
	rs.mu.Lock()
	minLives := rs.minLife
	rs.mu.Unlock()
	for name, minLife := range minLives {
		n, err := rs.store.DropTokens(ctx, name, now.Add(minLife))
		if err != nil {
			q.log.Error("dropping aged-out reservoir tokens failed", "reservoir", name, "err", err)
		}
		rs.pool.Expired(name, n)
	}
	stock, err := rs.store.TokenCounts(ctx)
	if err != nil {
		q.log.Error("counting reservoir tokens failed; no refill this round", "err", err)
		return
	}
	rs.mu.Lock()
	refills, templates := rs.pool.Plan(now, stock), rs.templates
	rs.mu.Unlock()
	if len(refills) == 0 {
		return
	}
	tasks := make([]Task, len(refills))
	for i, r := range refills {
		t := templates[r.Reservoir]
		t.ID, t.Params = r.ID, maps.Clone(t.Params)
		tasks[i] = t
	}
	none := func(int) func(Result, error) { return func(Result, error) {} }
	for i, err := range q.acceptBatch(ctx, tasks, none) {
		if err != nil {
			rs.pool.Unsent(refills[i].ID)
			if !errors.Is(err, ErrClosed) && ctx.Err() == nil {
				q.log.Error("submitting a reservoir refill failed", "reservoir", refills[i].Reservoir, "id", refills[i].ID, "err", err)
			}
		}
	}
}
