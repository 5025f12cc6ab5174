package amqp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/startstop"
)

// Defaults of GatewayConfig.
const (
	FairBurstDefault       = 10
	GatewayPrefetchDefault = 64
	ResyncEveryDefault     = 30 * time.Second
)

const (
	// storeTimeout bounds one store write made on the gateway's own
	// account (a result, or the record of a task already published).
	storeTimeout = 30 * time.Second
	// storeRetryAfter is how long a result whose store write failed waits
	// before it goes back to the reply queue.
	storeRetryAfter = time.Second
	// notRecordedRetryAfter is how long a result that came before its
	// task's record (another gateway of a shared store records it) waits
	// before it goes back to the reply queue.
	notRecordedRetryAfter = 20 * time.Millisecond
)

// GatewayConfig configures a Gateway.
type GatewayConfig struct {
	// Store is the gateway's ledger: the tasks it accepted and the results
	// it received. Required; the gateway does not close it. Give each
	// gateway its own.
	Store captchaq.Store
	// Name names the gateway's reply queue, Names.ReplyQueue(Name). Keep
	// it with the Store across restarts, and unique among the gateways of
	// one fleet: results wait in that queue while the gateway is down, and
	// only there. Default host-pid-random, which suits only a Store that
	// ends with the process.
	Name string
	// FairBurst is how many unfinished tasks per unit of weight a client
	// may have at this gateway before its next tasks are published one
	// priority level lower (see Gateway). Default FairBurstDefault;
	// negative turns demotion off.
	FairBurst int
	// Prefetch bounds the results being stored at once. Default
	// GatewayPrefetchDefault.
	Prefetch int
	// ResyncEvery, on a Store other gateways share (FrontStore), is how
	// often the gateway reads the front's unfinished tasks again
	// (Resync): a gateway that died between a commit and its announcement
	// leaves the others without that news until then. Default
	// ResyncEveryDefault.
	ResyncEvery time.Duration
	// Providers, for a fleet whose workers route among several providers
	// (captchaq worker --providers): Submit accepts a type when any of
	// them solves it (captchaq.Task.ValidateFor; only Name and Methods
	// are read, no key is needed). Default none: the fleet's one provider
	// is CaptchaAI (captchaq.Task.Validate).
	Providers []captchaq.ProviderConfig
	// Logger. Default the Conn's.
	Logger *slog.Logger
}

// Gateway is the back end of an HTTP front on the fleet (it implements
// server.Backend): it solves nothing and needs no provider key, it
// publishes the tasks it accepts and answers from the results the workers
// send back.
//
//   - Submit publishes the task to the task exchange (confirmed), with
//     reply-to naming the gateway's own reply queue, then records it in
//     the Store in flight with captcha id "gateway:<Name>"; only then does
//     it return. On the wire the task id is "<Name>/<id>", so gateways
//     that share a fleet never collide on ids.
//   - Workers publish each result to the reply-to queue (Publisher.Reply).
//     The gateway stores it (Store.Finish) before it acks it, so a result
//     is never lost; a task whose record is already final is not
//     answered again (a copy is acked and dropped).
//   - Results wait in the durable reply queue while the gateway is down;
//     one started again with the same Name and Store takes them.
//   - The reply queue is also bound to the dead-letter exchange: a task
//     that waited in a task queue past its TTL dies in the broker with no
//     worker to report it, and the gateway records it failed (EXPIRED).
//
// Fair share: the broker orders tasks by priority alone, and a task is
// published before its client hears OK, so the gateway cannot hold tasks
// back to interleave clients. It demotes instead: a client that already
// has FairBurst × its weight unfinished tasks here has its next tasks
// published one AMQP priority level lower, so among tasks of one priority
// a client within its share is served first. This is coarser than the
// local queue's weighted fair queueing: two classes, per gateway, at the
// cost of one priority level.
//
// Cancel is local: the task is recorded failed with CANCELED and answered
// so. Its message cannot be taken back from the broker, so a worker may
// still solve it (the thread is billed); that result is dropped.
//
// Dead letters are the gateway's failed tasks as it recorded them. Replay
// publishes them again from their records, with the same reply-to, under
// a wire id of a new generation (as for a renew: a worker that failed the
// task answers its first wire id only once); it never reads the fleet's
// dead-letter queue, where the copies of every gateway's dead letters
// stay for the operator. It notes in Names.Replayed each replay, and
// before storing it each answer that a dead letter of its task may
// precede (a replay's or a renew's, one that replaces a failure, a
// failure that comes for a task answered already); a replay from the
// fleet's side (captchaq dlq replay --amqp, Conn.Replay) then drops the
// task's copies published before, where it would have the task solved
// again. A task replayed from the fleet's side otherwise comes back too:
// a solved result replaces a failure, unless the failure was a cancel.
//
// Crash windows: a task published but not yet recorded when the process
// dies (or stops while it keeps the task unrecorded, see the package doc)
// is solved and its result dropped (its client never heard OK); a
// task recorded but not yet marked published is published again at Start,
// so it may be solved twice.
type Gateway struct {
	c     *Conn
	cfg   GatewayConfig
	log   *slog.Logger
	store captchaq.Store
	pub   *Publisher
	reply string // the reply queue

	// shared is the Store when other gateways share it (FrontStore):
	// results are stored with a compare-and-swap, and replicas keeps the
	// ledger true to what the others accept and finish.
	shared FrontStore

	// The parts, each with its own state and at most one lock. Locks
	// nest in one order: a task id's (taskRecorder), the lifecycle's, the
	// ledger's, the replicas'.
	ledger   *ledger          // unfinished tasks, unrecorded ones, counts (ledger.go)
	tasks    *taskRecorder    // publishes and records, one id at a time (recorder.go)
	replies  *replyReceiver   // takes the reply queue (replies.go)
	replicas *replicaSync     // the other gateways' news, Resync (replicas.go)
	balances *balanceListener // the workers' balance readings (balance.go)
	depths   *depthReader     // QueueDepths' last reading (stats.go)
	life     *lifecycle       // started, shut down, what Start started (lifecycle.go)
}

