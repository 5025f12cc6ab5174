package amqp

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/captchaq/captchaq/internal/startstop"
)

// ErrClosed is returned by calls on a closed Conn.
var ErrClosed = errors.New("amqp: connection closed")

// Conn is a connection to the broker that comes back by itself: when the
// broker or the network drops it, Conn dials again with exponential backoff,
// declares the topology again, and lets publishers and consumers open new
// channels. Every channel it hands out has a generation number that is never
// reused, so an acknowledgement is only ever sent on the channel its delivery
// came from. Safe for concurrent use.
type Conn struct {
	cfg  Config
	gens atomic.Uint64 // last channel generation handed out

	mu    sync.Mutex
	conn  *amqp091.Connection // nil while reconnecting
	epoch uint64              // numbers conn: one more at every connection
	ready chan struct{}       // closed while conn is usable
	// heard are the read clocks of the latest connections, by epoch
	// (heardKept of them)
	heard map[uint64]*readClock
	// downAt are, for the latest connections the broker closed as it
	// shut down, when it last refused a connection since (see
	// brokerDownAt), by epoch
	downAt map[uint64]time.Time
	awake  stallClock // ticked by watch while connected

	// Lock order: blocked and queues have their own locks, taken alone,
	// never with mu.
	blocked blockGate
	queues  declaredQueues

	closing    chan struct{} // closed at Close: waiters for a connection give up
	closeOnce  sync.Once
	watcher    *startstop.Loop // watch, from Dial until Close
	reconnects atomic.Int64
}

// Dial connects, declares the topology of cfg and starts the reconnect
// loop. The first connection is tried again only while the broker is not
// taking connections, for at most cfg.StartWait: a wrong login or a
// topology conflict is reported at once.
func Dial(ctx context.Context, cfg Config) (*Conn, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	conn, heard, err := connectAtStart(ctx, cfg)
	if err != nil {
		return nil, err
	}
	c := &Conn{
		cfg:     cfg,
		conn:    conn,
		ready:   make(chan struct{}),
		heard:   map[uint64]*readClock{1: heard},
		downAt:  map[uint64]time.Time{},
		closing: make(chan struct{}),
	}
	c.blocked = blockGate{unblocked: make(chan struct{}), closing: c.closing}
	c.queues = declaredQueues{byName: map[string]declareFunc{}}
	c.epoch = 1
	close(c.ready)
	close(c.blocked.unblocked)
	c.watcher = startstop.New(func(ctx context.Context) { c.watch(ctx, conn) })
	_ = c.watcher.Start(context.Background())
	return c, nil
}

// Config is the configuration the Conn runs with, defaults filled in.
func (c *Conn) Config() Config { return c.cfg }

// Names are the names of the Conn's topology.
func (c *Conn) Names() Names { return NamesFor(c.cfg.Prefix) }

// Connected reports whether the connection is up now (not reconnecting).
func (c *Conn) Connected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conn != nil && !c.conn.IsClosed()
}

// Reconnects counts connections made after the first.
func (c *Conn) Reconnects() int64 { return c.reconnects.Load() }

// Close closes the connection and stops reconnecting. Channels opened from
// it close; deliveries not acknowledged go back to their queues.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() { close(c.closing) })
	c.watcher.Stop()
	return nil
}

