package postgres

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/captchaq/captchaq/internal/startstop"
)

// fronts is what the replicas of a front share on the database: the task
// ids (IDBlock, IDKey), the active queue (Activate) and the tenants'
// bounds (Admit).
type fronts struct{ *db }

// idBlock is how many ids IDBlock hands out at once (the sequence's
// increment).
const idBlock = 1000

// IDBlock hands out idBlock numeric task ids that no process on the
// database was handed before: first up to first+n-1.
func (s *fronts) IDBlock(ctx context.Context) (first uint64, n int, err error) {
	if s.closed.Load() {
		return 0, 0, ErrClosed
	}
	var v int64
	if err := s.pool.QueryRow(ctx, `SELECT nextval('front_ids')`).Scan(&v); err != nil {
		return 0, 0, s.wrap("IDBlock", err)
	}
	return uint64(v), idBlock, nil
}

// idKeySize is the length of IDKey's key.
const idKeySize = 16

// IDKey is the database's secret key of the task ids (server.IDSource):
// the first call of any process writes one, drawn at random, and every
// call after reads that one, so every replica permutes IDBlock's numbers
// alike.
func (s *fronts) IDKey(ctx context.Context) ([]byte, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	fresh := make([]byte, idKeySize)
	rand.Read(fresh) // never fails (crypto/rand)
	// Two statements: the SELECT's snapshot is taken after the INSERT,
	// so it sees the key of a process that wrote it first meanwhile.
	if _, err := s.pool.Exec(ctx, `INSERT INTO front_id_key (key) VALUES ($1) ON CONFLICT (one) DO NOTHING`, fresh); err != nil {
		return nil, s.wrap("IDKey", err)
	}
	var key []byte
	if err := s.pool.QueryRow(ctx, `SELECT key FROM front_id_key`).Scan(&key); err != nil {
		return nil, s.wrap("IDKey", err)
	}
	return key, nil
}

// activeLock is the advisory lock of the active queue: "captchaq" + 1.
const activeLock = migrateLock + 1

// ErrActiveElsewhere matches the error of Activate when another process
// holds the database's active queue.
var ErrActiveElsewhere = errors.New("postgres: another process holds the active queue")

// ActiveError refuses a second active queue on one database.
type ActiveError struct {
	Name, Host string
	PID        int
	Since      time.Time
}

