package sqlite

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Synchronous is SQLite's synchronous setting: how hard a commit pushes its
// data to the disk before Finish, Checkpoint or Enqueue returns.
type Synchronous string

const (
	// SynchronousNormal (the default) writes each commit to the WAL without
	// fsync. An acknowledged write survives the process being killed
	// (kill -9, a panic, an OOM kill): it is in the OS's page cache and
	// SQLite finds it in the WAL on the next open. A power loss or kernel
	// crash may lose the last commits since the latest WAL checkpoint, but
	// never corrupts the file.
	SynchronousNormal Synchronous = "NORMAL"
	// SynchronousFull fsyncs the WAL at every commit, so an acknowledged
	// write also survives a power loss. Group commit shares one fsync among
	// the writes that commit together.
	SynchronousFull Synchronous = "FULL"
)

// Defaults for Config.
const (
	SynchronousDefault   = SynchronousNormal
	BusyTimeoutDefault   = 5 * time.Second
	RetentionDefault     = 7 * 24 * time.Hour
	PruneIntervalDefault = time.Hour
	MaxBatchDefault      = 512
)

// RetentionOff, as Config.Retention, turns the automatic prune off.
const RetentionOff time.Duration = -1

// Config configures a Store. The zero value is ready to use.
type Config struct {
	// Synchronous is SynchronousNormal or SynchronousFull. Default
	// SynchronousNormal.
	Synchronous Synchronous
	// BusyTimeout is how long a statement waits for a lock another
	// connection holds (a sqlite3 shell writing to the file, say) before it
	// fails. Default 5s.
	BusyTimeout time.Duration
	// Retention is how long final tasks (solved and failed) are kept after
	// they finished; a background loop prunes older ones every
	// PruneInterval, starting at Open. Default 7 days; RetentionOff keeps
	// them until Prune is called.
	Retention time.Duration
	// PruneInterval is how often the prune loop runs. Default 1h.
	PruneInterval time.Duration
	// MaxBatch bounds how many writes share one transaction. Default 512.
	MaxBatch int
	// Owner names who keeps its tasks in the store ("batch", "serve",
	// "gateway NAME", …). The first Open with an Owner records it; a later
	// Open with another Owner is refused (errors.Is ErrOtherOwner), so one
	// program never resumes another's tasks as its own. Empty claims
	// nothing and checks nothing.
	Owner string
	// Logger receives the prune loop's reports and failures. Default:
	// discard (captchaq logs nothing unless it is given a Logger).
	Logger *slog.Logger

	// pruned, when set, is told of each automatic prune (tests).
	pruned func(n int, err error)
	// checkpointed, when set, is told of each checkpoint of the WAL
	// (tests).
	checkpointed func(walPages, copied int, err error)
}

// withDefaults returns c with its zero fields filled in. It checks
// nothing: validate does, on its result.
func (c Config) withDefaults() Config {
	c.Synchronous = cmp.Or(c.Synchronous, SynchronousDefault)
	c.BusyTimeout = cmp.Or(c.BusyTimeout, BusyTimeoutDefault)
	c.Retention = cmp.Or(c.Retention, RetentionDefault)
	c.PruneInterval = cmp.Or(c.PruneInterval, PruneIntervalDefault)
	c.MaxBatch = cmp.Or(c.MaxBatch, MaxBatchDefault)
	c.Logger = cmp.Or(c.Logger, discardLogger)
	return c
}

// discardLogger is the default Logger: the store logs nothing unless it is
// given a Logger.
var discardLogger = slog.New(slog.DiscardHandler)

// validate reports every problem of a Config that went through
// withDefaults at once, each naming the field and the fix.
func (c Config) validate() error {
	var errs []error
	switch c.Synchronous {
	case SynchronousNormal, SynchronousFull:
	default:
		errs = append(errs, fmt.Errorf("sqlite: Config.Synchronous %q is not valid: use SynchronousNormal or SynchronousFull", c.Synchronous))
	}
	if c.BusyTimeout < 0 {
		errs = append(errs, fmt.Errorf("sqlite: Config.BusyTimeout %v is negative: use 0 for the default (%v) or a positive duration", c.BusyTimeout, BusyTimeoutDefault))
	}
	if c.Retention < 0 && c.Retention != RetentionOff {
		errs = append(errs, fmt.Errorf("sqlite: Config.Retention %v is negative: use RetentionOff to keep results, 0 for the default (%v) or a positive duration", c.Retention, RetentionDefault))
	}
	if c.PruneInterval < 0 {
		errs = append(errs, fmt.Errorf("sqlite: Config.PruneInterval %v is negative: use 0 for the default (%v) or a positive duration", c.PruneInterval, PruneIntervalDefault))
	}
	if c.MaxBatch < 0 {
		errs = append(errs, fmt.Errorf("sqlite: Config.MaxBatch %d is negative: use 0 for the default (%d) or a positive number", c.MaxBatch, MaxBatchDefault))
	}
	return errors.Join(errs...)
}
