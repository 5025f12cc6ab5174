package bench

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/captchaq/captchaq/amqp"
	"github.com/captchaq/captchaq/internal/syncio"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/sim"
)

// Faults of the fleet scenario: what happens to one worker (or the broker)
// FleetConfig.FaultAt into the run.
const (
	FaultNone      = "none"      // nothing
	FaultSIGKILL   = "sigkill"   // the worker is SIGKILLed; a new one starts
	FaultPartition = "partition" // its traffic to the broker and the provider stops, sockets open, for FleetConfig.Outage
	FaultClose     = "close"     // rabbitmqctl close_connection of its connection
	FaultRestart   = "restart"   // rabbitmqctl stop_app, then start_app
	FaultSIGSTOP   = "sigstop"   // SIGSTOP, then SIGCONT after FleetConfig.Outage
)

// FleetFaults lists the faults in the order the report gives them.
var FleetFaults = []string{FaultNone, FaultSIGKILL, FaultPartition, FaultClose, FaultRestart, FaultSIGSTOP}

// Defaults of FleetConfig: issue 27's run as an operator makes it.
const (
	FleetTasksDefault   = 150
	FleetThreadsDefault = 10
	FleetWorkersDefault = 3
	FleetFaultAtDefault = 4 * time.Second
	FleetOutageDefault  = 30 * time.Second
)

// FleetLatencyDefault is the Turnstile solve time of the fleet scenario:
// log-normal around 1 s (Spread 0.5), clamped to 0.5–2 s, as solve times
// spread at a provider. The floor is the drawn times' sum ÷ threads.
var FleetLatencyDefault = sim.Latency{Median: time.Second, Spread: 0.5, Min: 500 * time.Millisecond, Max: 2 * time.Second}

// FleetConfig is one run of the fleet scenario: real `captchaq worker`
// processes at their default flags (but --threads), tasks from `captchaq
// enqueue`, a simulator in this process, and one fault.
type FleetConfig struct {
	// Binary is the captchaq command the workers and enqueue run as.
	Binary string
	// URL is the broker's; the run uses a prefix of its own and deletes
	// its topology after.
	URL string
	// Fault is one of FleetFaults. Default FaultNone.
	Fault string
	// Tasks, Threads (the plan, every worker's --threads) and Workers.
	Tasks, Threads, Workers int
	// FaultAt is when the fault strikes, after the enqueue starts: then,
	// or later once the worker it strikes holds a checkpoint (a task at
	// the provider).
	FaultAt time.Duration
	// Outage is how long a partition or a SIGSTOP lasts.
	Outage time.Duration
	// Latency is the Turnstile solve time. Default FleetLatencyDefault.
	Latency sim.Latency
	// Seed seeds the simulator.
	Seed uint64
	// Disrupt, when set, is called before a fault that disturbs every
	// user of the broker (close, restart) and its result after: tests
	// take the broker lock exclusively there (internal/brokertest).
	Disrupt func() (release func())
	// Log receives the workers' logs and progress. Default: discard.
	Log io.Writer
}

