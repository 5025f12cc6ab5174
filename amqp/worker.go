package amqp

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/startstop"
)

// Defaults of WorkerConfig.
const (
	WorkerPrefetchExtra = 4 // Prefetch defaults to Threads + this
	GraceDefault        = 30 * time.Second
	BeatIntervalDefault = 5 * time.Second
	sweepInterval       = 200 * time.Millisecond
)

// WorkerConfig configures a Worker.
type WorkerConfig struct {
	// Queue configures the local queue that solves the tasks (Provider is
	// required; Threads is the plan's, shared by every worker on the key:
	// through the broker with SharedThreads, else by the queue's window
	// shrinking when the provider says no free thread). With Providers
	// instead, each provider's Threads is shared the same way (see
	// "Several providers" in the package doc; SharedThreads sets each
	// provider's ThreadPool).
	// Its Store is the worker's own and must be nil.
	Queue captchaq.Config
	// Owner names this worker's checkpoint queue; unique per process.
	// Default host-pid-random.
	Owner string
	// Prefetch bounds the task deliveries held at once. Default
	// Threads + WorkerPrefetchExtra.
	Prefetch int
	// Grace is how long Run, once ctx ends, lets tasks at the provider
	// finish before it leaves them to their checkpoints. Default 30 s.
	Grace time.Duration
	// BeatInterval is how often the worker publishes its status beat.
	// Default 5 s.
	BeatInterval time.Duration
	// Balance, when set, reads the provider's balance (provider.Client's
	// Balance) every BalanceEvery; the reading goes out in the status
	// beats, from which a Gateway answers getbalance.
	Balance func(ctx context.Context) (float64, error)
	// BalanceEvery: default BalanceEveryDefault (60 s).
	BalanceEvery time.Duration
	// Report, when set, forwards clients' reportbad (good false) and
	// reportgood that gateways publish on Names.Reports to the provider
	// (provider.Client's ReportBad and ReportGood): the one of Queue's
	// Providers named providerName, or Queue's Provider when it is empty,
	// answered at answeredAt. Reports for a provider the worker does not
	// have are dropped. Its error is classified by
	// captchaq.ReportOutcomeOf and the outcome sent to the gateway.
	Report func(ctx context.Context, providerName, captchaID string, good bool, answeredAt time.Time) error
	// SharedThreads makes Queue's Threads (or Plan) one pool for every
	// worker on the prefix, held as tokens on the broker (Names.Threads):
	// together they never have more than Threads tasks at the provider,
	// a dead worker's threads go back to the others, and a worker with no
	// work holds none. Every worker on the prefix must give the same
	// Threads, or the same Providers: a worker whose routing differs
	// from the fleet's is refused (a *RoutingConflictError from Run; see
	// Routing under "Several providers" in the package doc). Off, each
	// worker has its own Threads and the fleet finds the plan's edge
	// through "no free thread" answers. captchaq worker turns it on.
	SharedThreads bool
	// Logger. Default the Conn's.
	Logger *slog.Logger
}

// Worker takes tasks from the broker and solves them with a captchaq.Queue
// whose steps are made durable on the broker (its Journal, WorkerStore). Many workers on many
// machines can share one key: they share its plan's threads through the
// broker (WorkerConfig.SharedThreads), and each backs off on "no free
// thread".
type Worker struct {
	c     *Conn
	cfg   WorkerConfig
	log   *slog.Logger
	pub   *Publisher
	store *WorkerStore
	q     *captchaq.Queue
	// pools are the shared threads (nil without SharedThreads): one, the
	// plan's, for a Queue of one Provider; one per provider, in
	// Queue.Providers' order, for a Queue of several.
	pools []*threadPool
	// afterAdopt, when set (tests), runs when the queue answered an
	// adoption.
	afterAdopt func(id string, err error)
}

