package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"runtime"

	moderncsqlite "modernc.org/sqlite"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/startstop"
)

// writeOp is one caller's write. run may be called twice (see runBatch), so
// it must set its outputs afresh each time, and it must not write anything
// before it refuses the write (see refused).
type writeOp struct {
	ctx  context.Context
	run  func(ctx context.Context, st *statements) error
	done chan error
}

// writer is the store's only writer: one goroutine that takes every write
// waiting when it is free, runs them in one transaction and answers each
// caller after the commit. Concurrent callers thus share one commit (group
// commit) and nobody is answered before their write is durable.
type writer struct {
	loop     *startstop.Loop
	conn     *sql.Conn
	st       *statements
	maxBatch int
	ckpt     *checkpointer
	ops      chan *writeOp
	closing  chan struct{} // closed by stop: later writes fail with ErrClosed
}

func newWriter(conn *sql.Conn, st *statements, maxBatch int, ckpt *checkpointer) *writer {
	w := &writer{
		conn:     conn,
		st:       st,
		maxBatch: maxBatch,
		ckpt:     ckpt,
		ops:      make(chan *writeOp),
		closing:  make(chan struct{}),
	}
	w.loop = startstop.New(w.run)
	return w
}

func (w *writer) start() { _ = w.loop.Start(context.Background()) }

// stop makes later writes fail with ErrClosed and returns once the writes
// already taken are committed and answered.
func (w *writer) stop() {
	close(w.closing)
	w.loop.Stop()
}

// do runs fn in the writer and waits for its commit. When ctx ends first,
// do returns ctx.Err() and the write may or may not be committed.
func (w *writer) do(ctx context.Context, fn func(ctx context.Context, st *statements) error) error {
	op := &writeOp{ctx: ctx, run: fn, done: make(chan error, 1)}
	select {
	case w.ops <- op:
	case <-w.closing:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	// Once taken, the write is waited for even if ctx ends: the writer
	// answers every op it took (skipping one whose ctx is done before
	// running it), and one it has run may already be committed, so its
	// caller must hear the outcome (and must not read the op's results
	// while the writer still writes them).
	return <-op.done
}

func (w *writer) run(ctx context.Context) {
	batch := make([]*writeOp, 0, w.maxBatch)
	for {
		select {
		case <-ctx.Done():
			return
		case op := <-w.ops:
			batch = append(batch[:0], op)
		}
		batch = w.take(batch)
		// Callers the last commit answered are often about to write again:
		// yielding once lets them join this commit rather than wait for the
		// next, and fewer, larger commits cost less per write.
		runtime.Gosched()
		batch = w.take(batch)
		w.runBatch(batch)
		clear(batch)
	}
}

// take adds the writes waiting now to batch, up to maxBatch.
func (w *writer) take(batch []*writeOp) []*writeOp {
	for len(batch) < w.maxBatch {
		select {
		case op := <-w.ops:
			batch = append(batch, op)
		default:
			return batch
		}
	}
	return batch
}

// runBatch commits batch in one transaction. If the database fails in the
// middle (disk full, I/O error), the transaction is rolled back and each
// write is tried again in a transaction of its own, so one bad write fails
// only its own caller.
func (w *writer) runBatch(batch []*writeOp) {
	errs := make([]error, len(batch))
	err := w.inTx(func(ctx context.Context) error {
		for i, op := range batch {
			if err := op.ctx.Err(); err != nil {
				errs[i] = err
				continue
			}
			errs[i] = op.run(ctx, w.st)
			if errs[i] != nil && !refused(errs[i]) {
				return errs[i]
			}
		}
		return nil
	})
	if err != nil && len(batch) > 1 {
		for i, op := range batch {
			if errs[i] = op.ctx.Err(); errs[i] != nil {
				continue
			}
			errs[i] = w.inTx(func(ctx context.Context) error { return op.run(ctx, w.st) })
		}
	} else if err != nil {
		errs[0] = err
	}
	for i, op := range batch {
		op.done <- errs[i]
	}
	w.ckpt.wrote(w.conn, w.walPages())
}

// walPages returns how many pages the connection wrote to the WAL since
// the last call.
func (w *writer) walPages() int {
	var n int
	_ = w.conn.Raw(func(dc any) error {
		if s, ok := dc.(moderncsqlite.DBStatus); ok {
			n, _, _ = s.Status(moderncsqlite.DBStatusCacheWrite, true)
		}
		return nil
	})
	return n
}

// rejectedError is a write refused for what the task is, not for a failure
// of the database.
type rejectedError struct {
	msg string
	is  error // the sentinel it matches, if any
}

func (e *rejectedError) Error() string { return e.msg }

func (e *rejectedError) Unwrap() error { return e.is }

// refused reports whether err refuses a write without having written: the
// transaction holding it goes on for the other writes in it.
func refused(err error) bool {
	var r *rejectedError
	return errors.Is(err, captchaq.ErrNotFound) || errors.As(err, &r)
}

// inTx runs fn between BEGIN IMMEDIATE and COMMIT on the writer's
// connection. A refused write still commits: it wrote nothing.
func (w *writer) inTx(fn func(ctx context.Context) error) error {
	// The statements run on the writer's own context: one caller giving up
	// must not interrupt a transaction that holds other callers' writes.
	ctx := context.Background()
	if _, err := w.st.begin.ExecContext(ctx); err != nil {
		return err
	}
	err := fn(ctx)
	if err != nil && !refused(err) {
		_, _ = w.conn.ExecContext(ctx, "ROLLBACK")
		return err
	}
	if _, cerr := w.st.commit.ExecContext(ctx); cerr != nil {
		_, _ = w.conn.ExecContext(ctx, "ROLLBACK")
		return cerr
	}
	return err
}
