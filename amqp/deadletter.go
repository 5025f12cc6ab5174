package amqp

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/captchaq/captchaq"
)

// DeadLetter is one message of the dead-letter queue.
type DeadLetter struct {
	Task TaskMessage
	// Reason is HeaderReason when the queue put it there (permanent,
	// exhausted, invalid), or the broker's x-death reason (expired,
	// rejected, maxlen).
	Reason string
	// ErrorCode is the last error's code; EXPIRED for a task whose TTL ran
	// out in a task queue.
	ErrorCode string
	// From is the queue the broker dead-lettered it from, if it did.
	From string
	// Body is set, and Task empty, when the body is not a task.
	Body []byte
	// DeadAt is the message timestamp (when it was last published).
	DeadAt time.Time
	// Superseded is set on a gateway's task that its gateway replayed or
	// answered since this copy was published: Replay takes it out of the
	// queue without publishing it.
	Superseded bool
}

// readDeadLetter reads m, a message of Names.Failed; replayed are the
// notices of Names.Replayed (replayedNotices).
func readDeadLetter(m amqp091.Delivery, replayed map[string]int64) DeadLetter {
	dl := DeadLetter{DeadAt: m.Timestamp, Reason: headerString(m.Headers, HeaderReason)}
	t, err := DecodeTask(m.Body, m.Headers)
	if err != nil {
		dl.Body = m.Body
		dl.Reason = cmpOr(dl.Reason, ReasonInvalid)
	} else {
		// A failed replay is listed, and replayed again, under its own id.
		t.Task.ID, t.ReplayOf = t.ownID(), ""
		t.ReplyTo = m.ReplyTo
		dl.Task = t
		dl.ErrorCode = t.LastErrorCode
		dl.Superseded = replayedSince(replayed, t)
	}
	if d, ok := LastDeath(m.Headers); ok && dl.Reason == "" {
		dl.Reason, dl.From = d.Reason, d.Queue
		if d.Reason == "expired" && dl.ErrorCode == "" {
			dl.ErrorCode = "EXPIRED"
		}
	}
	return dl
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// matches tells whether f selects dl. On the fleet f.ErrorCode also names
// a dead letter's reason (permanent, exhausted, invalid, expired), so
// `dlq replay --reason` selects by either.
func matches(f captchaq.DeadLetterFilter, dl DeadLetter) bool {
	switch {
	case f.All:
		return true
	case len(f.IDs) > 0:
		return dl.Task.Task.ID != "" && slices.Contains(f.IDs, dl.Task.Task.ID)
	case f.ErrorCode != "":
		return dl.ErrorCode == f.ErrorCode || dl.Reason == f.ErrorCode
	}
	return false
}

// drainFailed takes the messages the dead-letter queue holds when it
// starts, without acking, on a channel of its own, and calls fn with each.
// Closing the channel puts back whatever fn did not ack, in its order. A
// message dead-lettered meanwhile is left for the next call: a replay that
// fails again at once would otherwise come round to the same call and be
// replayed again and again.
func (c *Conn) drainFailed(ctx context.Context, fn func(ch *amqp091.Channel, m amqp091.Delivery) error) error {
	ch, _, err := c.channel(ctx)
	if err != nil {
		return err
	}
	defer ch.Close()
	q := c.Names().Failed
	st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("amqp: inspect %s: %w", q, err)
	}
	for range st.Messages {
		if ctx.Err() != nil {
			break
		}
		m, ok, err := ch.Get(q, false)
		if err != nil {
			return fmt.Errorf("amqp: read %s: %w", q, err)
		}
		if !ok {
			return nil
		}
		if err := fn(ch, m); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// DeadLetters calls fn for every dead letter, oldest first, and leaves them
// all in place.
func (c *Conn) DeadLetters(ctx context.Context, fn func(DeadLetter) error) error {
	replayed, err := c.replayedNotices(ctx)
	if err != nil {
		return err
	}
	return c.drainFailed(ctx, func(_ *amqp091.Channel, m amqp091.Delivery) error {
		return fn(readDeadLetter(m, replayed))
	})
}

// Replay publishes the dead letters that match f back to the task exchange
// with their attempts and errors reset, each confirmed before it leaves the
// dead-letter queue, and returns how many it moved. A task keeps its
// reply-to, so its result goes back to the gateway that accepted it.
//
// Each replay goes under a wire id of its own (see replayWireID) with the
// task's id in HeaderReplayOf: a worker answers a wire id once, so one that
// failed the task would drop a copy under the same id as a duplicate. Its
// result and any new dead letter carry the task's own id, so Collect, a
// gateway and `dlq replay` see the task as it was; copies of one replay
// (a redelivery) share its wire id and are still solved once.
//
// A dead letter of a gateway's task that the gateway replayed from its
// store, or answered, after the copy was published (its notice in
// Names.Replayed, see Gateway) is not published again: it is taken out of
// the queue, its task at the fleet already, or answered. Notices name
// their gateway, so another gateway's task under the same id is replayed.
func (c *Conn) Replay(ctx context.Context, f captchaq.DeadLetterFilter) (int, error) {
	replayed, err := c.replayedNotices(ctx)
	if err != nil {
		return 0, err
	}
	p := c.NewPublisher()
	defer p.Close()
	n := 0
	err = c.drainFailed(ctx, func(ch *amqp091.Channel, m amqp091.Delivery) error {
		dl := readDeadLetter(m, replayed)
		if dl.Body != nil || !matches(f, dl) {
			return nil
		}
		if dl.Superseded {
			if err := ch.Ack(m.DeliveryTag, false); err != nil {
				return fmt.Errorf("amqp: drop %q, replayed by its gateway: %w", dl.Task.Task.ID, err)
			}
			return nil
		}
		now := time.Now()
		id := dl.Task.Task.ID
		wire := dl.Task.Task
		wire.ID = replayWireID(id, renewGen(now))
		t := TaskMessage{Task: wire, ReplayOf: id, Accepted: now, ReplyTo: dl.Task.ReplyTo}
		if err := p.PublishTask(ctx, t); err != nil {
			return fmt.Errorf("amqp: replay %q: %w", id, err)
		}
		if err := ch.Ack(m.DeliveryTag, false); err != nil {
			// Published but still a dead letter: a second replay would
			// publish it again under another wire id, and it may be
			// solved twice.
			return fmt.Errorf("amqp: replay %q: ack: %w", id, err)
		}
		n++
		return nil
	})
	return n, err
}

// replayWireID is the wire id of a replay of id in generation gen: ID@GEN,
// with ID cut short (at a character's start) when the whole would pass a
// message id's limit. It only needs to be new to the workers: the result
// goes under HeaderReplayOf.
func replayWireID(id, gen string) string {
	suffix := "@" + gen
	cut := min(len(id), maxWireID-len(suffix))
	for cut > 0 && cut < len(id) && !utf8.RuneStart(id[cut]) {
		cut--
	}
	return id[:cut] + suffix
}

// ReplayedNoticesMax bounds Names.Replayed: past it the oldest notices
// go, and `captchaq dlq replay` may again publish a dead letter whose
// task its gateway replayed or answered that long ago.
const ReplayedNoticesMax = 100000

// replayedNotice says gateway Gateway replayed or answered its task ID (its
// store's id) at At, in Unix milliseconds: copies of it published before
// At need no replay. A notice without Gateway names the task of any
// gateway.
type replayedNotice struct {
	Gateway string `json:"gateway,omitempty"`
	ID      string `json:"id"`
	At      int64  `json:"at"`
}

// noteReplayed publishes the notice that gateway replayed or answered id
// at now.
func (p *Publisher) noteReplayed(ctx context.Context, gateway, id string, now time.Time) error {
	body, err := json.Marshal(replayedNotice{Gateway: gateway, ID: id, At: now.UnixMilli()})
	if err != nil {
		return err
	}
	return p.Publish(ctx, "", p.c.Names().Replayed, amqp091.Publishing{ContentType: "application/json", Body: body})
}

// replayedNotices reads every notice of Names.Replayed, leaving them in
// place: the latest of each task, by GATEWAY/ID (/ID for a notice that
// names no gateway), in Unix milliseconds.
func (c *Conn) replayedNotices(ctx context.Context) (map[string]int64, error) {
	ch, _, err := c.channel(ctx)
	if err != nil {
		return nil, err
	}
	defer ch.Close() // puts back every notice read
	q := c.Names().Replayed
	st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
	if err != nil {
		return nil, fmt.Errorf("amqp: inspect %s: %w", q, err)
	}
	at := map[string]int64{}
	for range st.Messages {
		m, ok, err := ch.Get(q, false)
		if err != nil {
			return nil, fmt.Errorf("amqp: read %s: %w", q, err)
		}
		if !ok {
			break
		}
		var rn replayedNotice
		if json.Unmarshal(m.Body, &rn) == nil && rn.ID != "" {
			key := rn.Gateway + "/" + rn.ID
			at[key] = max(at[key], rn.At)
		}
	}
	return at, nil
}

// replayedSince says whether dead letter t, under a gateway's wire id
// (NAME/ID, or NAME@GEN/ID with GEN the time it was published, see
// wireIDs.wireID), was published before its gateway replayed or answered
// the task. A copy without GEN counts from when it was accepted: a task
// accepted later under the same id (its gateway's store made again) is
// another task.
func replayedSince(replayed map[string]int64, t TaskMessage) bool {
	head, id, ok := strings.Cut(t.Task.ID, "/")
	if !ok {
		return false
	}
	name, gen, renewed := strings.Cut(head, "@")
	at, ok := replayed[name+"/"+id]
	if old, oldOK := replayed["/"+id]; oldOK {
		at, ok = max(at, old), true
	}
	if !ok {
		return false
	}
	var published int64
	if !t.Accepted.IsZero() {
		published = t.Accepted.UnixMilli()
	}
	if renewed {
		ms, err := strconv.ParseInt(gen, 36, 64)
		if err != nil {
			return false
		}
		published = ms
	}
	return published < at
}
