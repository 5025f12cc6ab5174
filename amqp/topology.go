package amqp

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// ErrTopologyConflict matches a *ConflictError.
var ErrTopologyConflict = errors.New("amqp: topology conflict")

// ConflictError says that a queue or exchange already exists with other
// arguments than this topology declares (the broker answered
// PRECONDITION_FAILED), which one, and what to do.
type ConflictError struct {
	Kind string // "queue" or "exchange"
	Name string
	// Arg is the argument that differs (x-max-priority, x-message-ttl, ...)
	// or a property (durable), as the broker named it; Want is what this
	// topology declares and Have what the broker said exists.
	Arg, Want, Have string
	Broker          string // the broker's own words
}

func (e *ConflictError) Error() string {
	what := "its arguments differ"
	if e.Arg != "" {
		what = fmt.Sprintf("argument %s is %s on the broker but this topology declares %s", e.Arg, e.Have, e.Want)
	}
	fix := fmt.Sprintf("delete it once drained (rabbitmqctl delete_queue %s) or pick another --prefix", e.Name)
	if e.Kind == "exchange" {
		fix = fmt.Sprintf("delete it (rabbitmqadmin delete exchange name=%s) or pick another --prefix", e.Name)
	}
	return fmt.Sprintf("amqp: %s %q already exists with other settings: %s; %s (broker said: %s)", e.Kind, e.Name, what, fix, e.Broker)
}

// Is makes errors.Is(err, ErrTopologyConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrTopologyConflict }

// Broker texts look like: PRECONDITION_FAILED - inequivalent arg
// 'x-max-priority' for queue 'q' in vhost '/': received the value '10' of
// type 'signedint' but current is none
var (
	inequivArgRE = regexp.MustCompile(`inequivalent arg '([^']+)' for (queue|exchange) '([^']+)'.*?received (?:the value '([^']*)'|none)(?: of type '[^']*')? but current is (?:the value '([^']*)'|none)`)
	inequivRE    = regexp.MustCompile(`inequivalent arg '([^']+)' for (queue|exchange) '([^']+)'`)
	durableRE    = regexp.MustCompile(`(queue|exchange) '([^']+)' in vhost '[^']*' (?:with durable|.*durable)`)
)

// conflict turns a PRECONDITION_FAILED from declaring kind/name into a
// *ConflictError.
func conflict(kind, name string, err error) error {
	var ae *amqp091.Error
	if !errors.As(err, &ae) || ae.Code != amqp091.PreconditionFailed {
		return fmt.Errorf("amqp: declare %s %q: %w", kind, name, err)
	}
	ce := &ConflictError{Kind: kind, Name: name, Broker: ae.Reason}
	if m := inequivArgRE.FindStringSubmatch(ae.Reason); m != nil {
		ce.Arg, ce.Want, ce.Have = m[1], orNone(m[4]), orNone(m[5])
	} else if m := inequivRE.FindStringSubmatch(ae.Reason); m != nil {
		ce.Arg = m[1]
	} else if durableRE.MatchString(ae.Reason) {
		ce.Arg = "durable"
	}
	return ce
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// declarer runs declarations one by one; a refused one closes the channel,
// so it opens a new one and goes on, to report every conflict at once.
type declarer struct {
	conn *amqp091.Connection
	ch   *amqp091.Channel
	errs []error
}

func (d *declarer) channel() (*amqp091.Channel, error) {
	if d.ch != nil && !d.ch.IsClosed() {
		return d.ch, nil
	}
	ch, err := d.conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("amqp: open channel: %w", err)
	}
	d.ch = ch
	return ch, nil
}

// do runs one declaration; it returns false when the connection failed,
// which ends the run.
func (d *declarer) do(kind, name string, f func(ch *amqp091.Channel) error) bool {
	ch, err := d.channel()
	if err != nil {
		d.errs = append(d.errs, err)
		return false
	}
	if err := f(ch); err != nil {
		d.errs = append(d.errs, conflict(kind, name, err))
		return !d.conn.IsClosed()
	}
	return true
}

func (d *declarer) close() {
	if d.ch != nil {
		_ = d.ch.Close()
	}
}

func (c Config) taskQueueArgs(n Names) amqp091.Table {
	a := amqp091.Table{
		"x-queue-type":              "classic",
		"x-max-priority":            int32(c.MaxPriority),
		"x-dead-letter-exchange":    n.DLX,
		"x-dead-letter-routing-key": FailedRoutingKey,
	}
	if c.TaskTTL > 0 {
		a["x-message-ttl"] = int32(c.TaskTTL.Milliseconds())
	}
	return a
}

