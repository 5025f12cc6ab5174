package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"sync"
	"time"

	"github.com/captchaq/captchaq/captchaqtype"
	"github.com/captchaq/captchaq/internal/lane"
	"github.com/captchaq/captchaq/internal/reservoir"
	"github.com/captchaq/captchaq/internal/startstop"
	"github.com/captchaq/captchaq/internal/tally"
	"github.com/captchaq/captchaq/provider"
)

// A reservoir keeps tokens of one captcha solved ahead of demand
// (Config.Reservoirs): a submitted task that asks for that captcha takes
// one and is answered at once. internal/reservoir owns the state (the
// demand, the sizing, the refills in flight, the counts); the tokens live
// in the Store (ReservoirStore). Reservoirs is the queue's side: the
// config's checks, the draw at intake, the refill loop, and a refill's
// result.

// reservoirTick is how often the refill loop drops aged-out tokens and
// starts refills.
const reservoirTick = time.Second

// CheckReservoirs reports every problem of a queue's reservoirs, after
// their defaults, each naming the field and the fix: rcs are
// Config.Reservoirs, store its Store, share its ReservoirShare, threads
// the plan's.
func CheckReservoirs(rcs []captchaqtype.ReservoirConfig, providers []captchaqtype.ProviderConfig, store captchaqtype.Store, share float64, threads int) []error {
	if len(rcs) == 0 {
		return nil
	}
	var errs []error
	if _, ok := store.(captchaqtype.ReservoirStore); !ok {
		errs = append(errs, fmt.Errorf("Store: %T keeps no reservoir tokens (it is not a ReservoirStore); use the memory, SQLite or PostgreSQL store, or drop Reservoirs", store))
	}
	if share <= 0 || share > 1 {
		errs = append(errs, fmt.Errorf("ReservoirShare: must be above 0 and at most 1 (default %v), got %v", captchaqtype.ReservoirShareDefault, share))
	} else if refillThreads(share, threads) < 1 {
		errs = append(errs, fmt.Errorf("ReservoirShare: %v of %d threads leaves no thread for refills; raise it to at least %.2f", share, threads, 1/float64(max(threads, 1))))
	}
	names, keys := map[string]bool{}, map[string]string{}
	for i, rc := range rcs {
		at := func(field, format string, args ...any) {
			errs = append(errs, fmt.Errorf("Reservoirs[%d].%s: %s", i, field, fmt.Sprintf(format, args...)))
		}
		if bad := lane.NameProblem(rc.Name, names, "reservoir"); bad != "" {
			at("Name", "%s", bad)
		}
		life, err := ReservoirLife(rc, providers)
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

// ReservoirLife validates rc's template as a refill of it is validated
// and returns its type's token lifetime.
func ReservoirLife(rc captchaqtype.ReservoirConfig, providers []captchaqtype.ProviderConfig) (time.Duration, error) {
	t := templateTask(rc)
	t.ID = reservoir.RefillPrefix + "template"
	if len(providers) == 0 {
		providers = nil
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
func templateTask(rc captchaqtype.ReservoirConfig) captchaqtype.Task {
	return captchaqtype.Task{Method: rc.Task.Method, Params: rc.Task.Params, Proxy: rc.Task.Proxy, ProxyType: rc.Task.ProxyType, Priority: captchaqtype.PriorityLowest}
}

// refillThreads is how many threads of threads refills may take at share.
func refillThreads(share float64, threads int) int {
	return int(math.Floor(share*float64(threads) + 1e-9))
}

// Reservoirs is the queue's side of its reservoirs: nil without any
// (every method of a nil *Reservoirs does nothing).
type Reservoirs struct {
	pool  *reservoir.Pool
	store captchaqtype.ReservoirStore
	host  ReservoirHost
	// mu guards templates, each reservoir's refill task, and minLife, its
	// MinLife, by name; Set replaces both and swaps the pool's reservoirs
	// under it, so a refill planned has its template. No Store call is
	// made under it; pool.mu is taken under it.
	mu        sync.Mutex
	templates map[string]captchaqtype.Task
	minLife   map[string]time.Duration
}

// ReservoirHost is what Reservoirs uses of the queue.
type ReservoirHost struct {
	Now func() time.Time
	// StoreCtx is the context of Store writes, which outlive Close.
	StoreCtx func() context.Context
	Log      *slog.Logger
	// Journal finishes a task answered from a token.
	Journal captchaqtype.Journal
	Metrics *tally.Counters
	// Delivered is told of each task answered from a token, once durable.
	Delivered func(captchaqtype.Result)
	// Submit accepts refill tasks as the queue's intake does, one error
	// per task.
	Submit func(ctx context.Context, tasks []captchaqtype.Task) []error
}

// NewReservoirs builds the reservoirs rcs (validated: CheckReservoirs),
// refills taking at most share of threads; nil when rcs is empty. store
// must be a ReservoirStore.
func NewReservoirs(rcs []captchaqtype.ReservoirConfig, providers []captchaqtype.ProviderConfig, store captchaqtype.Store, share float64, threads int, h ReservoirHost) *Reservoirs {
	if len(rcs) == 0 {
		return nil
	}
	rs := &Reservoirs{store: store.(captchaqtype.ReservoirStore), host: h}
	rs.pool = reservoir.NewPool(rs.specs(rcs, providers), refillThreads(share, threads))
	return rs
}

// specs sets rs's templates and min lives to rcs' (validated) and
// returns their specs for the pool; rs.mu is held or rs is new.
func (rs *Reservoirs) specs(rcs []captchaqtype.ReservoirConfig, providers []captchaqtype.ProviderConfig) []reservoir.Spec {
	templates, minLives := map[string]captchaqtype.Task{}, map[string]time.Duration{}
	specs := make([]reservoir.Spec, len(rcs))
	for i, rc := range rcs {
		t := templateTask(rc)
		life, _ := ReservoirLife(rc, providers)
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

// Counts returns each reservoir's counts at now, in order.
func (rs *Reservoirs) Counts(now time.Time) []captchaqtype.ReservoirCounts {
	if rs == nil {
		return nil
	}
	cs := rs.pool.Counts(now)
	out := make([]captchaqtype.ReservoirCounts, len(cs))
	for i, c := range cs {
		out[i] = captchaqtype.ReservoirCounts(c)
	}
	return out
}

// Set makes rcs (validated, with their defaults) the reservoirs. A
// reservoir kept by name with the same method and params keeps its
// stock, counts and refills in flight; the stock of one removed, or whose
// captcha changed, is dropped. It logs what changed.
func (rs *Reservoirs) Set(rcs []captchaqtype.ReservoirConfig, providers []captchaqtype.ProviderConfig) {
	rs.mu.Lock()
	ch := rs.pool.Swap(rs.specs(rcs, providers))
	rs.mu.Unlock()
	h := rs.host
	for _, name := range ch.Removed {
		// Tokens of a captcha no reservoir holds: none may be handed out.
		if _, err := rs.store.DropTokens(h.StoreCtx(), name, h.Now().Add(forever)); err != nil {
			h.Log.Error("dropping a removed reservoir's tokens failed", "reservoir", name, "err", err)
		}
	}
	h.Log.Info("reservoirs set", "count", len(rcs), "added", ch.Added, "removed", ch.Removed, "changed", ch.Changed)
}

// forever is past any token's lifetime: DropTokens before now+forever
// drops a reservoir's whole stock.
const forever = 100 * 365 * 24 * time.Hour

// Draw gives the new tasks of batch (not known to the Store, not
// adopted) that match a reservoir their tenant may draw from a token
// each, while there are tokens: such a task is finished at once with its
// token's answer, and recs[j] and existed[j] say so, so that the intake
// answers it as a stored, finished task. The others go on as ordinary
// tasks. It runs after Enqueue, in the intake round.
func (rs *Reservoirs) Draw(ctx context.Context, batch []captchaqtype.Task, recs []captchaqtype.Record, existed []bool, adopted func(j int) bool, now time.Time) {
	if rs == nil {
		return
	}
	h := rs.host
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
			h.Log.Error("taking a reservoir token failed; the task is solved as any other", "reservoir", name, "id", t.ID, "err", err)
		}
		if !hit {
			rs.pool.Miss(name, t.ID, now)
			continue
		}
		r := tok
		r.ID, r.Method, r.Reservoir, r.SolveSeconds = t.ID, t.Method, name, 0
		r.AcceptedAt, r.SubmittedAt, r.FinishedAt = now, now, h.Now()
		if err := h.Journal.Finish(h.StoreCtx(), r); err != nil {
			h.Log.Error("storing a reservoir token's result failed; delivering it anyway", "reservoir", name, "id", t.ID, "err", err)
		}
		rs.pool.Hit(name, r.FinishedAt.Sub(now))
		recs[j].Status, recs[j].Result = captchaqtype.StatusSolved, &r
		existed[j] = true
		h.Metrics.Submitted()
		h.Metrics.Result(true, 0, time.Time{}, r.FinishedAt)
		h.Delivered(r)
	}
}

// Finished is told of every final result: a refill's token goes to its
// reservoir's stock (a failed refill is counted), and Finished reports
// true, for the result goes to no client; a miss's answer is timed.
func (rs *Reservoirs) Finished(r captchaqtype.Result) (refill bool) {
	if rs == nil {
		return false
	}
	name, refill := rs.pool.Finished(r.ID, r.Status == captchaqtype.StatusSolved, r.FinishedAt.Sub(r.AcceptedAt), r.FinishedAt)
	if refill && name != "" && r.Status == captchaqtype.StatusSolved {
		if err := rs.store.StockToken(rs.host.StoreCtx(), name, r); err != nil {
			rs.host.Log.Error("stocking a reservoir token failed; it is lost", "reservoir", name, "id", r.ID, "err", err)
		}
	}
	return refill
}

// Resume counts a pending task of the Store, resumed at Start, in flight
// when it is a refill.
func (rs *Reservoirs) Resume(id string) {
	if rs != nil {
		rs.pool.Resume(id)
	}
}

// Loop is the refill loop, started and stopped with the queue's loops.
func (rs *Reservoirs) Loop() *startstop.Loop {
	return startstop.New(func(ctx context.Context) { startstop.Every(ctx, reservoirTick, rs.tick) })
}

// tick drops the tokens with less than MinLife left, takes stock, and
// submits the refills the pool plans.
func (rs *Reservoirs) tick(ctx context.Context) {
	h := rs.host
	now := h.Now()
	rs.mu.Lock()
	minLives := rs.minLife
	rs.mu.Unlock()
	for name, minLife := range minLives {
		n, err := rs.store.DropTokens(ctx, name, now.Add(minLife))
		if err != nil {
			h.Log.Error("dropping aged-out reservoir tokens failed", "reservoir", name, "err", err)
		}
		rs.pool.Expired(name, n)
	}
	stock, err := rs.store.TokenCounts(ctx)
	if err != nil {
		h.Log.Error("counting reservoir tokens failed; no refill this round", "err", err)
		return
	}
	rs.mu.Lock()
	refills, templates := rs.pool.Plan(now, stock), rs.templates
	rs.mu.Unlock()
	if len(refills) == 0 {
		return
	}
	tasks := make([]captchaqtype.Task, len(refills))
	for i, r := range refills {
		t := templates[r.Reservoir]
		t.ID, t.Params = r.ID, maps.Clone(t.Params)
		tasks[i] = t
	}
	for i, err := range h.Submit(ctx, tasks) {
		if err != nil {
			rs.pool.Unsent(refills[i].ID)
			if !errors.Is(err, captchaqtype.ErrClosed) && ctx.Err() == nil {
				h.Log.Error("submitting a reservoir refill failed", "reservoir", refills[i].Reservoir, "id", refills[i].ID, "err", err)
			}
		}
	}
}
