package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/captchaq/captchaq"
)

// Backend is what the handlers stand on: where accepted tasks go, where
// their records are read, and where results come from. Two implement it:
// the local queue the server builds from Config.Queue (it solves tasks
// itself), and amqp.Gateway (it publishes tasks to a RabbitMQ fleet and
// answers from the results the workers send back). Every method is safe
// for concurrent use.
//
// Ids are the Store's ("<client>/<id>"); Task.Tenant is the client.
//
// The conformance suite in server/backendtest checks every promise below;
// a new implementation runs it from its tests.
type Backend interface {
	// Attach is called once, by New, before any other method: weights are
	// the clients' fair-share weights by tenant, and onResult must be
	// called once with each task's final result after it is durable, from
	// any goroutine, quickly.
	Attach(weights map[string]int, onResult func(captchaq.Result)) error
	// Start begins work (ctx bounds the start only).
	Start(ctx context.Context) error
	// Check validates a task as the tasks are solved here (the local
	// queue's providers: captchaq.Queue.Check; a gateway's:
	// captchaq.Task.CheckFor its Providers). The server's doors check with
	// it, refuse what it refuses and hand the ValidTask to Submit, which
	// does not validate it again.
	Check(t captchaq.Task) (captchaq.ValidTask, error)
	// Submit accepts one task: when it returns nil the task is durable and
	// on its way. The same task under a known id is left as it is, unless
	// it was solved and its token expired: then it is solved again under
	// its id. Errors: *captchaq.TaskError for a bad task (one Check did
	// not make for this backend, checked here; nothing is recorded),
	// *captchaq.IDConflictError for another task under a known id,
	// captchaq.ErrClosed after Shutdown, anything else (ctx's included)
	// when there is no room or no way now.
	Submit(ctx context.Context, t captchaq.ValidTask) error
	// Get returns a task's record, or captchaq.ErrNotFound.
	Get(ctx context.Context, id string) (captchaq.Record, error)
	// Pending calls fn for every unfinished task.
	Pending(ctx context.Context, fn func(captchaq.Record) error) error
	// Cancel fails an unfinished task with ErrorCode CANCELED, or returns
	// captchaq.ErrInFlight (it cannot be stopped), captchaq.ErrFinal or
	// captchaq.ErrNotFound.
	Cancel(ctx context.Context, id string) error
	// DeadLetters calls fn for every failed task that matches f.
	DeadLetters(ctx context.Context, f captchaq.DeadLetterFilter, fn func(captchaq.Record) error) error
	// Replay runs the dead letters among ids again and returns the ids now
	// unfinished again, also when it returns an error.
	Replay(ctx context.Context, ids []string) ([]string, error)
	// RecordReport records a client's report on a solved task's answer
	// (good: reportgood), once, in the Store (captchaq.Store.Report): true
	// for the first report of the task, which the server then forwards to
	// the provider; false for any later one. captchaq.ErrNotFound for an
	// unknown id, captchaq.ErrNotSolved for a task that is not solved.
	RecordReport(ctx context.Context, id string, good bool) (bool, error)
	// Metrics is a snapshot of the counts the dashboard and /metrics show.
	Metrics() captchaq.Metrics
	// Ready says why no work can be taken now (captchaq.ErrClosed after
	// Shutdown), or nil.
	Ready(ctx context.Context) error
	// Shutdown stops intake and work (see each implementation for what
	// it waits for until ctx ends). Records stay readable with Get; a
	// second call returns nil.
	Shutdown(ctx context.Context) error
}

// depthWait bounds a QueueDepths call made for /v1/stats or /metrics.
const depthWait = 2 * time.Second

// QueueDepther is a Backend that can tell how many messages wait in the
// broker queues it uses; /v1/stats shows them as "broker" and /metrics as
// captchaq_broker_queue_ready. A call should be cheap (cache it).
type QueueDepther interface {
	QueueDepths(ctx context.Context) (map[string]int, error)
}