// GatewayCounts are what a gateway did since it started.
type GatewayCounts struct {
	// Accepted counts tasks published and recorded.
	Accepted int64 `json:"accepted"`
	// Results counts results recorded (cancels included).
	Results int64 `json:"results"`
	// Duplicates counts results dropped because their task was already
	// answered; Unknown those dropped because the Store has no record.
	Duplicates int64 `json:"duplicates"`
	Unknown    int64 `json:"unknown"`
	// Unrecorded counts tasks published whose record's write failed
	// (the store out of reach longer than its retries): each is recorded
	// when its result comes or its client submits it again.
	Unrecorded int64 `json:"unrecorded"`
	// Republished counts tasks Start found recorded but not marked
	// published, and published again.
	Republished int64 `json:"republished"`
	// Renewed counts tasks submitted again after their token expired, and
	// published again to be solved again.
	Renewed int64 `json:"renewed"`
	// OthersAccepted and OthersResults count the tasks and results the
	// other gateways of a shared store recorded, as this one heard of them
	// (OtherAccepted, OtherFinished).
	OthersAccepted int64 `json:"others_accepted"`
	OthersResults  int64 `json:"others_results"`
}

// FrontStore is a Store that several gateways share (store/postgres): the
// replicas of one front, with one Name, behind a load balancer. Each takes
// results from the one reply queue; of the gateways that took copies of
// one result, FinishIf lets one store it, and that one tells its server
// (onResult: the pingback is sent once). The others hear of it
// (OtherFinished), as of each task another accepted (OtherAccepted), so
// that their long polls, event streams, clients' counts and fair share
// cover the whole front.
type FrontStore interface {
	captchaq.Store
	// FinishIf stores r only while the task's record is as seen shows
	// it; false when it changed meanwhile.
	FinishIf(ctx context.Context, r captchaq.Result, seen captchaq.Record) (bool, error)
	// IDBlock hands out numeric ids no gateway of the front was handed
	// before (server.IDSource).
	IDBlock(ctx context.Context) (first uint64, n int, err error)
	// IDKey is the front's secret key of the ids (server.IDSource), the
	// same for every gateway: made once, kept.
	IDKey(ctx context.Context) ([]byte, error)
}

// MarkedEnqueuer is a Store that records a new task already published,
// in flight under its mark, in one write (store/postgres does): Submit
// then writes once where it would Enqueue and then Checkpoint. false says
// the id is stored already, and nothing was written.
type MarkedEnqueuer interface {
	EnqueueMarked(ctx context.Context, t captchaq.Task, now time.Time, captchaID string) (captchaq.Record, bool, error)
}