func dial(ctx context.Context, cfg Config) (*amqp091.Connection, *readClock, error) {
	d := net.Dialer{Timeout: cfg.DialTimeout}
	heard := &readClock{}
	conn, err := amqp091.DialConfig(cfg.URL, amqp091.Config{
		Heartbeat: cfg.Heartbeat,
		Locale:    "en_US",
		Dial: func(network, addr string) (net.Conn, error) {
			nc, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// The deadline covers the AMQP handshake; amqp091 clears it
			// once the connection is open.
			if err := nc.SetDeadline(time.Now().Add(cfg.DialTimeout)); err != nil {
				nc.Close()
				return nil, err
			}
			heard.at.Store(time.Now().UnixNano())
			return clockedConn{Conn: nc, heard: heard}, nil
		},
		Properties: amqp091.Table{"connection_name": "captchaq " + cfg.Prefix},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("amqp: connect to %s: %w", redactURL(cfg.URL), err)
	}
	return conn, heard, nil
}

// declareFunc declares one queue of its own (a checkpoint or reply queue)
// on a connection.
type declareFunc func(*amqp091.Connection) error

// connect dials and declares the topology (and the queues of extra), each
// step under its own timeout.
func connect(ctx context.Context, cfg Config, extra []declareFunc) (*amqp091.Connection, *readClock, error) {
	conn, heard, err := dial(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, cfg.SetupTimeout)
	defer cancel()
	if err := declareTopology(sctx, conn, cfg); err != nil {
		conn.Close()
		return nil, nil, err
	}
	for _, declare := range extra {
		if err := declare(conn); err != nil {
			conn.Close()
			return nil, nil, err
		}
	}
	return conn, heard, nil
}

// connectAtStart is Dial's first connect: it waits, for at most
// cfg.StartWait, for a broker that is not taking connections yet.
func connectAtStart(ctx context.Context, cfg Config) (*amqp091.Connection, *readClock, error) {
	deadline := time.Now().Add(cfg.StartWait)
	for {
		conn, heard, err := connect(ctx, cfg, nil)
		if err == nil || !notListening(err) || cfg.StartWait <= 0 {
			return conn, heard, err
		}
		if !time.Now().Add(startRetry).Before(deadline) {
			return nil, nil, fmt.Errorf("%w (the broker took no connection for %v: check that it runs and that the URL's host and port are its own; --broker-wait waits longer)",
				err, cfg.StartWait.Round(time.Second))
		}
		cfg.Logger.Warn("broker not taking connections yet; waiting for it",
			"broker", redactURL(cfg.URL), "err", err, "waits_until", deadline.Format(time.TimeOnly))
		select {
		case <-ctx.Done():
			return nil, nil, err
		case <-time.After(startRetry):
		}
	}
}

// startRetry is the pause between Dial's first connects while the broker
// is not taking connections.
const startRetry = time.Second

// notListening reports whether a connect failed because the broker is not
// taking connections: nothing listens on its port, or it dropped the
// connection before the handshake ended (a broker still starting). A
// refused login is an amqp091.Error of another code and is not.
func notListening(err error) bool {
	var ae *amqp091.Error
	return refused(err) || errors.Is(err, syscall.ECONNRESET) ||
		(errors.As(err, &ae) && ae.Code == amqp091.FrameError)
}

// watch watches the connection and replaces it when it dies, until ctx
// ends (at Close); then it closes the connection.
func (c *Conn) watch(ctx context.Context, conn *amqp091.Connection) {
	log := c.cfg.Logger.With("broker", redactURL(c.cfg.URL))
	for {
		shutdown := false
		closed := conn.NotifyClose(make(chan *amqp091.Error, 1))
		blocked := conn.NotifyBlocked(make(chan amqp091.Blocking, 4))
		ticks := time.NewTicker(c.cfg.Heartbeat / 4)
		c.awake.reset(time.Now())
	watch:
		for {
			select {
			case <-ctx.Done():
				ticks.Stop()
				_ = conn.Close()
				c.setConn(nil, nil)
				return
			case now := <-ticks.C:
				c.awake.tick(now, c.cfg.Heartbeat)
			case b, ok := <-blocked:
				if !ok {
					continue
				}
				c.blocked.set(b.Active)
				log.Warn("broker flow control", "blocked", b.Active, "reason", b.Reason)
			case err := <-closed:
				log.Warn("broker connection lost", "err", err)
				shutdown = brokerShutdown(err)
				break watch
			}
		}
		ticks.Stop()
		lost := c.setConn(nil, nil)
		c.blocked.set(false)
		backoff := c.cfg.ReconnectMin
		// A broker that shut down comes back on its own: it is tried
		// often, so the claims of tasks its close cut off go out soon
		// after it is back (see brokerDownAt).
		maxBackoff := c.cfg.ReconnectMax
		if shutdown {
			maxBackoff = min(maxBackoff, shutdownRetryMax)
		}
		var heard *readClock
		for {
			tried := time.Now()
			next, clock, err := connect(ctx, c.cfg, c.queues.list())
			if err == nil {
				conn, heard = next, clock
				break
			}
			if shutdown && refused(err) {
				c.noteDown(lost, tried)
				// The process runs: the watcher's clock goes on through
				// the broker's restart (its tries are a second apart at
				// most), so the restart is not taken for a stall.
				c.awake.tick(time.Now(), c.cfg.Heartbeat)
			}
			log.Warn("broker reconnect failed", "err", err, "retry_in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(jitter(backoff)):
			}
			backoff = min(backoff*2, maxBackoff)
		}
		c.reconnects.Add(1)
		log.Info("broker reconnected")
		c.setConn(conn, heard)
	}
}

func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d/2+1)
}