// declareTopology declares every exchange and queue of c, in an order where
// each binding finds its ends. The context bounds the whole run.
func declareTopology(ctx context.Context, conn *amqp091.Connection, c Config) error {
	done := make(chan error, 1)
	go func() { done <- declareAll(conn, c) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		// Closing the connection unblocks the declarations; the caller
		// dials again.
		_ = conn.Close()
		<-done
		return fmt.Errorf("amqp: declare topology: %w", ctx.Err())
	}
}

func declareAll(conn *amqp091.Connection, c Config) error {
	n := NamesFor(c.Prefix)
	d := &declarer{conn: conn}
	defer d.close()
	exchange := func(name, kind string, args amqp091.Table) bool {
		return d.do("exchange", name, func(ch *amqp091.Channel) error {
			return ch.ExchangeDeclare(name, kind, true, false, false, false, args)
		})
	}
	queue := func(name string, args amqp091.Table) bool {
		return d.do("queue", name, func(ch *amqp091.Channel) error {
			_, err := ch.QueueDeclare(name, true, false, false, false, args)
			return err
		})
	}
	bind := func(q, key, ex string, args amqp091.Table) bool {
		return d.do("binding", q, func(ch *amqp091.Channel) error {
			return ch.QueueBind(q, key, ex, false, args)
		})
	}
	steps := []func() bool{
		func() bool { return exchange(n.DLX, amqp091.ExchangeDirect, nil) },
		func() bool { return queue(n.Failed, amqp091.Table{"x-queue-type": "classic"}) },
		func() bool { return bind(n.Failed, FailedRoutingKey, n.DLX, nil) },
		func() bool {
			return queue(n.Replayed, amqp091.Table{"x-queue-type": "classic", "x-max-length": int32(ReplayedNoticesMax)})
		},
		func() bool { return exchange(n.TasksAll, amqp091.ExchangeFanout, nil) },
		func() bool {
			return exchange(n.Types, amqp091.ExchangeDirect, amqp091.Table{"alternate-exchange": n.TasksAll})
		},
		func() bool { return queue(n.Tasks, c.taskQueueArgs(n)) },
		func() bool { return bind(n.Tasks, "", n.TasksAll, nil) },
		func() bool { return queue(n.Results, amqp091.Table{"x-queue-type": "classic"}) },
		func() bool { return exchange(n.RepliesUnrouted, amqp091.ExchangeFanout, nil) },
		func() bool { return bind(n.Results, "", n.RepliesUnrouted, nil) },
		func() bool {
			return exchange(n.ReplyExchange, amqp091.ExchangeDirect, amqp091.Table{"alternate-exchange": n.RepliesUnrouted})
		},
		func() bool { return queue(n.Reports, amqp091.Table{"x-queue-type": "classic"}) },
		func() bool { return exchange(n.Delay, amqp091.ExchangeHeaders, nil) },
		func() bool { return queue(n.Adopt, amqp091.Table{"x-queue-type": "classic"}) },
		func() bool { return exchange(n.Status, amqp091.ExchangeFanout, nil) },
		func() bool { return exchange(n.Claims, amqp091.ExchangeFanout, nil) },
		func() bool {
			return queue(n.Balance, amqp091.Table{"x-queue-type": "classic", "x-max-length": int32(1),
				"x-overflow": "drop-head", "x-message-ttl": int32(balanceStale.Milliseconds())})
		},
		func() bool { return queue(n.State, stateQueueArgs()) },
	}
	for _, kind := range c.Lanes {
		lane := n.Lane(kind)
		steps = append(steps,
			func() bool { return queue(lane, c.taskQueueArgs(n)) },
			func() bool { return bind(lane, kind, n.Types, nil) })
	}
	for _, delay := range c.RetryDelays {
		q := n.DelayQueue(delay)
		ms := strconv.FormatInt(delay.Milliseconds(), 10)
		steps = append(steps,
			func() bool {
				// No dead-letter routing key: an expired message keeps
				// the kind it was published with and routes by it.
				return queue(q, amqp091.Table{
					"x-queue-type":           "classic",
					"x-message-ttl":          int32(delay.Milliseconds()),
					"x-dead-letter-exchange": n.Types,
				})
			},
			func() bool {
				return bind(q, "", n.Delay, amqp091.Table{"x-match": "all", HeaderDelay: ms})
			})
	}
	for _, s := range steps {
		if !s() {
			break
		}
	}
	return errors.Join(d.errs...)
}

