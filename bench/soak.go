package bench

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/captchaq/captchaq/amqp"
	"github.com/captchaq/captchaq/internal/syncio"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/sim"
)

// Faults of the soak: what strikes the deployment on its schedule.
const (
	SoakWorkerKill      = "worker-sigkill"   // a worker is SIGKILLed; a new one starts in its place
	SoakWorkerStop      = "worker-sigstop"   // a worker is SIGSTOPped for SoakConfig.Outage, then SIGCONTed
	SoakFrontKill       = "front-sigkill"    // a replica is SIGKILLed; a new one starts on its address
	SoakBrokerRestart   = "broker-restart"   // rabbitmqctl stop_app, a second, start_app
	SoakPostgresRestart = "postgres-restart" // pg_ctlcluster restart
	SoakClose           = "close"            // rabbitmqctl close_connection of a worker's connection
	SoakPartition       = "partition"        // a worker's traffic to the broker and provider stops for SoakConfig.Outage
)

// SoakFaults lists the soak's faults in the order the report gives them.
var SoakFaults = []string{SoakWorkerKill, SoakWorkerStop, SoakFrontKill, SoakBrokerRestart, SoakPostgresRestart, SoakClose, SoakPartition}

// Defaults of SoakConfig: the independent soak of issue 44.
const (
	SoakDurationDefault = 10 * time.Minute
	SoakRateDefault     = 5.0
	SoakThreadsDefault  = 20
	SoakWorkersDefault  = 3
	SoakReplicasDefault = 2
	SoakGapMinDefault   = 15 * time.Second
	SoakGapMaxDefault   = 30 * time.Second
	SoakOutageDefault   = 20 * time.Second
	SoakDrainDefault    = 5 * time.Minute
	SoakPingbackDefault = 2 * time.Minute
	SoakAMQPDefault     = "amqp://guest:guest@127.0.0.1:5672/"
	SoakPostgresDefault = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	SoakHAProxyDefault  = "deploy/haproxy/haproxy.cfg"
)

// SoakConfig is one soak: the deployment as users run it (separate
// `captchaq worker` and `captchaq serve --amqp` processes at their
// default flags, on a broker vhost and a database of the soak's own,
// behind HAProxy on the shipped config), a client through the balancer,
// and faults on a schedule drawn from Seed.
type SoakConfig struct {
	// Binary is the captchaq command the processes run as.
	Binary string
	// AMQP is the broker's URL, as a user that may add vhosts. Default
	// SoakAMQPDefault.
	AMQP string
	// Postgres is the URL of a database on the server as a user that
	// creates databases. Default SoakPostgresDefault.
	Postgres string
	// HAProxy is the config the balancer runs on. Default
	// SoakHAProxyDefault (relative to the working directory).
	HAProxy string
	// Duration is how long the client submits; the run goes on past it
	// until every fault kind has struck once. Default SoakDurationDefault.
	Duration time.Duration
	// Seed draws the fault schedule and seeds the simulator.
	Seed uint64
	// Rate is the tasks the client submits per second. Default 5.
	Rate float64
	// Threads is the plan (every worker's --threads), Workers and
	// Replicas the processes. Defaults 20, 3, 2.
	Threads, Workers, Replicas int
	// GapMin and GapMax bound the pause between faults. Defaults 15 s, 30 s.
	GapMin, GapMax time.Duration
	// Outage is how long a SIGSTOP or a partition lasts. Default 20 s.
	Outage time.Duration
	// Drain bounds the wait, after the client stops submitting, for the
	// answers of the tasks accepted, and each wait for a process to come
	// up: a hang limit, not a target. Default SoakDrainDefault.
	Drain time.Duration
	// PingbackWait bounds the wait, once every answer is in, for the
	// pingbacks (a replica retries one while the store fails, up to two
	// minutes). Default SoakPingbackDefault.
	PingbackWait time.Duration
	// Faults are the kinds the schedule draws from. Default SoakFaults.
	Faults []string
	// DisruptBroker and DisruptPostgres, when set, are called before a
	// fault that disturbs every user of the broker (restart, close) or
	// PostgreSQL (restart), and their results after: the command takes the
	// project's test locks there (CONTRIBUTING.md).
	DisruptBroker, DisruptPostgres func() (release func())
	// Log receives the processes' logs and the schedule. Default: discard.
	Log io.Writer
}