func (e *ActiveError) Error() string {
	who := "another process"
	if e.Host != "" {
		who = fmt.Sprintf("pid %d on %s (active since %s)", e.PID, e.Host, e.Since.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("store %s has an active queue already: %s. One queue solves the tasks of a database, since the provider key's threads are one plan: stop that one, or start this one as a standby (captchaq serve --standby) to take over when it stops", e.Name, who)
}

// Is makes every ActiveError match ErrActiveElsewhere.
func (e *ActiveError) Is(target error) bool { return target == ErrActiveElsewhere }

// Active is the database's active-queue lock, held on a connection of its
// own until Release or until that connection is lost (Lost).
type Active struct {
	conn *pgxpool.Conn
	lost chan struct{}
	loop *startstop.Loop
}

// activeCheck is how often a held lock's connection is checked.
const activeCheck = 2 * time.Second

// Activate takes the database's active-queue lock (a session advisory
// lock). It fails at once with an *ActiveError naming the holder when
// another process holds it, unless wait is set: then it tries again once
// a second until it has it or ctx ends. The lock goes with its
// connection: when the holder dies, or its connection or the server does,
// it is free, and Lost tells the holder, which must stop work at once
// (another process may take over).
func (s *fronts) Activate(ctx context.Context, wait bool) (*Active, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	for {
		a, err := s.tryActivate(ctx)
		if err == nil || !wait || !errors.Is(err, ErrActiveElsewhere) {
			return a, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func (s *fronts) tryActivate(ctx context.Context) (*Active, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, s.wrap("Activate", err)
	}
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, activeLock).Scan(&got); err != nil {
		conn.Release()
		return nil, s.wrap("Activate", err)
	}
	if !got {
		conn.Release()
		e := &ActiveError{Name: s.name}
		_ = s.pool.QueryRow(ctx, `SELECT host, pid, since FROM active_queue`).Scan(&e.Host, &e.PID, &e.Since)
		return nil, e
	}
	host, _ := os.Hostname()
	if _, err := conn.Exec(ctx, `INSERT INTO active_queue (host, pid, since) VALUES ($1, $2, now())
		ON CONFLICT (one) DO UPDATE SET host = excluded.host, pid = excluded.pid, since = excluded.since`, clean(host), os.Getpid()); err != nil {
		_ = conn.Conn().Close(context.Background()) // drops the lock with it
		conn.Release()
		return nil, s.wrap("Activate", err)
	}
	a := &Active{conn: conn, lost: make(chan struct{})}
	a.loop = startstop.New(a.watch)
	_ = a.loop.Start(context.Background())
	return a, nil
}

func (a *Active) watch(ctx context.Context) {
	startstop.Tick(ctx, activeCheck, func(ctx context.Context) {
		select {
		case <-a.lost:
			return
		default:
		}
		cctx, cancel := context.WithTimeout(ctx, activeCheck)
		defer cancel()
		if _, err := a.conn.Exec(cctx, `SELECT 1`); err != nil && ctx.Err() == nil {
			close(a.lost)
		}
	})
}

// Lost is closed once the lock's connection failed: the lock may be
// another's now.
func (a *Active) Lost() <-chan struct{} { return a.lost }

// Release gives the lock back (by closing its connection, which also
// covers a connection that broke).
func (a *Active) Release() {
	a.loop.Stop()
	_ = a.conn.Conn().Close(context.Background())
	a.conn.Release()
}

// slotLock is the first key of the advisory locks Admit takes for a
// client's max_inflight, one a tenant (the second key is the tenant's
// hash): "capq".
const slotLock int32 = 0x63617071

// slotHold is how long a slot Admit took counts when its task is not
// recorded: a replica that died between its check and its record frees
// the room then.
const slotHold = time.Minute

// admit checks a tenant's max_inflight ($3; 0: none) and rate ($5 tasks a
// second in bursts of $6; 0: none) for ids ($2) in one statement, and
// takes both or neither. The max_inflight count is the tenant's unfinished
// tasks of the whole database and its slots still held; slots whose task
// is recorded (unfinished, or finished since) or whose hold ran out go
// first. Run after the tenant's lock when $3 > 0: the count is then exact
// across processes. The rate is a token bucket, the tenant's row of
// front_rates, updated in place (ON CONFLICT DO UPDATE locks the row and
// reads its latest version, so concurrent takes queue on it, no lock
// needed). The last column is the bucket's tokens as of the statement's
// start, for the wait of a refusal. Its commit does not wait for the WAL
// to reach the disk (synchronous_commit off, for this transaction only):
// a crash may lose the last admissions, never an accepted task's, since
// the task's own commit comes after and flushes the WAL up to it. Waiting,
// every rate-limited in.php cost a flush more (0.55 -> 1.41 a task).
const admit = `WITH gone AS (
	DELETE FROM front_slots s WHERE $3::int > 0 AND s.tenant = $1 AND (s.until < now() OR EXISTS (
		SELECT 1 FROM tasks t WHERE t.id = s.id AND (t.status IN ('queued', 'inflight') OR t.finished_at >= s.taken)))
	RETURNING s.id
), held AS (
	SELECT CASE WHEN $3::int > 0 THEN
		(SELECT count(*) FROM tasks WHERE tenant = $1 AND status IN ('queued', 'inflight'))
		+ (SELECT count(*) FROM front_slots WHERE tenant = $1 AND id NOT IN (SELECT id FROM gone))
		ELSE 0 END AS n
), fits AS (
	SELECT $3::int <= 0 OR n + cardinality($2::text[]) <= $3::int AS ok FROM held
), bucket AS (
	INSERT INTO front_rates AS r (tenant, tokens, at)
	SELECT $1, $6::float8 - cardinality($2::text[]), now() FROM fits WHERE $5::float8 > 0 AND fits.ok
	ON CONFLICT (tenant) DO UPDATE
	SET tokens = least($6::float8, r.tokens + greatest(0, extract(epoch FROM now() - r.at)) * $5::float8) - cardinality($2::text[]),
		at = greatest(r.at, now())
	WHERE least($6::float8, r.tokens + greatest(0, extract(epoch FROM now() - r.at)) * $5::float8) >= cardinality($2::text[])
	RETURNING 1
), paced AS (
	SELECT $5::float8 <= 0 OR EXISTS (SELECT 1 FROM bucket) AS ok
), taken AS (
	INSERT INTO front_slots (id, tenant, taken, until)
	SELECT DISTINCT unnest($2::text[]), $1, now(), now() + make_interval(secs => $4)
	FROM fits, paced WHERE $3::int > 0 AND fits.ok AND paced.ok
	ON CONFLICT (id) DO UPDATE SET taken = excluded.taken, until = excluded.until
	RETURNING 1
)
SELECT held.n, fits.ok, paced.ok,
	(SELECT least($6::float8, tokens + greatest(0, extract(epoch FROM now() - at)) * $5::float8) FROM front_rates WHERE tenant = $1)
FROM held, fits, paced, (SELECT set_config('synchronous_commit', 'off', true)) AS async`

// Admit lets ids of tenant in, within its bounds across every process on
// the database: at most maxInflight unfinished tasks (0: no bound), and rate
// tasks a second with bursts of up to burst (rate 0: no bound), each id
// one task of the rate. ok is false, and nothing taken, when they do not
// fit: held is then the tenant's unfinished tasks when max_inflight
// refused them, and wait, when the rate did, is how long until its tokens
// are there (at most the time to fill them from none). Both checks and both takes are one transaction, one round
// trip: two processes that take a tenant's last slot or token at one
// moment do not both get it. A slot counts until its task is recorded
// (Enqueue, or Replay for a dead letter) and finishes, until FreeSlots
// gives it back, or for a minute; a token is spent.
func (s *fronts) Admit(ctx context.Context, tenant string, ids []string, maxInflight int, rate float64, burst int) (ok bool, held int, wait time.Duration, err error) {
	if s.closed.Load() {
		return false, 0, 0, ErrClosed
	}
	if len(ids) == 0 || (maxInflight <= 0 && rate <= 0) {
		return true, 0, 0, nil
	}
	if rate > 0 && len(ids) > burst {
		return false, 0, 0, fmt.Errorf("postgres: Admit: %d tasks at once, past the burst of %d", len(ids), burst)
	}
	// One batch is one implicit transaction: the lock is held until its
	// end, and the count's statement starts after the lock is taken.
	batch := &pgx.Batch{}
	if maxInflight > 0 {
		batch.Queue(`SELECT pg_advisory_xact_lock($1, hashtext($2))`, slotLock, tenant)
	}
	batch.Queue(admit, tenant, ids, maxInflight, slotHold.Seconds(), rate, burst)
	br := s.pool.SendBatch(ctx, batch)
	defer br.Close()
	if maxInflight > 0 {
		if _, err := br.Exec(); err != nil {
			return false, 0, 0, s.wrap("Admit", err)
		}
	}
	var n int64
	var fits, paced bool
	var tokens *float64
	if err := br.QueryRow().Scan(&n, &fits, &paced, &tokens); err != nil {
		return false, 0, 0, s.wrap("Admit", err)
	}
	if err := br.Close(); err != nil {
		return false, 0, 0, s.wrap("Admit", err)
	}
	switch {
	case !fits:
		return false, int(n), 0, nil
	case !paced:
		// The tokens as of the statement's start: a take that committed
		// meanwhile is not in them (the update saw it), so with enough
		// there the wait is the one from an empty bucket.
		need := float64(len(ids))
		if tokens != nil && *tokens < need {
			need -= *tokens
		}
		return false, int(n), max(time.Millisecond, time.Duration(need/rate*float64(time.Second))), nil
	}
	return true, int(n), 0, nil
}

// FreeSlots gives back the slots Admit took for ids whose tasks were not
// accepted.
func (s *fronts) FreeSlots(ctx context.Context, ids []string) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM front_slots WHERE id = ANY($1)`, ids); err != nil {
		return s.wrap("FreeSlots", err)
	}
	return nil
}