// MarkedFinisher is a FrontStore that stores a result for a task in
// flight under a given mark in one write (store/postgres does): the
// gateway then stores most results without reading the record first.
// false says the task is not in flight under it, and nothing was
// written.
type MarkedFinisher interface {
	FinishMarked(ctx context.Context, r captchaq.Result, captchaID string) (bool, error)
}

// NewGateway checks cfg and builds a Gateway on c; Start starts it.
func NewGateway(c *Conn, cfg GatewayConfig) (*Gateway, error) {
	cfg = cfg.withDefaults(c.cfg.Logger)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	shared, _ := cfg.Store.(FrontStore)
	log := cfg.Logger.With("gateway", cfg.Name)
	l := newLedger(cfg.FairBurst)
	pub, reply, ids := c.NewPublisher(), c.Names().ReplyQueue(cfg.Name), newWireIDs(cfg.Name)
	g := &Gateway{
		c: c, cfg: cfg, log: log, store: cfg.Store, pub: pub, reply: reply, shared: shared,
		ledger: l, replicas: newReplicaSync(cfg.Store, shared, l, log, cfg.ResyncEvery),
		balances: newBalanceListener(c), depths: &depthReader{c: c, reply: reply}, life: &lifecycle{},
	}
	g.tasks = &taskRecorder{
		store: cfg.Store, shared: shared, pub: pub, reply: reply, ids: ids, providers: cfg.Providers,
		ledger: l, log: log, open: g.life.open,
	}
	g.replies = &replyReceiver{log: log, reply: reply, ids: ids, prefetch: cfg.Prefetch, tasks: g.tasks, deliver: g.life.deliver}
	return g, nil
}

// GatewayNameFor is a gateway name that stays the same for one store file
// on one host: the host name and a hash of the file's real path. A gateway
// restarted on its store finds its reply queue again, and two gateways
// never share one (a SQLite store admits one process).
func GatewayNameFor(storePath string) (string, error) {
	path, err := filepath.Abs(storePath)
	if err != nil {
		return "", fmt.Errorf("amqp: gateway name for %q: %w", storePath, err)
	}
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	host, _ := os.Hostname()
	host = sanitizeOwner(host)
	if len(host) > 64 {
		host = host[:64]
	}
	sum := sha256.Sum256([]byte(path))
	return host + "-" + hex.EncodeToString(sum[:4]), nil
}

// Name is the gateway's name.
func (g *Gateway) Name() string { return g.cfg.Name }

// ReplyQueue is the queue the gateway's results come to.
func (g *Gateway) ReplyQueue() string { return g.reply }

// Counts returns what the gateway did since it started.
func (g *Gateway) Counts() GatewayCounts {
	return g.ledger.snapshot()
}

// Attach sets the clients' fair-share weights by tenant and the function
// told of each result once it is recorded. Call it before Start.
func (g *Gateway) Attach(weights map[string]int, onResult func(captchaq.Result)) error {
	return g.life.beforeStart("Attach", func() {
		g.ledger.setWeights(weights)
		g.life.onResult = onResult
	})
}