// setConn makes conn the connection, or with nil marks the connection
// lost; it returns the epoch of the connection it replaced or lost.
func (c *Conn) setConn(conn *amqp091.Connection, heard *readClock) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	prev := c.epoch
	if conn == nil {
		if c.conn != nil {
			c.conn = nil
			c.ready = make(chan struct{})
		}
		return prev
	}
	c.conn = conn
	c.epoch++
	c.heard[c.epoch] = heard
	delete(c.heard, c.epoch-heardKept)
	delete(c.downAt, c.epoch-heardKept)
	close(c.ready)
	return prev
}

// shutdownRetryMax bounds the wait between tries to reconnect to a broker
// that closed the connection as it shut down.
const shutdownRetryMax = time.Second

// brokerShutdown reports whether err closed a connection because the
// broker shut down (rabbitmqctl stop_app or stop, a node restart): 320
// CONNECTION_FORCED with reason 'shutdown'.
func brokerShutdown(err *amqp091.Error) bool {
	return err != nil && err.Code == amqp091.ConnectionForced && strings.Contains(err.Reason, "shutdown")
}

// refused reports whether a connect failed because nothing listened on
// the broker's address.
func refused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// noteDown records that the broker refused a connection tried at at,
// after it closed the connection of epoch as it shut down.
func (c *Conn) noteDown(epoch uint64, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.downAt == nil {
		c.downAt = map[uint64]time.Time{}
	}
	if at.After(c.downAt[epoch]) {
		c.downAt[epoch] = at
	}
}

// brokerDownAt is the latest moment the broker is known to have been
// down after it closed the connection of epoch as it shut down: the start
// of its last refused connect (the zero time if none). The broker gave
// that connection's deliveries back, but to nobody before it listened
// again: no consumer can hold a copy of them received earlier. This
// holds for a single broker node, the deployment the fleet documents.
func (c *Conn) brokerDownAt(epoch uint64) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.downAt[epoch]
}

// heardKept is how many connections' read clocks a Conn keeps: a task
// held on a connection older than that is long gone to the fleet.
const heardKept = 8

// lastHeard is when the connection of epoch last read anything from the
// broker; the zero time for an epoch no longer kept.
func (c *Conn) lastHeard(epoch uint64) time.Time {
	c.mu.Lock()
	r := c.heard[epoch]
	c.mu.Unlock()
	if r == nil {
		return time.Time{}
	}
	return r.last()
}