func (c SoakConfig) withDefaults() SoakConfig {
	c.AMQP = cmp.Or(c.AMQP, SoakAMQPDefault)
	c.Postgres = cmp.Or(c.Postgres, SoakPostgresDefault)
	c.HAProxy = cmp.Or(c.HAProxy, SoakHAProxyDefault)
	c.Duration = cmp.Or(c.Duration, SoakDurationDefault)
	c.Rate = cmp.Or(c.Rate, SoakRateDefault)
	c.Threads = cmp.Or(c.Threads, SoakThreadsDefault)
	c.Workers = cmp.Or(c.Workers, SoakWorkersDefault)
	c.Replicas = cmp.Or(c.Replicas, SoakReplicasDefault)
	c.GapMin = cmp.Or(c.GapMin, SoakGapMinDefault)
	c.GapMax = cmp.Or(c.GapMax, SoakGapMaxDefault)
	c.Outage = cmp.Or(c.Outage, SoakOutageDefault)
	c.Drain = cmp.Or(c.Drain, SoakDrainDefault)
	c.PingbackWait = cmp.Or(c.PingbackWait, SoakPingbackDefault)
	if len(c.Faults) == 0 {
		c.Faults = SoakFaults
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	return c
}

func (c SoakConfig) validate() error {
	var errs []error
	if c.Binary == "" {
		errs = append(errs, errors.New("soak: Binary is empty: give the captchaq command"))
	}
	if c.Replicas > 3 {
		errs = append(errs, fmt.Errorf("soak: Replicas is %d: the shipped HAProxy config has 3 servers", c.Replicas))
	}
	if c.GapMax < c.GapMin {
		errs = append(errs, fmt.Errorf("soak: GapMax %v is under GapMin %v", c.GapMax, c.GapMin))
	}
	for _, f := range c.Faults {
		if !slices.Contains(SoakFaults, f) {
			errs = append(errs, fmt.Errorf("soak: fault %q: use one of %s", f, strings.Join(SoakFaults, ", ")))
		}
	}
	return errors.Join(errs...)
}

// SoakPaidTwiceBound is how many tasks one fault of a kind may have solved
// twice: the one per fault, none for a connection closed cleanly,
// and the windows the amqp package doc states where they are wider. A
// silent worker (SIGSTOP, partition) forfeits the tasks it submitted but
// had not checkpointed, at most the submit cap (under the plan's
// threads); a broker restart longer than the claim window forfeits the
// submits whose checkpoints it cut off, each holding one of the plan's
// threads. A task the client sent twice (its in.php had no answer) is
// counted apart, not against its fault.
func SoakPaidTwiceBound(kind string, threads int) int {
	switch kind {
	case SoakClose:
		return 0
	case SoakWorkerStop, SoakPartition, SoakBrokerRestart:
		return threads
	default:
		return 1
	}
}

// SoakFault is one fault the soak struck.
type SoakFault struct {
	Kind, Target string
	// At is when it struck, from the start of the client (after the
	// lock a Disrupt callback took); Took how long it lasted (the outage,
	// the restart).
	At, Took time.Duration
	// PaidTwice counts the second solves the simulator accepted from its
	// strike to the next fault's.
	PaidTwice int64
	// Err is why it could not be struck, if it could not.
	Err string

	dupesAt int64 // the simulator's second solves at the strike
}

// SoakRSS is a process's resident set at the start and at the end, in
// KiB (a process replaced by a fault is measured in its successor).
type SoakRSS struct {
	Name       string
	Start, End int64
}

// SoakReport is what a soak saw.
type SoakReport struct {
	Config SoakConfig
	// Elapsed is the client's submitting time.
	Elapsed time.Duration
	Faults  []SoakFault
	// Submitted counts tasks the client sent; Accepted those in.php took
	// (OK|ID); Answered those with a token; Lost accepted ones without.
	Submitted, Accepted, Answered, Lost int
	// WrongToken counts answers that are not their task's (siteverify
	// names another page, or none) and pingbacks whose token is not the
	// one res.php gave; TwoTokens ids answered with different tokens.
	WrongToken, TwoTokens int
	// PingbacksMissing counts answered ids without a pingback,
	// PingbacksDoubled ids with more than one, PingbacksOther pingbacks
	// for ids no accepted task had (an in.php taken whose answer was lost).
	PingbacksMissing, PingbacksDoubled, PingbacksOther int
	// PaidTwice counts the simulator's second accepted submits of a task;
	// Resent those explained by an in.php the client sent again after no
	// answer (it was sent twice, and solved twice).
	PaidTwice, Resent int64
	// PlanPeak is the most threads in use at once at the provider; NoSlot
	// counts the submits it refused for want of a free one, of Submits.
	PlanPeak        int
	NoSlot, Submits int64
	// Latency is from each accept to its first answer; After, the same
	// for tasks accepted in the minute after a fault, by kind.
	Latency sim.Quantiles
	After   map[string]sim.Quantiles
	// Answers counts the client's answers other than OK and
	// CAPCHA_NOT_READY, by text (a timeout, a 502, an error code).
	Answers map[string]int
	RSS     []SoakRSS
	// Broken lists the invariants that broke; empty when the soak passed.
	// Notes lists what fell in a known window instead.
	Broken, Notes []string
}

// Err is an error naming every broken invariant and the seed, or nil.
func (r SoakReport) Err() error {
	if len(r.Broken) == 0 {
		return nil
	}
	return fmt.Errorf("soak (seed %d): %s", r.Config.Seed, strings.Join(r.Broken, "; "))
}

// Soak runs one soak and checks its invariants (SoakReport.Broken). Its
// error is for a soak that could not run; a soak that ran and found an
// invariant broken returns a nil error and a report with Broken set.
func Soak(ctx context.Context, cfg SoakConfig) (SoakReport, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return SoakReport{Config: cfg}, err
	}
	var b [4]byte
	_, _ = crand.Read(b[:])
	log := syncio.NewWriter(cfg.Log)
	r := &soakRun{cfg: cfg, name: "captchaq_soak_" + hex.EncodeToString(b[:]), log: log, procGroup: newProcGroup(log)}
	defer r.cleanup()
	return r.run(ctx)
}

