package sqlite

import (
	"context"
	"database/sql"
	"log/slog"
	"sync/atomic"

	"github.com/captchaq/captchaq/internal/startstop"
)

// checkpointer copies committed pages from the WAL into the database file
// on a connection of its own. Left to itself SQLite does this inside the
// COMMIT that takes the WAL past 1000 pages: it copies every page changed
// since the last time and fsyncs both files while every caller waiting on
// the writer waits too. A PASSIVE checkpoint takes no lock the writer
// needs, so commits go on while the loop copies.
//
// The WAL starts over from its beginning only when a write begins with
// every frame copied, which writes without a pause never allow. So once
// the loop finds the WAL past walRestartPages, the writer copies the few
// frames added since, between two transactions, while the loop is idle:
// its next write then starts the WAL over.
type checkpointer struct {
	*startstop.Loop
	conn   *sql.Conn
	logger *slog.Logger
	path   string
	// busy is set from a kick until the checkpoint it asked for is done.
	busy atomic.Bool
	// restart is set when the loop found the WAL past walRestartPages.
	restart atomic.Bool
	// pages counts the pages written since the last kick. Only the writer
	// touches it.
	pages  int
	kickCh chan struct{}
	// ran, when set, is told of each checkpoint (tests).
	ran func(walPages, copied int, err error)
}

const (
	// checkpointPages is how many pages the writer adds to the WAL between
	// two checkpoints of the loop: SQLite's own default.
	checkpointPages = 1000
	// walRestartPages is the WAL's size in pages (4 KiB each) past which
	// the writer has it start over.
	walRestartPages = 4096
)

// newCheckpointer returns the loop; Stop waits for a checkpoint under way
// to return.
func newCheckpointer(conn *sql.Conn, path string, logger *slog.Logger, ran func(int, int, error)) *checkpointer {
	c := &checkpointer{conn: conn, logger: logger, path: path, ran: ran, kickCh: make(chan struct{}, 1)}
	c.Loop = startstop.New(c.run)
	return c
}

func (c *checkpointer) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.kickCh:
		}
		if walPages, _ := c.checkpoint(c.conn); walPages >= walRestartPages {
			c.restart.Store(true)
		}
		c.busy.Store(false)
	}
}

// wrote is called by the writer, on its goroutine and between two
// transactions, with the pages the last one added to the WAL.
func (c *checkpointer) wrote(conn *sql.Conn, pages int) {
	if c.restart.Load() && !c.busy.Load() {
		// Nothing but the writer kicks the loop, so it stays idle until
		// the next write has found every frame copied.
		c.restart.Store(false)
		c.pages = 0
		c.checkpoint(conn)
		return
	}
	if c.pages += pages; c.pages >= checkpointPages && c.busy.CompareAndSwap(false, true) {
		c.pages = 0
		c.kickCh <- struct{}{}
	}
}

// checkpoint copies what it can of the WAL on conn without waiting for
// any lock, and returns the WAL's size and how much of it is copied.
func (c *checkpointer) checkpoint(conn *sql.Conn) (walPages, copied int) {
	var busy int
	err := conn.QueryRowContext(context.Background(), "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &walPages, &copied)
	if err != nil {
		c.logger.Error("sqlite store: checkpoint failed", "path", c.path, "err", err)
	}
	if c.ran != nil {
		c.ran(walPages, copied, err)
	}
	return walPages, copied
}