// declareInflight declares the checkpoint queue of one owner. It is a
// quorum queue with x-delivery-limit 0: a checkpoint its holder lets go
// unacked (its channel or connection closed, the broker gave up on its
// heartbeats, or it nacked) is dead-lettered at once, reason
// delivery_limit, to Names.Adopt, still carrying its captcha id. A
// checkpoint held never expires; one left ready (its owner died before
// receiving it) expires after its lease (InflightLease) into Adopt too.
//
// Dead-lettering is at-least-once (x-dead-letter-strategy, which asks for
// x-overflow reject-publish): the queue keeps a dead letter until Adopt
// has confirmed it. At-most-once, RabbitMQ's default, dropped them when a
// restarted broker returned the checkpoints its old connections held
// before Adopt was up again: every task then at the provider was lost
// (TestFleetBrokerRestart).
func declareInflight(conn *amqp091.Connection, c Config, owner string) error {
	n := NamesFor(c.Prefix)
	d := &declarer{conn: conn}
	defer d.close()
	q := n.InflightQueue(owner)
	d.do("queue", q, func(ch *amqp091.Channel) error {
		_, err := ch.QueueDeclare(q, true, false, false, false, inflightQueueArgs(n))
		var ae *amqp091.Error
		if errors.As(err, &ae) && ae.Code == amqp091.PreconditionFailed && strings.Contains(ae.Reason, "'x-dead-letter-strategy'") {
			// Declared by a version that dead-lettered at-most-once (a
			// worker started again under the same owner within the
			// queue's idle hour): it serves as it is, and goes once idle.
			pch, perr := d.conn.Channel()
			if perr != nil {
				return err
			}
			defer pch.Close()
			if _, perr := pch.QueueDeclarePassive(q, true, false, false, false, nil); perr != nil {
				return err
			}
			c.withDefaults().Logger.Warn("checkpoint queue declared by an earlier version dead-letters at-most-once: a broker restart may drop its checkpoints; it deletes itself an hour after its worker stops, or delete it when drained",
				"queue", q)
			return nil
		}
		return err
	})
	return errors.Join(d.errs...)
}

// inflightQueueArgs are a checkpoint queue's arguments (see
// declareInflight).
func inflightQueueArgs(n Names) amqp091.Table {
	return amqp091.Table{
		"x-queue-type":              "quorum",
		"x-delivery-limit":          int32(0),
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": n.Adopt,
		"x-dead-letter-strategy":    "at-least-once",
		"x-overflow":                "reject-publish",
		"x-expires":                 int32(InflightQueueIdleDefault.Milliseconds()),
	}
}

// declareClaims declares the claim queue of one worker, bound to the
// claims exchange. It deletes itself once idle, as a checkpoint queue.
func declareClaims(conn *amqp091.Connection, c Config, owner string) error {
	n := NamesFor(c.Prefix)
	return declareBound(conn, n.ClaimQueue(owner), amqp091.Table{
		"x-queue-type": "classic",
		"x-expires":    int32(InflightQueueIdleDefault.Milliseconds()),
	}, n.Claims, nil)
}

// declareBound declares durable queue q with args, bound to exchange with
// bindArgs and no routing key.
func declareBound(conn *amqp091.Connection, q string, args amqp091.Table, exchange string, bindArgs amqp091.Table) error {
	d := &declarer{conn: conn}
	defer d.close()
	ok := d.do("queue", q, func(ch *amqp091.Channel) error {
		_, err := ch.QueueDeclare(q, true, false, false, false, args)
		return err
	})
	if ok {
		d.do("binding", q, func(ch *amqp091.Channel) error {
			return ch.QueueBind(q, "", exchange, false, bindArgs)
		})
	}
	return errors.Join(d.errs...)
}