// NewWorker checks cfg and builds a Worker on c; Run starts it.
func NewWorker(c *Conn, cfg WorkerConfig) (*Worker, error) {
	cfg = cfg.withDefaults(c.cfg.Logger)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	threads := cfg.threads()
	log := cfg.Logger.With("owner", cfg.Owner)
	pub := c.NewPublisher()
	store := newWorkerStore(pub, cfg.Owner, log)
	qc := cfg.Queue
	qc.Store = &fleetState{MemoryStore: store.mem, c: c, log: log}
	// A task never waits locally for longer than the broker holds it;
	// adopted tasks (Names.Adopt, up to threads at once) come on top, so
	// a full prefetch of waiting tasks never holds one back.
	qc.MaxQueued = cmp.Or(qc.MaxQueued, cfg.Prefetch+2*threads)
	f := &workerFleet{admit: store.holdings.admit, journal: store}
	if cfg.SharedThreads {
		f.names, f.pools = sharedThreads(c, qc, threads, log)
	}
	q, err := captchaq.NewFleetQueue(qc, f)
	if err != nil {
		pub.Close()
		return nil, err
	}
	return &Worker{c: c, cfg: cfg, log: log, pub: pub, store: store, q: q, pools: f.pools}, nil
}

// workerFleet is how a worker's queue takes part in the fleet: it submits
// only the tasks the worker holds on a live channel (admit), on the
// threads its pools hold (by provider name, "" for a queue of one), and
// makes each step durable on the broker (journal).
type workerFleet struct {
	admit   func(id string) bool
	journal captchaq.Journal
	names   []string      // the providers with a pool
	pools   []*threadPool // pools[i] is names[i]'s
}

// Admit implements captchaq.Fleet.
func (f *workerFleet) Admit(id string) bool { return f.admit(id) }

// Journal implements captchaq.Fleet: the worker's steps go to the broker.
func (f *workerFleet) Journal() captchaq.Journal { return f.journal }

// processName is host-pid-random: unique per process, for names of queues
// that do not outlive it.
func processName() string {
	host, _ := os.Hostname()
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", sanitizeOwner(host), os.Getpid(), hex.EncodeToString(b[:]))
}

func sanitizeOwner(s string) string {
	s = strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '-'
	}, s)
	if s == "" || s[0] == '-' || s[0] == '_' {
		s = "w" + s
	}
	return s
}

// Owner is the worker's name (its checkpoint queue is Names.InflightQueue(Owner)).
func (w *Worker) Owner() string { return w.cfg.Owner }

// Queue is the local queue, for its Metrics.
func (w *Worker) Queue() *captchaq.Queue { return w.q }

// Held counts the tasks the worker holds unfinished.
func (w *Worker) Held() int { return len(w.store.holdings.ids()) }

