package amqp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// StatusBeat is what a consumer holding tasks tells the fleet, on the
// status exchange, so the age of the oldest unacknowledged task can be
// known without the management plugin.
type StatusBeat struct {
	Owner string `json:"owner"`
	// Held counts the tasks the owner holds unfinished; OldestHeld is when
	// the oldest of them entered the broker (zero when Held is 0).
	Held       int       `json:"held"`
	OldestHeld time.Time `json:"oldest_held,omitzero"`
	At         time.Time `json:"at"`
	// Balance is the provider's balance as the owner last read it, at
	// BalanceAt; nil when it reads none (see Gateway.Balance).
	Balance   *float64  `json:"balance,omitempty"`
	BalanceAt time.Time `json:"balance_at,omitzero"`
	// ThreadsHeld are the fleet's threads the owner holds, of ThreadsPlan
	// (0 for a worker without WorkerConfig.SharedThreads).
	ThreadsHeld int `json:"threads_held,omitempty"`
	ThreadsPlan int `json:"threads_plan,omitempty"`
	// Providers: a worker on several providers, each provider's pool
	// (ThreadsHeld and ThreadsPlan are then their sums).
	Providers []ProviderThreadsBeat `json:"providers,omitempty"`
}

// ProviderThreadsBeat is one provider's pool in a status beat.
type ProviderThreadsBeat struct {
	Provider string `json:"provider"`
	Held     int    `json:"held"`
	Plan     int    `json:"plan"`
}

// Beat publishes b on the status exchange: transient and unconfirmed, as
// the next beat replaces it.
func (p *Publisher) Beat(ctx context.Context, b StatusBeat) error {
	body, err := json.Marshal(b)
	if err != nil {
		return err
	}
	ch, _, err := p.channel(ctx)
	if err != nil {
		return err
	}
	_, err = ch.PublishWithDeferredConfirmWithContext(ctx, p.c.Names().Status, "", false, false, amqp091.Publishing{
		ContentType: contentTypeJSON, Timestamp: b.At, Body: body, Expiration: "60000",
	})
	return err
}

// QueueStats is one queue's depth.
type QueueStats struct {
	Name      string `json:"name"`
	Ready     int    `json:"ready"`
	Consumers int    `json:"consumers"`
}

// Stats are the three numbers operators watch, and the depths behind them.
type Stats struct {
	// Waiting is the tasks ready in the task queues (default and lanes):
	// whether the plan's threads are saturated.
	Waiting int `json:"waiting"`
	// FailedPerMinute is the growth of the dead-letter queue over Window,
	// per minute: a stale sitekey or a wrong pageurl shows here first.
	FailedPerMinute float64 `json:"failed_per_minute"`
	// OldestUnacked is the age of the oldest task a consumer holds
	// unfinished, from the status beats heard during Window (zero if none
	// was heard): a stuck consumer shows here.
	OldestUnacked time.Duration `json:"oldest_unacked_seconds"`
	Holders       int           `json:"holders"`
	Held          int           `json:"held"`
	// Threads is the fleet's thread pool (WorkerConfig.SharedThreads);
	// zero when no beat heard came from a worker that shares one.
	Threads FleetThreads `json:"threads"`
	// ProviderThreads: a fleet on several providers, each provider's
	// pool (Threads is then their sum), by name.
	ProviderThreads map[string]FleetThreads `json:"provider_threads,omitempty"`
	Window          time.Duration           `json:"window_seconds"`
	Queues          []QueueStats            `json:"queues"`
}

// FleetThreads are the fleet's shared threads against its plan.
type FleetThreads struct {
	// Plan is the pool's size: the plan's threads.
	Plan int `json:"plan"`
	// InUse are the tokens out of the pool (Plan minus ready tokens):
	// threads some worker holds for a task at the provider, or is about
	// to give back.
	InUse int `json:"in_use"`
	// Held is the sum of the threads the beats heard say their workers hold.
	Held int `json:"held"`
}

// statsListening, when set (by tests), is called once Stats hears beats.
var statsListening func()

// MarshalJSON writes durations in seconds.
func (s Stats) MarshalJSON() ([]byte, error) {
	type plain Stats
	return json.Marshal(struct {
		plain
		OldestUnacked float64 `json:"oldest_unacked_seconds"`
		Window        float64 `json:"window_seconds"`
	}{plain(s), s.OldestUnacked.Seconds(), s.Window.Seconds()})
}

// inspectQueue reads one queue's depth and consumers (a passive declare).
func inspectQueue(ch *amqp091.Channel, q string) (QueueStats, error) {
	s, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
	if err != nil {
		return QueueStats{}, fmt.Errorf("amqp: inspect queue %s: %w", q, err)
	}
	return QueueStats{Name: q, Ready: s.Messages, Consumers: s.Consumers}, nil
}

// Depths reads the depth of each queue: one round trip each, on a channel
// of its own. A missing queue is an error naming it.
func (c *Conn) Depths(ctx context.Context, queues ...string) ([]QueueStats, error) {
	ch, _, err := c.channel(ctx)
	if err != nil {
		return nil, err
	}
	defer ch.Close()
	out := make([]QueueStats, 0, len(queues))
	for _, q := range queues {
		s, err := inspectQueue(ch, q)
		if err != nil {
			return out, err
		}
		out = append(out, s)
	}
	return out, nil
}