func isClosedChan(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// connection waits for a usable connection.
func (c *Conn) connection(ctx context.Context) (*amqp091.Connection, error) {
	conn, _, err := c.connectionEpoch(ctx)
	return conn, err
}

// connectionEpoch is connection with its epoch: channels opened on one
// connection share it, and a message published on a channel of the same
// epoch as a delivery reached the broker while that delivery was held
// (the broker closes a connection's channels together).
func (c *Conn) connectionEpoch(ctx context.Context) (*amqp091.Connection, uint64, error) {
	for {
		c.mu.Lock()
		conn, ready, epoch := c.conn, c.ready, c.epoch
		c.mu.Unlock()
		if conn != nil && !conn.IsClosed() {
			return conn, epoch, nil
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("amqp: waiting for the broker: %w", ctx.Err())
		case <-c.closing:
			return nil, 0, ErrClosed
		}
		if conn != nil {
			// ready was already closed but the connection died: wait for
			// the loop to notice.
			select {
			case <-time.After(10 * time.Millisecond):
			case <-ctx.Done():
				return nil, 0, fmt.Errorf("amqp: waiting for the broker: %w", ctx.Err())
			}
		}
	}
}

// dropped reports whether the connection of epoch has closed, giving
// the client a moment to mark it closed after a failed call on it.
func (c *Conn) dropped(ctx context.Context, epoch uint64) bool {
	gone := func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.epoch != epoch || c.conn == nil || c.conn.IsClosed()
	}
	if gone() {
		return true
	}
	select {
	case <-time.After(jitter(c.cfg.ReconnectMin)):
	case <-ctx.Done():
		return false
	}
	return gone()
}

// channel opens a channel on the current connection and gives it a new
// generation.
func (c *Conn) channel(ctx context.Context) (*amqp091.Channel, uint64, error) {
	ch, gen, _, err := c.channelEpoch(ctx)
	return ch, gen, err
}

// channelEpoch is channel with the epoch of its connection.
func (c *Conn) channelEpoch(ctx context.Context) (ch *amqp091.Channel, gen, epoch uint64, err error) {
	for {
		conn, epoch, err := c.connectionEpoch(ctx)
		if err != nil {
			return nil, 0, 0, err
		}
		ch, err := conn.Channel()
		if err == nil {
			return ch, c.gens.Add(1), epoch, nil
		}
		if !conn.IsClosed() {
			return nil, 0, 0, fmt.Errorf("amqp: open channel: %w", err)
		}
	}
}

// DeclareInflight declares the checkpoint queue of owner, now and after
// every reconnect.
func (c *Conn) DeclareInflight(ctx context.Context, owner string) error {
	if !prefixRE.MatchString(owner) {
		return fmt.Errorf("amqp: owner %q: use letters, digits, '.', '_', ':' or '-'", owner)
	}
	return c.declareQueue(ctx, c.Names().InflightQueue(owner), func(conn *amqp091.Connection) error {
		return declareInflight(conn, c.cfg, owner)
	})
}

// DeclareClaims declares the claim queue of owner (Names.ClaimQueue), now
// and after every reconnect.
func (c *Conn) DeclareClaims(ctx context.Context, owner string) error {
	if !prefixRE.MatchString(owner) {
		return fmt.Errorf("amqp: owner %q: use letters, digits, '.', '_', ':' or '-'", owner)
	}
	return c.declareQueue(ctx, c.Names().ClaimQueue(owner), func(conn *amqp091.Connection) error {
		return declareClaims(conn, c.cfg, owner)
	})
}

// DeclareReplies declares the reply queue of gateway (Names.ReplyQueue),
// now and after every reconnect: durable, and bound to the dead-letter
// exchange too, so the gateway hears of its tasks that die in the broker
// (a task queue's TTL) as well as the results workers send it.
func (c *Conn) DeclareReplies(ctx context.Context, gateway string) error {
	if !prefixRE.MatchString(gateway) {
		return fmt.Errorf("amqp: gateway name %q: use letters, digits, '.', '_', ':' or '-'", gateway)
	}
	return c.declareQueue(ctx, c.Names().ReplyQueue(gateway), func(conn *amqp091.Connection) error {
		return declareReplies(conn, c.cfg, gateway)
	})
}

// declareQueue runs declare now and remembers it for reconnects.
func (c *Conn) declareQueue(ctx context.Context, name string, declare declareFunc) error {
	conn, err := c.connection(ctx)
	if err != nil {
		return err
	}
	if err := declare(conn); err != nil {
		return err
	}
	c.queues.add(name, declare)
	return nil
}