// Run consumes tasks until ctx ends, then stops taking tasks, hands back
// the ones not yet at the provider, lets those at the provider finish for
// up to Grace, and leaves any still unfinished to their checkpoints (the
// lease returns them to the fleet, to be polled, not solved again). It
// returns nil after a clean stop.
func (w *Worker) Run(ctx context.Context) error {
	defer w.pub.Close()
	if len(w.pools) > 0 {
		// First: a worker of another routing would use other pools, or
		// send tasks where the fleet does not; refused, it leaves nothing.
		if err := w.c.declareRouting(ctx, routingOf(w.cfg.Queue, w.cfg.threads())); err != nil {
			return err
		}
	}
	if err := w.c.DeclareInflight(ctx, w.cfg.Owner); err != nil {
		return err
	}
	if err := w.c.DeclareClaims(ctx, w.cfg.Owner); err != nil {
		return err
	}
	for _, p := range w.pools {
		// Filled before any task is taken, so no worker submits on a
		// pool that is not there yet.
		same := "--threads (the plan's)"
		if len(w.cfg.Queue.Providers) > 0 {
			same = "providers' threads (the same --providers file)"
		}
		if err := w.c.declareThreadsAt(ctx, p.names, p.n, same); err != nil {
			return err
		}
	}
	if err := w.q.Start(ctx); err != nil {
		return err
	}
	bg, stopBg := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBg()
	// The pool outlives the queue's shutdown, so threads go back last,
	// once no task of this worker is at the provider.
	for _, p := range w.pools {
		pool := startstop.New(p.run)
		_ = pool.Start(context.WithoutCancel(ctx))
		defer pool.Stop()
	}
	// The deliveries that hold tasks at the provider (checkpoints,
	// adopted checkpoints) are acked in transactions: a task's result
	// goes out with its holder's ack, all or nothing (see Recovery). Task
	// deliveries are acked at once, outside any transaction: their ack at
	// a task's first checkpoint is not held up by a commit.
	parked, err := w.c.consume(bg, []string{w.c.Names().InflightQueue(w.cfg.Owner)}, -1, ackInTx)
	if err != nil {
		w.q.Close()
		return err
	}
	claims, err := w.c.consume(bg, []string{w.c.Names().ClaimQueue(w.cfg.Owner)}, -1, ackGathered)
	if err != nil {
		w.q.Close()
		parked.Close()
		return err
	}
	queues := []string{w.c.Names().Tasks}
	for _, l := range w.c.cfg.Lanes {
		queues = append(queues, w.c.Names().Lane(l))
	}
	tasks, err := w.c.Consume(bg, queues, w.cfg.Prefetch)
	if err != nil {
		w.q.Close()
		parked.Close()
		claims.Close()
		return err
	}
	// Checkpoints whose holder is gone come on a channel of their own,
	// so they reach this worker at once however many tasks wait in its
	// prefetch; each is at the provider, to be polled, not submitted.
	adopt, err := w.c.consume(bg, []string{w.c.Names().Adopt}, w.cfg.threads(), ackInTx)
	if err != nil {
		w.q.Close()
		parked.Close()
		claims.Close()
		tasks.Close()
		return err
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for d := range parked.Deliveries() {
			w.store.holdCheckpoint(d)
		}
	}()
	go func() {
		defer wg.Done()
		for d := range claims.Deliveries() {
			w.claimed(bg, d.MessageID)
			w.store.settle(d)
		}
	}()
	loops := []*startstop.Loop{
		startstop.New((&refresher{s: w.store, every: w.c.cfg.InflightRefresh}).run),
		startstop.New((&beater{s: w.store, p: w.pub, every: w.cfg.BeatInterval, log: w.log,
			bal: &balanceReader{read: w.cfg.Balance, every: w.cfg.BalanceEvery}, w: w}).run),
		startstop.New((&staleSweeper{s: w.store, q: w.q, every: sweepInterval}).run),
	}
	for _, l := range loops {
		_ = l.Start(bg)
	}
	var reports *Consumer
	if w.cfg.Report != nil {
		if reports, err = w.c.Consume(bg, []string{w.c.Names().Reports}, 4); err != nil {
			w.log.Warn("not forwarding clients' reports: the reports queue cannot be consumed", "err", err)
		} else {
			forwarder := startstop.New((&reportForwarder{k: reports, pub: w.pub, forward: w.cfg.Report, providers: w.providerNames(), log: w.log}).run)
			_ = forwarder.Start(bg)
			loops = append(loops, forwarder)
		}
	}

	w.log.Info("worker started", "queues", queues, "prefetch", w.cfg.Prefetch)
	stopping := false
	for !stopping {
		select {
		case d, ok := <-adopt.Deliveries():
			if !ok {
				stopping = true
				break
			}
			w.take(ctx, d)
		case d, ok := <-tasks.Deliveries():
			if !ok {
				stopping = true
				break
			}
			w.take(ctx, d)
		case <-ctx.Done():
			stopping = true
		}
	}
	w.shutdown(tasks, adopt)
	stopBg()
	parked.Close()
	claims.Close()
	if reports != nil {
		reports.Close()
	}
	for _, l := range loops {
		l.Stop()
	}
	wg.Wait()
	return nil
}

