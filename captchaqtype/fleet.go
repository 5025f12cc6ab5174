package captchaqtype

import (
	"context"
	"time"
)

// Fleet is how a Queue takes part in a fleet of processes that share
// tasks and a plan's threads (amqp.Worker is one): NewFleetQueue builds
// such a queue. A queue of its own (New) has none.
type Fleet interface {
	// Admit is asked right before each submit. False means the task must
	// not reach the provider now (this queue's copy of it has gone stale,
	// and another process may be taking it): it is not sent, counts no
	// attempt, and waits Config.PollInterval before it is asked about
	// again.
	Admit(id string) bool
	// Threads is the pool that shares the named provider's threads with
	// the fleet ("" for Config.Provider): the queue submits there only on
	// threads the pool holds for it (see ThreadPool). Nil: this process
	// has them to itself, bounded only by the AIMD window.
	Threads(provider string) ThreadPool
	// Journal is where the queue's steps become durable in the fleet,
	// called in place of the Store's Checkpoint, Retry and Finish (see
	// Journal). Nil: the Store's.
	Journal() Journal
}

// Journal makes a queue's steps durable: the Store's Checkpoint, Retry
// and Finish, which it takes its methods from. A Store is a Journal; a
// Fleet may give its own (amqp.Worker's publishes each step to the broker
// and acks the task's message only then). The queue calls it where it
// would call the Store: a captcha id before its first poll, a retry
// before the next attempt, a result before it is delivered (and
// delivers it anyway, as a Store's, when it fails: the error is logged).
// The Store keeps everything else (Enqueue at intake, Renew, Get, Pending
// at Start); a fleet's Journal writes the step to the Store itself when
// the step is the queue's to keep (a task the fleet took back is not
// finished in this queue's Store).
type Journal interface {
	Checkpoint(ctx context.Context, id, captchaID string, attempt int, at time.Time) error
	Retry(ctx context.Context, id string, attempts int, notBefore time.Time, errText, errCode string) error
	Finish(ctx context.Context, r Result) error
}

// ThreadPool shares one plan's threads among processes that use the same
// key (see amqp.Worker, whose pool is a queue of thread tokens on the
// broker). With a pool, the queue submits only while its tasks at the
// provider are fewer than the threads the pool holds for it, and tells the
// pool its demand after every dispatch round. The AIMD window on "no free
// thread" still applies on top, as the guard against other users of the
// key.
type ThreadPool interface {
	// Want reports demand: busy threads in use (tasks at the provider or
	// being submitted) and waiting tasks that could use a thread now. The
	// queue calls it under its task table's lock: it must not block or
	// call the queue. Until the next Want, the pool must not give back
	// threads below what Held returned since the last one: the queue may
	// have started submits on them.
	Want(busy, waiting int)
	// Held is how many threads this process may use now.
	Held() int
	// Ready receives when Held grows.
	Ready() <-chan struct{}
}