// BatchSubmitter is a Backend that takes many tasks in one call (one Store
// write for all of them) and returns each task's error, as Submit would.
type BatchSubmitter interface {
	SubmitBatch(ctx context.Context, tasks []captchaq.ValidTask) []error
}

// Replicated is a Backend shared by several servers, the replicas of one
// front behind a load balancer (amqp.Gateway on a shared store). New
// calls AttachReplicas after Attach: accepted is told each task another
// replica accepted, finished each result another replica stored (that
// replica's onResult ran: its pingback is sent there). The server counts
// them against the client's max_inflight and rate, and wakes its long
// polls and event streams with them.
type Replicated interface {
	AttachReplicas(accepted func(captchaq.Record), finished func(captchaq.Result)) error
}

// FrontLimiter is a Backend that keeps clients' max_inflight and rate
// across the replicas of a front (amqp.Gateway on a shared store, when
// Shared says so): Admit checks both against the whole front and takes
// their room there in one step, so two replicas that take a client's last
// slot or token at one moment do not both get it; the server then counts
// neither bound itself. FreeSlots gives back the room of tasks that were
// not accepted.
type FrontLimiter interface {
	Shared() bool
	Admit(ctx context.Context, tenant string, ids []string, max int, rate float64, burst int) (ok bool, held int, wait time.Duration, err error)
	FreeSlots(ctx context.Context, ids []string) error
}

// NewSubmitter is a Backend that takes a task whose id names no stored
// task without looking the id up first: SubmitNew is Submit for a front
// task whose id the server handed out from the IDSource's blocks, which
// no process of the front handed out before (one store round trip less a
// submit).
type NewSubmitter interface {
	SubmitNew(ctx context.Context, t captchaq.ValidTask) error
}

// IDSource is a Backend whose numeric task ids come from a source the
// replicas of a front share: the server hands out ids from the blocks it
// takes, so two replicas never hand out one id. A block of no ids (n = 0)
// says there is no such source: the server's ids come from its clock.
// IDKey is the source's secret of IDKeySize bytes, the same for every
// replica: the server hands out a permutation of the blocks' numbers
// keyed by it, so that an id tells nothing of the tasks of others.
type IDSource interface {
	IDBlock(ctx context.Context) (first uint64, n int, err error)
	IDKey(ctx context.Context) ([]byte, error)
}

// localBackend is a captchaq.Queue the server owns: tasks are solved here.
type localBackend struct {
	cfg        captchaq.Config
	submitWait time.Duration
	queue      *captchaq.Queue
	store      captchaq.Store
	closed     atomic.Bool // Shutdown was called
}

func newLocalBackend(cfg captchaq.Config, submitWait time.Duration) *localBackend {
	if cfg.Store == nil {
		cfg.Store = captchaq.NewMemoryStore(captchaq.MemoryStoreConfig{})
	}
	return &localBackend{cfg: cfg, submitWait: submitWait, store: cfg.Store}
}

// Attach builds the queue, with the weights and the result hook.
func (b *localBackend) Attach(weights map[string]int, onResult func(captchaq.Result)) error {
	if b.queue != nil {
		return errors.New("server: backend attached twice")
	}
	qc := b.cfg
	qc.TenantWeights = weights
	userResult := qc.OnResult
	qc.OnResult = func(r captchaq.Result) {
		onResult(r)
		if userResult != nil {
			userResult(r)
		}
	}
	q, err := captchaq.New(qc)
	if err != nil {
		return err
	}
	b.queue = q
	return nil
}

func (b *localBackend) Start(ctx context.Context) error { return b.queue.Start(ctx) }

func (b *localBackend) Check(t captchaq.Task) (captchaq.ValidTask, error) { return b.queue.Check(t) }

func (b *localBackend) Submit(ctx context.Context, t captchaq.ValidTask) error {
	return b.SubmitBatch(ctx, []captchaq.ValidTask{t})[0]
}