// take hands one task delivery to the queue.
func (w *Worker) take(ctx context.Context, d *Delivery) {
	m, err := d.Task()
	if err != nil {
		w.deadLetterRaw(ctx, d, err)
		return
	}
	// An id names one task: another task under an id this worker holds or
	// has finished is dead-lettered, never answered with the first one's
	// result (the worker remembers its last idMemoryDefault finished ids).
	if err := w.store.conflict(ctx, m.Task); err != nil {
		w.log.Warn("dead-lettering a task whose id names another task", "id", m.Task.ID, "err", err)
		w.deadLetterWith(ctx, d, map[string]any{HeaderReason: ReasonInvalid, HeaderError: err.Error(), HeaderErrorCode: captchaq.CodeIDConflict})
		return
	}
	fresh := w.store.receive(d, m)
	w.log.Debug("task delivery", "id", m.Task.ID, "queue", d.Queue, "captcha_id", m.CaptchaID, "redelivered", d.Redelivered, "fresh", fresh)
	if !fresh {
		return
	}
	if w.store.dropAnswered(ctx, m.Task.ID) {
		return
	}
	if w.store.holdings.waits(m.Task.ID) {
		// A redelivered copy: its worker may claim it (redeliveredWait).
		time.AfterFunc(redeliveredWait, func() {
			if w.store.holdings.endWait(m.Task.ID) {
				w.adopt(ctx, m)
			}
		})
		return
	}
	w.adopt(ctx, m)
}

// adopt hands a task the worker holds to the queue.
func (w *Worker) adopt(ctx context.Context, m TaskMessage) {
	rec := captchaq.Record{
		Task: m.Task, Status: captchaq.StatusQueued, Attempts: m.Attempts,
		LastError: m.LastError, LastErrorCode: m.LastErrorCode,
		AcceptedAt: m.Accepted, SubmittedAt: m.Submitted,
	}
	if m.CaptchaID != "" {
		// A checkpoint whose holder is gone: poll, do not solve again.
		rec.Status, rec.CaptchaID = captchaq.StatusInFlight, m.CaptchaID
	}
	held := w.store.holdings.held(m.Task.ID)
	f, err := w.q.Adopt(ctx, rec)
	if w.afterAdopt != nil {
		w.afterAdopt(m.Task.ID, err)
	}
	switch {
	case err == nil:
		go w.settleOrphan(ctx, f, m.Task.ID, held)
		if m.CaptchaID != "" {
			// A checkpoint whose holder is gone: a copy of the task the
			// broker gave back without its captcha id (the holder's ack
			// of it died with the holder) waits at some worker for the
			// holder's claim, which a dead holder never sends. The
			// adopter holds the checkpoint now, and claims it.
			go w.store.claimEach(context.WithoutCancel(ctx), []string{m.Task.ID}, "claiming an adopted checkpoint failed; a copy of the task may be solved again")
		}
		if p := w.poolOf(m.CaptchaID); m.CaptchaID != "" && p != nil {
			// On the thread token its holder had (see Returning), asked
			// for only once the queue counts the task among its threads
			// in use: asked before, the token could reach the pool
			// first and the queue submit another task on it, one more
			// at the provider than the plan (TestFleetSharesOnePlan
			// under -race).
			p.takeOver()
		}
	case errors.Is(err, captchaq.ErrInvalidTask):
		r := captchaq.Result{ID: m.Task.ID, Status: captchaq.StatusFailed, Method: m.Task.Method,
			Error: err.Error(), ErrorCode: captchaq.RefusalCode(err), Attempts: m.Attempts, AcceptedAt: m.Accepted, FinishedAt: time.Now()}
		if err := w.store.Finish(context.WithoutCancel(ctx), r); err != nil {
			w.log.Error("dead-lettering an invalid task failed; it stays queued", "id", m.Task.ID, "err", err)
		}
	default:
		// Closed or interrupted: give it back.
		w.store.holdings.markHandBack(m.Task.ID, false)
		_ = w.store.handBack(context.WithoutCancel(ctx), m.Task.ID)
	}
}