// soakRun is one soak's deployment.
type soakRun struct {
	cfg  SoakConfig
	name string // the vhost's and the database's
	log  *syncio.Writer
	dir  string
	sim  *sim.Server
	// The simulator's URL, the vhost's, the database's, the clients
	// file and the balancer's URL.
	simURL, brokerURL, storeURL, clients, base string

	vhost, db bool // created, to remove
	ledger    *soakLedger
	pingbacks *pingbackReceiver
	*procGroup
	replicas  []string    // the replicas' addresses
	brokerWay []*tcpProxy // by worker
	apiWay    []*apiProxy // by worker
	startRSS  map[string]int64
	struck    time.Time // when a fault that waited for a lock struck
}

// soakClientKey is the key of the soak's client at the fronts.
const soakClientKey = "soak-client-key"

func (r *soakRun) run(ctx context.Context) (SoakReport, error) {
	cfg := r.cfg
	rep := SoakReport{Config: cfg, After: map[string]sim.Quantiles{}, Answers: map[string]int{}}
	if err := r.setUp(ctx); err != nil {
		return rep, err
	}
	r.startRSS = r.rss()
	fmt.Fprintf(r.log, "soak: seed %d, deployment up, the client starts\n", cfg.Seed)

	rng := rand.New(rand.NewPCG(cfg.Seed, 0x50a4))
	start := time.Now()
	r.ledger = newSoakLedger(r.base, r.simURL, r.pingbacks.url, start)
	driveCtx, stopDrive := context.WithCancel(ctx)
	defer stopDrive()
	pollCtx, stopPolls := context.WithCancel(ctx)
	defer stopPolls()
	driving := make(chan struct{})
	go func() {
		defer close(driving)
		r.ledger.drive(driveCtx, pollCtx, cfg.Rate)
	}()

	faults, err := r.strike(ctx, rng, start)
	stopDrive()
	<-driving
	rep.Elapsed = time.Since(start)
	if err != nil {
		return rep, err
	}
	rep.Faults = faults
	fmt.Fprintf(r.log, "soak: the client stopped after %v; waiting for the answers\n", rep.Elapsed.Round(time.Second))
	drainCtx, cancel := context.WithTimeout(ctx, cfg.Drain)
	defer cancel()
	r.ledger.wait(drainCtx)
	stopPolls()
	r.ledger.repoll(ctx, r.replicaURLs())
	pbCtx, cancelPB := context.WithTimeout(ctx, cfg.PingbackWait)
	defer cancelPB()
	r.pingbacks.waitFor(pbCtx, r.ledger.answeredIDs())
	endRSS := r.rss()
	r.report(&rep, endRSS)
	return rep, nil
}

