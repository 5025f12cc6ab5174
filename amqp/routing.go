package amqp

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
)

// RoutingConflictError says that a worker's routing differs from the one
// its prefix's fleet recorded (see Routing under "Several providers" in the
// package doc): the worker refuses to start, since it would use other
// thread pools or send tasks where the fleet does not.
type RoutingConflictError struct {
	Prefix string
	// Fleet is the routing recorded on the broker; Worker this worker's.
	Fleet, Worker string
}

func (e *RoutingConflictError) Error() string {
	return fmt.Sprintf("amqp: the workers on prefix %s route by %s, but this worker by %s; "+
		"start it as the others are (the same --providers file, or none if they have none), "+
		"or, to change the fleet's routing, stop every worker on prefix %s and delete its record "+
		"(rabbitmqctl delete_queue %s)",
		e.Prefix, e.Fleet, e.Worker, e.Prefix, NamesFor(e.Prefix).Routing)
}

// routingOf describes the routing of a worker's queue qc of threads
// threads (WorkerConfig.threads): what every worker on a prefix must
// agree on. For one provider, the plan's threads; for several, each
// provider in order with its threads, its methods (sorted: their order
// routes nothing) and its SpillAfter. Keys, URLs, prices, spend caps and
// DownAfter are left out: they hold secrets, or may differ from worker
// to worker without sending a task elsewhere.
func routingOf(qc captchaq.Config, threads int) string {
	if len(qc.Providers) == 0 {
		return fmt.Sprintf("one provider of %d threads (no --providers)", threads)
	}
	var each []string
	for _, p := range qc.Providers {
		methods := slices.Clone(p.Methods)
		if methods == nil {
			methods = slices.Clone(provider.CommonMethods)
		}
		slices.Sort(methods)
		s := fmt.Sprintf("%s (%d threads; %s", p.Name, cmp.Or(p.Threads, captchaq.ThreadsDefault), strings.Join(slices.Compact(methods), " "))
		if p.SpillAfter > 0 {
			s += "; spill_after " + p.SpillAfter.String()
		}
		each = append(each, s+")")
	}
	return "providers " + strings.Join(each, ", ")
}

// declareRouting records routing as the fleet's on c's prefix, or checks
// it against the one recorded, now and after every reconnect: a routing
// that differs is a *RoutingConflictError.
func (c *Conn) declareRouting(ctx context.Context, routing string) error {
	return c.declareQueue(ctx, c.Names().Routing, func(conn *amqp091.Connection) error {
		ctx, cancel := context.WithTimeout(context.Background(), threadsLockWait)
		defer cancel()
		return checkRouting(ctx, conn, c.cfg.Prefix, routing)
	})
}

// checkRouting reads the record, one persistent message in the Routing
// queue, and publishes routing there if it is empty. It runs under the
// exclusive RoutingLock, as fillThreads under a pool's lock, so of two
// workers starting together with different routings one records its
// own and the other is refused. A worker that dies here leaves no lock
// (the broker deletes it with the connection), the message it read goes
// back unread, and a record is published whole or not at all.
func checkRouting(ctx context.Context, conn *amqp091.Connection, prefix, routing string) error {
	n := NamesFor(prefix)
	unlock, err := lockQueue(ctx, conn, n.RoutingLock, "checking the fleet's routing")
	if err != nil {
		return err
	}
	defer unlock()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("amqp: open channel: %w", err)
	}
	defer ch.Close() // requeues the record read
	if _, err := ch.QueueDeclare(n.Routing, true, false, false, false, amqp091.Table{"x-queue-type": "classic"}); err != nil {
		return conflict("queue", n.Routing, err)
	}
	d, ok, err := ch.Get(n.Routing, false)
	if err != nil {
		return fmt.Errorf("amqp: read %s: %w", n.Routing, err)
	}
	if ok {
		if fleet := string(d.Body); fleet != routing {
			return &RoutingConflictError{Prefix: prefix, Fleet: fleet, Worker: routing}
		}
		return nil
	}
	if err := ch.Tx(); err != nil {
		return fmt.Errorf("amqp: record %s: %w", n.Routing, err)
	}
	err = ch.PublishWithContext(ctx, "", n.Routing, false, false, amqp091.Publishing{
		DeliveryMode: amqp091.Persistent, ContentType: "text/plain", Type: "routing", Body: []byte(routing),
	})
	if err == nil {
		err = ch.TxCommit()
	}
	if err != nil {
		return fmt.Errorf("amqp: record %s: %w", n.Routing, err)
	}
	return nil
}
