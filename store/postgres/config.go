package postgres

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Defaults for Config.
const (
	RetentionDefault      = 7 * 24 * time.Hour
	PruneIntervalDefault  = time.Hour
	ConnectTimeoutDefault = 10 * time.Second
	// PoolDefault is the least size of the pool when the connection
	// string sets no pool_max_conns (the default is the larger of it and
	// 4 × the number of CPUs).
	PoolDefault = 16
)

// RetentionOff, as Config.Retention, turns the automatic prune off.
const RetentionOff time.Duration = -1

// Config configures a Store. The zero value is ready to use; the pool's
// size and the server's settings come from the connection string
// (pool_max_conns=N, see pgxpool.ParseConfig).
type Config struct {
	// Retention is how long final tasks (solved and failed) are kept after
	// they finished; a background loop prunes older ones every
	// PruneInterval, starting at Open. Default 7 days; RetentionOff keeps
	// them until Prune is called. Replicas on one database each prune:
	// the deletes are the same, whoever runs them.
	Retention time.Duration
	// PruneInterval is how often the prune loop runs. Default 1h.
	PruneInterval time.Duration
	// ConnectTimeout bounds Open's first connection when the connection
	// string sets no connect_timeout. Default 10s.
	ConnectTimeout time.Duration
	// Owner names who keeps its tasks in the database ("batch", "serve",
	// "gateway NAME", …). The first Open with an Owner records it; a later
	// Open with another Owner is refused (errors.Is ErrOtherOwner), so one
	// program never resumes another's tasks as its own. Empty claims
	// nothing and checks nothing.
	Owner string
	// Notify announces each task Enqueue stores to the Watch functions of
	// the other Stores on the database (one NOTIFY a task, in the same
	// transaction): replicas of one front count each other's tasks.
	// Default off.
	Notify bool
	// Logger receives the prune loop's and the watcher's reports and
	// failures. Default: discard.
	Logger *slog.Logger

	// pruned, when set, is told of each automatic prune (tests).
	pruned func(n int, err error)
}

var discardLogger = slog.New(slog.DiscardHandler)

// withDefaults returns c with its zero fields filled in. It checks
// nothing: validate does, on its result.
func (c Config) withDefaults() Config {
	c.Retention = cmp.Or(c.Retention, RetentionDefault)
	c.PruneInterval = cmp.Or(c.PruneInterval, PruneIntervalDefault)
	c.ConnectTimeout = cmp.Or(c.ConnectTimeout, ConnectTimeoutDefault)
	c.Logger = cmp.Or(c.Logger, discardLogger)
	return c
}

// validate reports every problem of a Config that went through
// withDefaults at once, each naming the field and the fix.
func (c Config) validate() error {
	var errs []error
	if c.Retention < 0 && c.Retention != RetentionOff {
		errs = append(errs, fmt.Errorf("postgres: Config.Retention %v is negative: use RetentionOff to keep results, 0 for the default (%v) or a positive duration", c.Retention, RetentionDefault))
	}
	if c.PruneInterval < 0 {
		errs = append(errs, fmt.Errorf("postgres: Config.PruneInterval %v is negative: use 0 for the default (%v) or a positive duration", c.PruneInterval, PruneIntervalDefault))
	}
	if c.ConnectTimeout < 0 {
		errs = append(errs, fmt.Errorf("postgres: Config.ConnectTimeout %v is negative: use 0 for the default (%v) or a positive duration", c.ConnectTimeout, ConnectTimeoutDefault))
	}
	return errors.Join(errs...)
}