// strike runs the fault schedule: a pause drawn from [GapMin, GapMax],
// a fault drawn from a shuffled bag of the kinds, until Duration is over
// and every kind has struck once.
func (r *soakRun) strike(ctx context.Context, rng *rand.Rand, start time.Time) ([]SoakFault, error) {
	cfg := r.cfg
	var faults []SoakFault
	var bag []string
	struck := map[string]bool{}
	for {
		gap := cfg.GapMin + time.Duration(rng.Int64N(int64(cfg.GapMax-cfg.GapMin)+1))
		if len(bag) == 0 {
			bag = slices.Clone(cfg.Faults)
			rng.Shuffle(len(bag), func(i, j int) { bag[i], bag[j] = bag[j], bag[i] })
		}
		kind := bag[0]
		bag = bag[1:]
		pick := rng.IntN(max(cfg.Workers, cfg.Replicas)) // drawn for every kind: one schedule per seed
		sleepCtx(ctx, gap)
		if ctx.Err() != nil {
			return faults, ctx.Err()
		}
		done := len(struck) == len(cfg.Faults)
		if done && time.Since(start) >= cfg.Duration {
			return faults, nil
		}
		f := SoakFault{Kind: kind, At: time.Since(start)}
		var err error
		f.dupesAt = r.sim.Stats().Duplicates
		if len(faults) > 0 {
			faults[len(faults)-1].PaidTwice = f.dupesAt - faults[len(faults)-1].dupesAt
		}
		f.Target, err = r.fault(ctx, kind, pick)
		if !r.struck.IsZero() { // it waited for a lock first
			f.At = r.struck.Sub(start)
			r.struck = time.Time{}
		}
		f.Took = time.Since(start) - f.At
		if err != nil {
			f.Err = err.Error()
			fmt.Fprintf(r.log, "soak: %s at %v failed: %v\n", kind, f.At.Round(time.Second), err)
		} else {
			fmt.Fprintf(r.log, "soak: %s of %s at %v, took %v\n", kind, f.Target, f.At.Round(time.Second), f.Took.Round(100*time.Millisecond))
		}
		faults = append(faults, f)
		struck[kind] = true
	}
}

// soakKey is the provider key the soak's workers send to its simulator.
const soakKey = "soak-provider-key"

// setUp starts the simulator, the vhost, the database, the workers, the
// replicas and HAProxy, and waits until the balancer answers and every
// worker consumes.
func (r *soakRun) setUp(ctx context.Context) error {
	cfg := r.cfg
	dir, err := os.MkdirTemp("", "captchaq-soak-")
	if err != nil {
		return err
	}
	r.dir = dir
	srv, simURL, err := sim.Start(sim.Config{Threads: cfg.Threads, Key: soakKey, Seed: cfg.Seed,
		Latency:    map[provider.Kind]sim.Latency{provider.KindTurnstile: FleetLatencyDefault},
		PollBan:    sim.PollBan{Disabled: true},
		Siteverify: sim.Siteverify{TurnstileLifetime: 24 * time.Hour}}, "127.0.0.1:0")
	if err != nil {
		return err
	}
	r.sim, r.simURL = srv, simURL
	if r.pingbacks, err = newPingbackReceiver(); err != nil {
		return err
	}
	if err := r.addVhost(); err != nil {
		return err
	}
	if err := r.createDatabase(ctx); err != nil {
		return err
	}
	r.clients = filepath.Join(dir, "clients.json")
	if err := os.WriteFile(r.clients, []byte(`[{"name":"soak","key":"`+soakClientKey+`"}]`), 0o600); err != nil {
		return err
	}
	for i := range cfg.Workers {
		bp, err := newTCPProxy(hostPort(r.brokerURL))
		if err != nil {
			return err
		}
		ap, err := newAPIProxy(simURL)
		if err != nil {
			bp.close()
			return err
		}
		r.brokerWay, r.apiWay = append(r.brokerWay, bp), append(r.apiWay, ap)
		if err := r.startWorker(i); err != nil {
			return err
		}
	}
	for i := range cfg.Replicas {
		addr, err := freeAddr()
		if err != nil {
			return err
		}
		r.replicas = append(r.replicas, addr)
		if err := r.startReplica(i); err != nil {
			return err
		}
	}
	if err := r.startHAProxy(); err != nil {
		return err
	}
	for _, a := range r.replicas {
		if err := waitHealthy(ctx, "http://"+a, cfg.Drain); err != nil {
			return err
		}
	}
	if err := waitHealthy(ctx, r.base, cfg.Drain); err != nil {
		return err
	}
	return r.waitConsumers(ctx, cfg.Workers)
}