// Stats samples the queues, listens to status beats for window, samples the
// dead-letter queue again, and reports.
func (c *Conn) Stats(ctx context.Context, window time.Duration) (Stats, error) {
	st := Stats{Window: window}
	ch, _, err := c.channel(ctx)
	if err != nil {
		return st, err
	}
	defer ch.Close()
	n := c.Names()
	inspect := func(q string) (QueueStats, error) { return inspectQueue(ch, q) }
	taskQueues := []string{n.Tasks}
	for _, l := range c.cfg.Lanes {
		taskQueues = append(taskQueues, n.Lane(l))
	}
	for _, q := range append(taskQueues, n.Results, n.Failed) {
		s, err := inspect(q)
		if err != nil {
			return st, err
		}
		st.Queues = append(st.Queues, s)
	}
	for _, s := range st.Queues[:len(taskQueues)] {
		st.Waiting += s.Ready
	}
	failed0 := st.Queues[len(st.Queues)-1].Ready

	latest, elapsed, err := listenBeats(ctx, ch, n.Status, window)
	if err != nil {
		return st, err
	}
	failed1, err := inspect(n.Failed)
	if err != nil {
		return st, err
	}
	st.Queues[len(st.Queues)-1] = failed1
	if elapsed > 0 {
		st.FailedPerMinute = float64(max(failed1.Ready-failed0, 0)) / elapsed.Minutes()
	}
	st.addBeats(latest, time.Now())
	c.threadsInUse(ctx, &st)
	return st, nil
}

// listenBeats listens on ch to the status beats published to exchange for
// window (or until ctx ends), and returns each owner's latest and how long
// it listened.
func listenBeats(ctx context.Context, ch *amqp091.Channel, exchange string, window time.Duration) (map[string]StatusBeat, time.Duration, error) {
	bq, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("amqp: status queue: %w", err)
	}
	if err := ch.QueueBind(bq.Name, "", exchange, false, nil); err != nil {
		return nil, 0, fmt.Errorf("amqp: bind status queue: %w", err)
	}
	beats, err := ch.Consume(bq.Name, "", true, true, false, false, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("amqp: consume status: %w", err)
	}
	if statsListening != nil {
		statsListening()
	}
	start := time.Now()
	latest := map[string]StatusBeat{}
	timer := time.NewTimer(window)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return latest, time.Since(start), ctx.Err()
		case <-timer.C:
			return latest, time.Since(start), nil
		case m, ok := <-beats:
			if !ok {
				return latest, time.Since(start), nil
			}
			var b StatusBeat
			if json.Unmarshal(m.Body, &b) == nil && b.Owner != "" {
				latest[b.Owner] = b
			}
		}
	}
}

// addBeats adds to st what the owners' latest beats tell at now: the
// holders, the tasks and threads they hold, the oldest unacknowledged.
func (st *Stats) addBeats(latest map[string]StatusBeat, now time.Time) {
	for _, b := range latest {
		st.Holders++
		st.Held += b.Held
		st.Threads.Plan = max(st.Threads.Plan, b.ThreadsPlan)
		st.Threads.Held += b.ThreadsHeld
		for _, p := range b.Providers {
			if st.ProviderThreads == nil {
				st.ProviderThreads = map[string]FleetThreads{}
			}
			ft := st.ProviderThreads[p.Provider]
			ft.Plan, ft.Held = max(ft.Plan, p.Plan), ft.Held+p.Held
			st.ProviderThreads[p.Provider] = ft
		}
		if b.Held > 0 && !b.OldestHeld.IsZero() {
			st.OldestUnacked = max(st.OldestUnacked, now.Sub(b.OldestHeld))
		}
	}
}

// threadsInUse fills st's threads in use from the token queues: each
// provider's, or the plan's.
func (c *Conn) threadsInUse(ctx context.Context, st *Stats) {
	n := c.Names()
	if len(st.ProviderThreads) > 0 {
		st.Threads = FleetThreads{}
		for name, ft := range st.ProviderThreads {
			if qs, err := c.Depths(ctx, n.ProviderThreads(name).Tokens); err == nil {
				ft.InUse = max(ft.Plan-qs[0].Ready, 0)
			}
			st.ProviderThreads[name] = ft
			st.Threads.Plan, st.Threads.Held, st.Threads.InUse = st.Threads.Plan+ft.Plan, st.Threads.Held+ft.Held, st.Threads.InUse+ft.InUse
		}
	} else if st.Threads.Plan > 0 {
		// Its own channel: a missing queue closes the channel it is asked on.
		if qs, err := c.Depths(ctx, n.Threads); err == nil {
			st.Threads.InUse = max(st.Threads.Plan-qs[0].Ready, 0)
		}
	}
}

// depthsFresh is how long a depthReader answers from its last reading.
const depthsFresh = time.Second

// depthReader reads a gateway's queue depths (Gateway.QueueDepths): the
// task queues, its reply queue and the dead-letter queue, at most once
// every depthsFresh; while the broker connection is down it fails at once.
type depthReader struct {
	c     *Conn
	reply string

	mu       sync.Mutex
	at       time.Time
	readings map[string]int
}

func (d *depthReader) read(ctx context.Context) (map[string]int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.readings != nil && time.Since(d.at) < depthsFresh {
		return maps.Clone(d.readings), nil
	}
	if !d.c.Connected() {
		return nil, errors.New("amqp: broker connection lost; reconnecting")
	}
	n := d.c.Names()
	queues := []string{n.Tasks}
	for _, l := range d.c.cfg.Lanes {
		queues = append(queues, n.Lane(l))
	}
	stats, err := d.c.Depths(ctx, append(queues, d.reply, n.Failed)...)
	if err != nil {
		return nil, err
	}
	m := make(map[string]int, len(stats))
	for _, s := range stats {
		m[s.Name] = s.Ready
	}
	d.readings, d.at = m, time.Now()
	return maps.Clone(m), nil
}