func (c FleetConfig) withDefaults() FleetConfig {
	c.Fault = cmp.Or(c.Fault, FaultNone)
	c.Tasks = cmp.Or(c.Tasks, FleetTasksDefault)
	c.Threads = cmp.Or(c.Threads, FleetThreadsDefault)
	c.Workers = cmp.Or(c.Workers, FleetWorkersDefault)
	c.FaultAt = cmp.Or(c.FaultAt, FleetFaultAtDefault)
	c.Outage = cmp.Or(c.Outage, FleetOutageDefault)
	if c.Latency == (sim.Latency{}) {
		c.Latency = FleetLatencyDefault
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	return c
}

// FleetReport is what one fleet run measured.
type FleetReport struct {
	Config FleetConfig
	// Results counts tasks with a result; Lost those without one;
	// DeliveredTwice those given two different answers (a second solve
	// answered, or a different outcome), each a mix-up. Copies counts
	// results that reached the results queue again as the same answer
	// (task, status, captcha id, token): a publish sent again when its
	// channel died before the confirm, or a broker restart that kept a
	// commit's result and lost its ack, so the task was answered again
	// from the same captcha id. collect and the gateway keep one of each
	// task's results, so a copy reaches no client twice.
	Results, Lost, DeliveredTwice, Copies int
	// PaidTwice counts the simulator's second accepted submits of a task.
	PaidTwice int64
	// ReadyToFetched is the simulator's: from each answer ready to its
	// first delivery to a worker's poll.
	ReadyToFetched sim.Quantiles
	// Makespan runs from the enqueue's start to the last result; Floor is
	// max(drawn solve times ÷ threads, longest).
	Makespan, Floor time.Duration
	// Utilization is the simulator's saturated utilization (from the
	// first to the last accepted submit).
	Utilization float64
	// NoSlot counts "no free thread" answers among Submits.
	NoSlot, Submits int64
	// FaultDone is when the fault ended (the broker back, SIGCONT, the
	// partition lifted), after the enqueue started; 0 for none and sigkill.
	FaultDone time.Duration
	// Load is the 1-minute load average at the end.
	Load string
}

// Fleet runs the fleet scenario once.
func Fleet(ctx context.Context, cfg FleetConfig) (FleetReport, error) {
	cfg = cfg.withDefaults()
	if !slices.Contains(FleetFaults, cfg.Fault) {
		return FleetReport{}, fmt.Errorf("fleet: fault %q: use one of %s", cfg.Fault, strings.Join(FleetFaults, ", "))
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	r := &fleetRun{cfg: cfg, prefix: "bench-fleet-" + hex.EncodeToString(b[:]), procs: map[string]*exec.Cmd{}, log: syncio.NewWriter(cfg.Log)}
	defer r.cleanup()
	return r.run(ctx)
}

// fleetRun is one run's simulator, processes and proxies.
type fleetRun struct {
	cfg    FleetConfig
	prefix string
	sim    *sim.Server
	apiURL string
	log    *syncio.Writer // cfg.Log, one write at a time

	mu     sync.Mutex
	procs  map[string]*exec.Cmd
	api    *apiProxy // w0's way to the provider
	broker *tcpProxy // w0's way to the broker (partition, close)
}

// fleetKey is the provider key the run's workers send to its simulator.
const fleetKey = "fleet-bench-key"

func (r *fleetRun) run(ctx context.Context) (FleetReport, error) {
	cfg := r.cfg
	rep := FleetReport{Config: cfg}
	srv, apiURL, err := sim.Start(sim.Config{Threads: cfg.Threads, Key: fleetKey, Seed: cfg.Seed,
		Latency: map[provider.Kind]sim.Latency{provider.KindTurnstile: cfg.Latency}}, "127.0.0.1:0")
	if err != nil {
		return rep, err
	}
	r.sim, r.apiURL = srv, apiURL
	// The topology first, so results have a queue before any worker runs.
	conn, err := amqp.Dial(ctx, amqp.Config{URL: cfg.URL, Prefix: r.prefix})
	if err != nil {
		return rep, err
	}
	conn.Close()
	counts, stopCount, err := r.countResults(ctx)
	if err != nil {
		return rep, err
	}
	defer stopCount()
	names := make([]string, cfg.Workers)
	for i := range names {
		names[i] = fmt.Sprintf("w%d", i)
		if err := r.startWorker(names[i]); err != nil {
			return rep, err
		}
	}
	if err := r.waitConsumers(ctx, cfg.Workers); err != nil {
		return rep, err
	}
	ids := make([]string, cfg.Tasks)
	var in bytes.Buffer
	for i := range ids {
		ids[i] = fmt.Sprintf("fleet-%04d", i)
		fmt.Fprintf(&in, `{"id":%q,"method":"turnstile","params":{"sitekey":"0x4AAAAAAA%04d","pageurl":"https://shop.example/%d"}}`+"\n", ids[i], i, i)
	}
	start := time.Now()
	enq := exec.CommandContext(ctx, cfg.Binary, "enqueue", "--amqp", cfg.URL, "--prefix", r.prefix, "-")
	enq.Stdin, enq.Stderr = &in, &lineWriter{w: r.log, prefix: "[enqueue] "}
	if err := enq.Run(); err != nil {
		return rep, fmt.Errorf("fleet: captchaq enqueue: %w", err)
	}
	type faultEnd struct {
		err error
		at  time.Duration
	}
	faultDone := make(chan faultEnd, 1)
	go func() {
		select {
		case <-time.After(time.Until(start.Add(cfg.FaultAt))):
		case <-ctx.Done():
			faultDone <- faultEnd{err: ctx.Err()}
			return
		}
		if cfg.Fault != FaultNone && cfg.Fault != FaultRestart {
			// A fault on a worker with no task at the provider tests
			// nothing of recovery: wait for one.
			if err := r.waitAtProvider(ctx); err != nil {
				faultDone <- faultEnd{err: err}
				return
			}
		}
		err := r.fault(ctx)
		faultDone <- faultEnd{err: err, at: time.Since(start)}
	}()
	last, err := counts.waitAll(ctx, ids)
	if err != nil {
		return rep, fmt.Errorf("%w; the run's queues (ready, unacked, consumers):\n%s", err, r.queueSnapshot())
	}
	end := <-faultDone
	if end.err != nil {
		return rep, end.err
	}
	if cfg.Fault != FaultNone && cfg.Fault != FaultSIGKILL {
		rep.FaultDone = end.at
	}
	rep.Makespan = last.Sub(start)
	// Stop every worker cleanly: a result a worker was still going to
	// publish comes before the count below.
	if err := r.stopWorkers(); err != nil {
		return rep, err
	}
	if err := counts.drain(ctx); err != nil {
		return rep, err
	}
	rep.Copies = counts.copiesOf()
	for _, id := range ids {
		switch n := counts.n(id); {
		case n == 0:
			rep.Lost++
		case n > 1:
			rep.DeliveredTwice++
			rep.Results++
		default:
			rep.Results++
		}
	}
	st := srv.Stats()
	rep.PaidTwice, rep.ReadyToFetched, rep.Utilization = st.Duplicates, st.ReadyToFetched, st.Utilization
	rep.NoSlot, rep.Submits = st.NoSlot, st.Calls.Submit
	rep.Floor = time.Duration(max(st.SolveSecondsDrawn/float64(cfg.Threads), st.SolveSecondsLongest) * float64(time.Second))
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		rep.Load = strings.Fields(string(b))[0]
	}
	return rep, nil
}

// startWorker runs `captchaq worker` at its defaults but --threads. The
// worker the faults strike (w0) reaches the provider through an apiProxy,
// and, for a partition or a closed connection, the broker through a
// tcpProxy.
func (r *fleetRun) startWorker(name string) error {
	brokerURL, apiURL := r.cfg.URL, r.apiURL
	if name == "w0" && r.cfg.Fault != FaultNone && r.cfg.Fault != FaultRestart {
		ap, err := newAPIProxy(apiURL)
		if err != nil {
			return err
		}
		r.mu.Lock()
		r.api = ap
		r.mu.Unlock()
		apiURL = ap.url()
		if r.cfg.Fault == FaultPartition || r.cfg.Fault == FaultClose {
			bp, err := newTCPProxy(hostPort(brokerURL))
			if err != nil {
				return err
			}
			r.mu.Lock()
			r.broker = bp
			r.mu.Unlock()
			brokerURL = strings.Replace(brokerURL, hostPort(brokerURL), bp.addr(), 1)
		}
	}
	cmd := exec.Command(r.cfg.Binary, "worker", "--amqp", brokerURL, "--prefix", r.prefix, "--api-url", apiURL,
		"--threads", fmt.Sprint(r.cfg.Threads))
	cmd.Env = append(os.Environ(), "CAPTCHAAI_KEY="+fleetKey)
	cmd.Stderr = &lineWriter{w: r.log, prefix: "[" + name + "] "}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("fleet: start worker %s: %w", name, err)
	}
	r.mu.Lock()
	r.procs[name] = cmd
	r.mu.Unlock()
	return nil
}