// addVhost adds the soak's vhost and lets the URL's user use it.
func (r *soakRun) addVhost() error {
	u, err := url.Parse(r.cfg.AMQP)
	if err != nil {
		return fmt.Errorf("soak: AMQP: %w", err)
	}
	user := cmp.Or(u.User.Username(), "guest")
	if out, err := exec.Command("rabbitmqctl", "-q", "add_vhost", r.name).CombinedOutput(); err != nil {
		return fmt.Errorf("soak: rabbitmqctl add_vhost: %v: %s", err, out)
	}
	r.vhost = true
	if out, err := exec.Command("rabbitmqctl", "-q", "set_permissions", "-p", r.name, user, ".*", ".*", ".*").CombinedOutput(); err != nil {
		return fmt.Errorf("soak: rabbitmqctl set_permissions: %v: %s", err, out)
	}
	u.Path, u.RawPath = "/"+r.name, ""
	r.brokerURL = u.String()
	return nil
}

// createDatabase creates the soak's database on the server of Postgres.
func (r *soakRun) createDatabase(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, r.cfg.Postgres)
	if err != nil {
		return fmt.Errorf("soak: connect to PostgreSQL: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+r.name+" TEMPLATE template0"); err != nil {
		return fmt.Errorf("soak: create database: %w", err)
	}
	r.db = true
	u, err := url.Parse(r.cfg.Postgres)
	if err != nil {
		return err
	}
	u.Path = "/" + r.name
	r.storeURL = u.String()
	return nil
}

// waitConsumers waits until n workers consume the task queue.
func (r *soakRun) waitConsumers(ctx context.Context, n int) error {
	c, err := amqp.Dial(ctx, amqp.Config{URL: r.brokerURL})
	if err != nil {
		return err
	}
	defer c.Close()
	deadline := time.Now().Add(r.cfg.Drain)
	for {
		qs, err := c.Depths(ctx, c.Names().Tasks)
		if err == nil && qs[0].Consumers >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("soak: %d workers do not consume after %v (%v)", n, r.cfg.Drain, err)
		}
		sleepCtx(ctx, 100*time.Millisecond)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// replicaURLs are the replicas' base URLs.
func (r *soakRun) replicaURLs() []string {
	var us []string
	for _, a := range r.replicas {
		us = append(us, "http://"+a)
	}
	return us
}

// cleanup stops every process (SIGTERM, then SIGKILL after 10 s) and
// removes the vhost, the database and the files.
func (r *soakRun) cleanup() {
	r.stopAll()
	for i := range r.brokerWay {
		r.brokerWay[i].close()
	}
	for i := range r.apiWay {
		r.apiWay[i].close()
	}
	if r.pingbacks != nil {
		r.pingbacks.close()
	}
	if r.sim != nil {
		r.sim.Close()
	}
	if r.vhost {
		_ = exec.Command("rabbitmqctl", "-q", "delete_vhost", r.name).Run()
	}
	if r.db {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if conn, err := pgx.Connect(ctx, r.cfg.Postgres); err == nil {
			_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+r.name+" WITH (FORCE)")
			conn.Close(context.Background())
		}
	}
	if r.dir != "" {
		_ = os.RemoveAll(r.dir)
	}
}