// Start reads the Store's unfinished tasks, declares the reply queue,
// publishes again any task recorded but not marked published, and starts
// taking results. It refuses a Store whose unfinished tasks belong to
// another gateway (their results go to that gateway's reply queue) or to
// a queue that solves tasks itself. A gateway whose Start failed takes no
// tasks.
func (g *Gateway) Start(ctx context.Context) (err error) {
	if err := g.life.begin(); err != nil {
		return err
	}
	g.ledger.start(time.Now())
	defer func() {
		if err != nil {
			g.life.fail()
		}
	}()

	var unmarked []captchaq.Record
	others := map[string]int{}
	solving := 0
	// On a shared store, a task another gateway is recording right now
	// is not marked yet: only one older than a record takes is orphaned.
	orphanedBefore := time.Now().Add(-2 * storeTimeout)
	err = g.store.Pending(ctx, func(r captchaq.Record) error {
		name, _, marked := parseMark(r.CaptchaID)
		switch {
		case r.Status == captchaq.StatusInFlight && marked && name == g.cfg.Name:
			g.ledger.track(r)
		case !marked && g.shared != nil && r.Status == captchaq.StatusQueued && !r.AcceptedAt.Before(orphanedBefore):
			g.ledger.track(r)
		case r.Status == captchaq.StatusInFlight && marked:
			others[name]++
		case r.Status == captchaq.StatusInFlight:
			solving++
		default:
			unmarked = append(unmarked, r)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("amqp: gateway: read the store's unfinished tasks: %w", err)
	}
	if name := firstKey(others); name != "" {
		return fmt.Errorf("amqp: gateway %q: the store holds %d unfinished tasks published by gateway %q, whose results come to %s: start the gateway with that name (GatewayConfig.Name; captchaq serve --gateway %s)",
			g.cfg.Name, others[name], name, g.c.Names().ReplyQueue(name), name)
	}
	if solving > 0 {
		return fmt.Errorf("amqp: gateway: the store holds %d tasks in flight at the provider, left by a queue that solves tasks itself (captchaq serve without --amqp): finish them there first, or give the gateway a store of its own", solving)
	}
	if err := g.c.DeclareReplies(ctx, g.cfg.Name); err != nil {
		return err
	}
	for _, r := range unmarked {
		if err := g.tasks.republish(ctx, r); err != nil {
			return fmt.Errorf("amqp: gateway: publish recorded task %q: %w", r.Task.ID, err)
		}
	}
	// Results that came while it was down wait in the reply queue.
	k, err := g.c.consume(context.WithoutCancel(ctx), []string{g.reply}, g.cfg.Prefetch, ackGathered)
	if err != nil {
		return err
	}
	var resyncer *startstop.Loop
	if g.shared != nil {
		resyncer = startstop.New(g.replicas.resync)
	}
	g.life.serve(k, startstop.New(func(ctx context.Context) { g.replies.receive(ctx, k) }), g.balances.Loop, resyncer)
	unfinished, _ := g.ledger.unfinished("")
	g.log.Info("gateway started", "reply_queue", g.reply, "unfinished", unfinished, "republished", len(unmarked))
	return nil
}

func firstKey(m map[string]int) string {
	keys := slices.Sorted(maps.Keys(m))
	if len(keys) == 0 {
		return ""
	}
	return keys[0]
}

// Check validates t as the fleet's workers on the gateway's Providers
// take it (server.Backend): captchaq.Task.CheckFor them, the one
// provider's rules without.
func (g *Gateway) Check(t captchaq.Task) (captchaq.ValidTask, error) {
	return t.CheckFor(g.cfg.Providers)
}

// Submit publishes a task checked by Check to the fleet and records it;
// see Gateway. It does not validate it again (a task Check did not make
// for these providers, it does). A known id is left as it is, unless it
// names a solved task whose token expired: then the task is solved again
// (renew). The record is written even when ctx ends after the publish
// was confirmed.
func (g *Gateway) Submit(ctx context.Context, t captchaq.ValidTask) error {
	return g.tasks.submit(ctx, t, true)
}

// SubmitNew is Submit for a task whose id names no stored task
// (server.NewSubmitter: the id came from the front's IDBlock): the id is
// not looked up before the publish.
func (g *Gateway) SubmitNew(ctx context.Context, t captchaq.ValidTask) error {
	return g.tasks.submit(ctx, t, false)
}

// Get returns a task's record from the Store. On a shared store, a task
// unfinished here (pending: accepted here, or told by OtherAccepted) that
// Get read unfinished less than readFresh ago is answered from that read:
// clients poll an unfinished task many times (res.php), and each read
// is a database round trip. Its result takes it out at once, stored here
// or told by OtherFinished; only a result whose news never comes (a
// replica that died between its commit and its announcement) is seen
// readFresh late.
func (g *Gateway) Get(ctx context.Context, id string) (captchaq.Record, error) {
	if g.shared == nil {
		return g.store.Get(ctx, id)
	}
	now := time.Now()
	if rec, ok := g.ledger.lastRead(id, now); ok {
		return rec, nil
	}
	rec, err := g.store.Get(ctx, id)
	if err == nil && !rec.Status.Final() {
		g.ledger.keepRead(rec, now)
	}
	return rec, err
}

// Pending calls fn for every unfinished task in the Store.
func (g *Gateway) Pending(ctx context.Context, fn func(captchaq.Record) error) error {
	return g.store.Pending(ctx, fn)
}

// Cancel records an unfinished task failed with CANCELED and answers it
// so; the fleet may still solve it (see Gateway).
func (g *Gateway) Cancel(ctx context.Context, id string) error {
	r, err := g.tasks.cancel(ctx, id)
	if err != nil {
		return err
	}
	g.life.deliver(r)
	return nil
}

// DeadLetters calls fn for the gateway's failed tasks that match f.
func (g *Gateway) DeadLetters(ctx context.Context, f captchaq.DeadLetterFilter, fn func(captchaq.Record) error) error {
	return g.store.DeadLetters(ctx, f, fn)
}

// Replay publishes the gateway's dead letters among ids again, each from
// its record in the Store, and returns the ids unfinished again. It never
// reads the fleet's dead-letter queue: PREFIX.failed holds every
// gateway's and the fleet's dead letters, and a replay that took and held
// them would make one client's replay everyone's wait (and hide them from
// captchaq dlq meanwhile). A task's copy there stays for the operator,
// and the replay is noted in Names.Replayed: captchaq dlq replay
// (Conn.Replay) takes that copy out without publishing it again.
func (g *Gateway) Replay(ctx context.Context, ids []string) ([]string, error) {
	if err := g.life.open(); err != nil {
		return nil, err
	}
	return g.tasks.replay(ctx, ids)
}

// RecordReport records a client's report on a solved task once, in the
// Store (server.Backend): the first report of a task returns true and is
// then published (Report); a later one returns false and goes nowhere.
func (g *Gateway) RecordReport(ctx context.Context, id string, good bool) (bool, error) {
	return g.store.Report(ctx, id, good, time.Now())
}

// Metrics reports what the gateway knows: tasks accepted since Start,
// results recorded, the unfinished tasks by priority and the age of the
// oldest (they are at the fleet: waiting or being solved), and the delay
// from a worker recording a result to this gateway recording it (two
// machines' clocks). Threads and requests are the workers' (see their
// /metrics); here they are zero.
func (g *Gateway) Metrics() captchaq.Metrics {
	return g.ledger.metrics(time.Now())
}

// Ready says why the gateway cannot take tasks now: not started or
// stopping, the broker connection down (it reconnects), or the Store
// unreadable.
func (g *Gateway) Ready(ctx context.Context) error {
	if err := g.life.open(); err != nil {
		return err
	}
	if !g.c.Connected() {
		return errors.New("broker connection lost; reconnecting")
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := g.store.Get(ctx, "\x00readyz"); err != nil && !errors.Is(err, captchaq.ErrNotFound) {
		// The store's words name its file: they go to the log, not to
		// whoever asks /readyz.
		g.log.Warn("not ready: the store cannot be read", "err", err)
		return errors.New("store: not readable (the cause is in the gateway's log)")
	}
	return nil
}

// QueueDepths reads the messages ready in the task queues, the gateway's
// reply queue and the dead-letter queue, at most once a second; while the
// broker connection is down it fails at once.
func (g *Gateway) QueueDepths(ctx context.Context) (map[string]int, error) {
	return g.depths.read(ctx)
}

// Shutdown stops taking tasks and results: results being recorded are
// finished (until ctx ends), the rest stay in the reply queue for the
// next Start. Unfinished tasks stay at the fleet. The Store is not closed.
// In order: the reply consumer stops taking deliveries; the result
// receiver (which waits for its handlers), the balance listener and, on a
// shared store, the resyncer (Resync every ResyncEvery) are stopped at
// once and waited for until ctx ends; the consumer closes; the
// publisher closes last.
func (g *Gateway) Shutdown(ctx context.Context) error {
	k, receiver, resyncer, first := g.life.shut()
	if !first {
		return nil
	}
	defer g.pub.Close()
	if k == nil {
		return nil
	}
	if err := k.Stop(); err != nil {
		g.log.Warn("stop taking results", "err", err)
	}
	done := make(chan struct{})
	go func() { // the loops are told to stop at once
		var stopping sync.WaitGroup
		stopping.Go(g.balances.Stop)
		if resyncer != nil {
			stopping.Go(resyncer.Stop)
		}
		receiver.Stop()
		stopping.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	k.Close()
	g.log.Info("gateway stopped")
	return err
}