// fault strikes worker w0 (or the broker) and returns once it is over.
func (r *fleetRun) fault(ctx context.Context) error {
	cfg := r.cfg
	r.mu.Lock()
	victim := r.procs["w0"]
	r.mu.Unlock()
	switch cfg.Fault {
	case FaultSIGKILL:
		if err := victim.Process.Kill(); err != nil {
			return err
		}
		_ = victim.Wait()
		r.mu.Lock()
		delete(r.procs, "w0")
		r.mu.Unlock()
		if err := r.startWorker("w3"); err != nil {
			return err
		}
		return r.waitConsumers(ctx, cfg.Workers)
	case FaultSIGSTOP:
		if err := victim.Process.Signal(syscall.SIGSTOP); err != nil {
			return err
		}
		sleepCtx(ctx, cfg.Outage)
		return victim.Process.Signal(syscall.SIGCONT)
	case FaultPartition:
		r.broker.setCut(true)
		r.api.setCut(true)
		sleepCtx(ctx, cfg.Outage)
		r.broker.setCut(false)
		r.api.setCut(false)
		return nil
	case FaultClose:
		if cfg.Disrupt != nil {
			defer cfg.Disrupt()()
		}
		return closeConnectionsFrom(r.broker.upstreamPorts())
	case FaultRestart:
		if cfg.Disrupt != nil {
			defer cfg.Disrupt()()
		}
		if out, err := exec.Command("rabbitmqctl", "stop_app").CombinedOutput(); err != nil {
			return fmt.Errorf("fleet: rabbitmqctl stop_app: %v: %s", err, out)
		}
		// Down for a moment, as a restart is.
		sleepCtx(ctx, time.Second)
		if out, err := exec.Command("rabbitmqctl", "start_app").CombinedOutput(); err != nil {
			return fmt.Errorf("fleet: rabbitmqctl start_app: %v: %s", err, out)
		}
	}
	return nil
}