func (b *localBackend) SubmitBatch(ctx context.Context, tasks []captchaq.ValidTask) []error {
	return b.queue.SubmitValid(ctx, tasks, func(int, captchaq.Result) {})
}

func (b *localBackend) Get(ctx context.Context, id string) (captchaq.Record, error) {
	return b.store.Get(ctx, id)
}

func (b *localBackend) Pending(ctx context.Context, fn func(captchaq.Record) error) error {
	return b.store.Pending(ctx, fn)
}

func (b *localBackend) Cancel(ctx context.Context, id string) error { return b.queue.Cancel(ctx, id) }

func (b *localBackend) DeadLetters(ctx context.Context, f captchaq.DeadLetterFilter, fn func(captchaq.Record) error) error {
	return b.store.DeadLetters(ctx, f, fn)
}

// Replay requeues the dead letters in the Store (attempts reset), then the
// running queue adopts each record.
func (b *localBackend) Replay(ctx context.Context, ids []string) ([]string, error) {
	var dead []string
	err := b.store.DeadLetters(ctx, captchaq.DeadLetterFilter{IDs: ids}, func(r captchaq.Record) error {
		dead = append(dead, r.Task.ID)
		return nil
	})
	if err != nil || len(dead) == 0 {
		return nil, err
	}
	if _, err := b.store.Replay(ctx, captchaq.DeadLetterFilter{IDs: dead}, time.Now()); err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	for _, id := range dead {
		rec, err := b.store.Get(ctx, id)
		if err != nil {
			return dead, fmt.Errorf("replay %q: %w", id, err)
		}
		actx, cancel := context.WithTimeout(ctx, b.submitWait)
		_, err = b.queue.Adopt(actx, rec)
		cancel()
		if err != nil {
			// Still queued in the Store: the next Start picks it up.
			return dead, fmt.Errorf("replay %q: requeued in the store but not yet running: %w", id, err)
		}
	}
	return dead, nil
}

func (b *localBackend) RecordReport(ctx context.Context, id string, good bool) (bool, error) {
	return b.store.Report(ctx, id, good, time.Now())
}

func (b *localBackend) Metrics() captchaq.Metrics { return b.queue.Metrics() }

// Ready: not shut down (captchaq.ErrClosed), the store answers, and
// sending is not paused by an account error that will not lift by itself.
func (b *localBackend) Ready(ctx context.Context) error {
	if b.closed.Load() {
		return captchaq.ErrClosed
	}
	if err := storeReady(ctx, b.store); err != nil {
		return err
	}
	if p := b.queue.Paused(); p != nil {
		var ae *captchaq.AccountError
		if errors.As(p, &ae) && ae.Until.IsZero() {
			return errors.New("sending paused by an account error (" + ae.Code + "): fix the provider key or plan")
		}
	}
	return nil
}

// Shutdown waits for accepted tasks until ctx ends (captchaq.Queue.Shutdown).
func (b *localBackend) Shutdown(ctx context.Context) error {
	b.closed.Store(true)
	return b.queue.Shutdown(ctx)
}

func (b *localBackend) pingbackHandler() http.Handler { return b.queue.PingbackHandler() }

// storeReady reads the store once, within two seconds.
func storeReady(ctx context.Context, st captchaq.Store) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := st.Get(ctx, "\x00readyz"); err != nil && !errors.Is(err, captchaq.ErrNotFound) {
		return unreadableStore{cause: err}
	}
	return nil
}

// unreadableStore is a store that failed the readiness read. Its text is
// for anyone who asks /readyz; the cause (a SQLite error names the file)
// is for the server's log.
type unreadableStore struct{ cause error }

func (e unreadableStore) Error() string {
	return "store: not readable (the cause is in the server's log)"
}

func (e unreadableStore) Unwrap() error { return e.cause }