// declareReplies declares the reply queue of one gateway: results published
// with its name as reply-to land there (through Names.ReplyExchange, bound
// under the queue's name), and, through a binding to the dead-letter
// exchange, a copy of every dead letter of the fleet (the gateway keeps
// those of its own tasks and acks the rest).
func declareReplies(conn *amqp091.Connection, c Config, gateway string) error {
	n := NamesFor(c.Prefix)
	d := &declarer{conn: conn}
	defer d.close()
	q := n.ReplyQueue(gateway)
	ok := d.do("queue", q, func(ch *amqp091.Channel) error {
		_, err := ch.QueueDeclare(q, true, false, false, false, replyQueueArgs())
		var ce *ConflictError
		if errors.As(conflict("queue", q, err), &ce) && ce.Arg == "x-expires" {
			return fmt.Errorf("%w; a reply queue from before reply queues expired after %v unused: once its results are collected, delete it and start the gateway again, or start it with another --gateway NAME", ce, ReplyQueueIdle)
		}
		return err
	})
	if ok {
		ok = d.do("binding", q, func(ch *amqp091.Channel) error {
			return ch.QueueBind(q, q, n.ReplyExchange, false, nil)
		})
	}
	if ok {
		d.do("binding", q, func(ch *amqp091.Channel) error {
			return ch.QueueBind(q, FailedRoutingKey, n.DLX, false, nil)
		})
	}
	return errors.Join(d.errs...)
}

// replyQueueArgs are a gateway reply queue's arguments. A reply queue
// declared before it had an expiry is a *ConflictError on x-expires: delete
// it once drained (its gateway stopped, its results collected) and the
// gateway declares it again.
func replyQueueArgs() amqp091.Table {
	return amqp091.Table{"x-queue-type": "classic", "x-expires": int32(ReplyQueueIdle.Milliseconds())}
}

// DeleteTopology deletes every queue and exchange of c (and the checkpoint
// queues of owners), messages included. For tests and for an operator who
// means it.
func DeleteTopology(ctx context.Context, c Config, owners ...string) error {
	c = c.withDefaults()
	n := NamesFor(c.Prefix)
	queues := []string{n.Tasks, n.Adopt, n.Results, n.Failed, n.Replayed, n.Reports, n.Threads, n.ThreadsReturning, n.ThreadsFilled, n.Routing, n.Balance, n.State}
	for _, k := range c.Lanes {
		queues = append(queues, n.Lane(k))
	}
	for _, d := range c.RetryDelays {
		queues = append(queues, n.DelayQueue(d))
	}
	for _, o := range owners {
		queues = append(queues, n.InflightQueue(o), n.ClaimQueue(o))
	}
	return deleteAll(ctx, c, queues, []string{n.Types, n.TasksAll, n.ReplyExchange, n.RepliesUnrouted, n.DLX, n.Delay, n.Status, n.Claims})
}

// DeleteProviderThreads deletes the thread pools of the named providers
// of a fleet on several (Names.ProviderThreads), tokens included: for
// tests, and to change a provider's threads once its workers are stopped.
func DeleteProviderThreads(ctx context.Context, c Config, providers ...string) error {
	c = c.withDefaults()
	var queues []string
	for _, p := range providers {
		tn := NamesFor(c.Prefix).ProviderThreads(p)
		queues = append(queues, tn.Tokens, tn.Returning, tn.Filled)
	}
	return deleteAll(ctx, c, queues, nil)
}

// DeleteRouting deletes the record of the fleet's routing
// (Names.Routing), so that the next worker to start records its own: to
// change the routing of a fleet once all its workers are stopped (see
// Routing under "Several providers" in the package doc).
func DeleteRouting(ctx context.Context, c Config) error {
	c = c.withDefaults()
	return deleteAll(ctx, c, []string{NamesFor(c.Prefix).Routing}, nil)
}

// DeleteReplies deletes the reply queues of gateways, messages included:
// for tests, and for retiring a gateway whose results nobody will read.
func DeleteReplies(ctx context.Context, c Config, gateways ...string) error {
	c = c.withDefaults()
	queues := make([]string, len(gateways))
	for i, g := range gateways {
		queues[i] = NamesFor(c.Prefix).ReplyQueue(g)
	}
	return deleteAll(ctx, c, queues, nil)
}

// deleteAll deletes queues, then exchanges, one channel each (a missing
// one closes its channel), on a connection of its own.
func deleteAll(ctx context.Context, c Config, queues, exchanges []string) error {
	conn, _, err := dial(ctx, c)
	if err != nil {
		return err
	}
	defer conn.Close()
	var errs []error
	for _, q := range queues {
		ch, err := conn.Channel()
		if err != nil {
			return err
		}
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			errs = append(errs, fmt.Errorf("delete queue %s: %w", q, err))
		}
		_ = ch.Close()
	}
	for _, e := range exchanges {
		ch, err := conn.Channel()
		if err != nil {
			return err
		}
		if err := ch.ExchangeDelete(e, false, false); err != nil {
			errs = append(errs, fmt.Errorf("delete exchange %s: %w", e, err))
		}
		_ = ch.Close()
	}
	return errors.Join(errs...)
}