// waitAtProvider waits until w0 has a task at the provider whose
// checkpoint is on the broker: the provider accepted one of its submits
// between checkpointed (200 ms: a confirm takes milliseconds) and 450 ms
// ago (no solve is shorter than FleetConfig.Latency.Min, 500 ms by
// default).
func (r *fleetRun) waitAtProvider(ctx context.Context) error {
	const checkpointed, atProvider = 200 * time.Millisecond, 450 * time.Millisecond
	for {
		if age := time.Since(r.api.lastAccepted()); age >= checkpointed && age < min(atProvider, r.cfg.Latency.Min) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("fleet: waiting for w0 to have a task at the provider: %w", ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// queueSnapshot lists the run's queues with their ready and unacked
// messages and consumers, for a run that did not finish.
func (r *fleetRun) queueSnapshot() string {
	out, err := exec.Command("rabbitmqctl", "-q", "list_queues", "name", "messages_ready", "messages_unacknowledged", "consumers").CombinedOutput()
	if err != nil {
		return fmt.Sprintf("rabbitmqctl list_queues: %v: %s", err, out)
	}
	var b strings.Builder
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, r.prefix+".") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// waitConsumers waits until n workers consume the task queue.
func (r *fleetRun) waitConsumers(ctx context.Context, n int) error {
	c, err := amqp.Dial(ctx, amqp.Config{URL: r.cfg.URL, Prefix: r.prefix})
	if err != nil {
		return err
	}
	defer c.Close()
	for {
		qs, err := c.Depths(ctx, c.Names().Tasks)
		if err != nil {
			return err
		}
		if qs[0].Consumers >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("fleet: waiting for %d workers: %w", n, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stopWorkers sends SIGTERM to every worker and waits for each.
func (r *fleetRun) stopWorkers() error {
	r.mu.Lock()
	procs := r.procs
	r.procs = map[string]*exec.Cmd{}
	r.mu.Unlock()
	var errs []error
	for name, p := range procs {
		_ = p.Process.Signal(syscall.SIGCONT)
		_ = p.Process.Signal(syscall.SIGTERM)
		if err := p.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("fleet: worker %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

func (r *fleetRun) cleanup() {
	r.mu.Lock()
	for _, p := range r.procs {
		_ = p.Process.Kill()
		_ = p.Wait()
	}
	if r.api != nil {
		r.api.close()
	}
	if r.broker != nil {
		r.broker.close()
	}
	r.mu.Unlock()
	if r.sim != nil {
		r.sim.Close()
	}
	_ = amqp.DeleteTopology(context.Background(), amqp.Config{URL: r.cfg.URL, Prefix: r.prefix})
	deleteWorkerQueues(r.cfg.URL, r.prefix)
}

// deleteWorkerQueues deletes the run's per-worker queues, whose names
// carry the workers' process names.
func deleteWorkerQueues(url, prefix string) {
	out, err := exec.Command("rabbitmqctl", "-q", "list_queues", "name").CombinedOutput()
	if err != nil {
		return
	}
	conn, err := amqp091.Dial(url)
	if err != nil {
		return
	}
	defer conn.Close()
	for _, q := range strings.Fields(string(out)) {
		if !strings.HasPrefix(q, prefix+".") {
			continue
		}
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(q, false, false, false)
			_ = ch.Close()
		}
	}
}