// settleOrphan waits for the task the queue took the delivery of e
// into, and returns the delivery when that task finished without a
// Finish of e's own (holdings.orphaned): the queue was finishing a
// task of the same id, which the store had let go of and forgotten,
// and took the delivery as one more waiter of it. Unsettled, the copy
// stayed with the worker, unacked and unanswered, until it stopped.
func (w *Worker) settleOrphan(ctx context.Context, f *captchaq.Future, id string, e *entry) {
	select {
	case <-f.Done():
	case <-ctx.Done():
		return // stopping: what is held is the shutdown's
	}
	if _, err := f.Wait(context.Background()); errors.Is(err, captchaq.ErrClosed) {
		return
	}
	if w.store.holdings.orphaned(id, e) {
		w.store.returnOrphan(context.WithoutCancel(ctx), id, e)
	}
}

// claimed drops this worker's copy of a task another worker has
// checkpointed, unless it is already at the provider.
func (w *Worker) claimed(ctx context.Context, id string) {
	if !w.store.claimed(id) {
		return
	}
	if err := w.q.Cancel(ctx, id); err != nil {
		w.store.holdings.unmarkClaimed(id)
		return
	}
	w.log.Info("dropped a redelivered task another worker checkpointed", "id", id)
}

// deadLetterRaw moves a message that is not a task to the dead letters.
func (w *Worker) deadLetterRaw(ctx context.Context, d *Delivery, cause error) {
	w.log.Warn("dead-lettering a message that is not a task", "message_id", d.MessageID, "err", cause)
	w.deadLetterWith(ctx, d, map[string]any{HeaderReason: ReasonInvalid, HeaderError: cause.Error()})
}

// deadLetterWith moves a delivery as it is to the dead letters, with the
// headers h added.
func (w *Worker) deadLetterWith(ctx context.Context, d *Delivery, h map[string]any) {
	err := w.pub.Publish(context.WithoutCancel(ctx), w.c.Names().DLX, FailedRoutingKey, rawPublishing(d, h))
	if err != nil {
		w.log.Error("dead-lettering failed; the message stays queued", "err", err)
		_ = d.Nack(true)
		return
	}
	w.store.settle(d)
}

// shutdown stops intake, hands back queued tasks and waits up to Grace for
// the rest.
func (w *Worker) shutdown(tasks, adopt *Consumer) {
	for _, k := range []*Consumer{tasks, adopt} {
		if err := k.Stop(); err != nil {
			w.log.Warn("stop consuming", "err", err)
		}
	}
	// Deliveries already on their way are handed back.
	var drains sync.WaitGroup
	for _, k := range []*Consumer{tasks, adopt} {
		drains.Add(1)
		go func() {
			defer drains.Done()
			for d := range k.Deliveries() {
				_ = d.Nack(true)
			}
		}()
	}
	handed := 0
	for _, id := range w.store.holdings.ids() {
		if w.store.holdings.endWait(id) {
			// Redelivered and held waiting: never in the queue.
			w.store.holdings.markHandBack(id, false)
			_ = w.store.handBack(context.Background(), id)
			handed++
			continue
		}
		if !w.store.holdings.markHandBack(id, false) {
			continue
		}
		if err := w.q.Cancel(context.Background(), id); err != nil {
			w.store.holdings.unmarkHandBack(id)
			continue
		}
		handed++
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.Grace)
	defer cancel()
	err := w.q.Shutdown(ctx)
	left := w.Held()
	w.log.Info("worker stopped", "handed_back", handed, "left_to_checkpoints", left, "grace_exceeded", err != nil)
	tasks.Close()
	adopt.Close()
	drains.Wait()
}
