package amqp

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
)

// Headers the queue sets on task messages. Bodies are the user's Task or
// Result JSON; everything the broker path adds travels in headers, so a dead
// letter can be read, fixed and replayed as it is.
const (
	HeaderAttempts   = "captchaq-attempts"   // int: provider submissions so far
	HeaderCaptchaID  = "captchaq-captcha-id" // the provider's id of the attempt in flight
	HeaderSubmitted  = "captchaq-submitted"  // RFC 3339: when the provider accepted it
	HeaderAccepted   = "captchaq-accepted"   // RFC 3339: when the task entered the broker
	HeaderReason     = "captchaq-reason"     // why a dead letter is one: permanent, exhausted, invalid
	HeaderError      = "captchaq-error"      // the last error's text
	HeaderErrorCode  = "captchaq-error-code" // the last error's code (ERROR_…, EXPIRED, …)
	HeaderOwner      = "captchaq-owner"      // the consumer holding a checkpoint
	HeaderDelay      = "captchaq-delay"      // the delay tier in ms
	HeaderSeq        = "captchaq-seq"        // int: which copy of a checkpoint this is
	HeaderDemoted    = "captchaq-demoted"    // int: AMQP priority levels below the task's own (a gateway's fair share)
	HeaderRun        = "captchaq-run"        // the worker run that published a checkpoint
	HeaderReplayOf   = "captchaq-replay-of"  // the task's own id, on a replay's wire id (see Conn.Replay)
	HeaderPublish    = "captchaq-publish"    // one publish call's token, kept by the copy sent again when a channel dies before its confirm
	contentTypeJSON  = "application/json"
	messageTypeTask  = "task"
	messageTypeResul = "result"
)

// Dead-letter reasons in HeaderReason. RabbitMQ's own ("expired",
// "rejected", "maxlen") come in the x-death header instead.
const (
	ReasonPermanent = "permanent" // the provider refused this task for good
	ReasonExhausted = "exhausted" // retries used up
	ReasonInvalid   = "invalid"   // the message could not be read as a task
	ReasonExpired   = "expired"   // the task's own deadline passed before a thread was free
)

// ErrBadMessage is returned for a message whose body is not a task or a
// result.
var ErrBadMessage = errors.New("amqp: bad message")

// KindOf is the routing key of a task: the kind its validation decides
// (provider.Task.KindFor over every method captchaq knows: recaptcha_v2,
// turnstile, image, ...), so a task goes to the lane of the kind it was
// accepted as, however the client spelt it (version=3 is reCAPTCHA v3,
// recaptcha=true a grid). A task validation cannot place (a method this
// package does not know) routes by its method, to the default queue unless
// a lane names it.
func KindOf(t captchaq.Task) string {
	pt := provider.Task{Method: t.Method, Params: t.Params}
	if k, err := pt.KindFor(provider.KnownMethods); err == nil {
		return string(k)
	}
	if t.Method == "" {
		return "unknown"
	}
	return t.Method
}

// AMQPPriority maps a task priority (lower is more urgent, 0 = default 5)
// onto an AMQP priority (higher is more urgent) in 0..max.
func AMQPPriority(p, maxPriority int) uint8 {
	if p == 0 {
		p = captchaq.PriorityDefault
	}
	return uint8(min(max(maxPriority-p, 0), maxPriority))
}

// TaskMessage is a task as it travels: the task and what the broker path
// knows of it.
type TaskMessage struct {
	Task      captchaq.Task
	Attempts  int
	CaptchaID string    // set on a checkpoint: poll, do not submit again
	Accepted  time.Time // when it first entered the broker
	Submitted time.Time
	// LastError and LastErrorCode are kept across retries.
	LastError     string
	LastErrorCode string
	// ReplyTo is the queue the task's result goes to: a gateway's reply
	// queue (Names.Replies), carried in the message's reply-to property
	// through retries, checkpoints and dead letters. Empty, or a queue
	// that is not a reply queue of this prefix: Names.Results.
	ReplyTo string
	// Demoted lowers the message's AMQP priority by this many levels
	// below the one Task.Priority maps to (see Gateway: fair share).
	Demoted int
	// ReplayOf is the task's own id when Task.ID is the wire id of a
	// replay (see Conn.Replay): its result and dead letter go under it.
	ReplayOf string
}

// ownID is the task's own id: ReplayOf on a replay, else Task.ID.
func (m TaskMessage) ownID() string { return cmpOr(m.ReplayOf, m.Task.ID) }

func (m TaskMessage) publishing(maxPriority int) (amqp091.Publishing, error) {
	body, err := json.Marshal(m.Task)
	if err != nil {
		return amqp091.Publishing{}, fmt.Errorf("amqp: encode task %q: %w", m.Task.ID, err)
	}
	h := amqp091.Table{HeaderAttempts: int32(m.Attempts)}
	if m.CaptchaID != "" {
		h[HeaderCaptchaID] = m.CaptchaID
	}
	if !m.Accepted.IsZero() {
		h[HeaderAccepted] = m.Accepted.UTC().Format(time.RFC3339Nano)
	}
	if !m.Submitted.IsZero() {
		h[HeaderSubmitted] = m.Submitted.UTC().Format(time.RFC3339Nano)
	}
	if m.LastError != "" {
		h[HeaderError] = m.LastError
	}
	if m.LastErrorCode != "" {
		h[HeaderErrorCode] = m.LastErrorCode
	}
	prio := AMQPPriority(m.Task.Priority, maxPriority)
	if m.ReplayOf != "" {
		h[HeaderReplayOf] = m.ReplayOf
	}
	if m.Demoted > 0 {
		h[HeaderDemoted] = int32(m.Demoted)
		prio = uint8(max(int(prio)-m.Demoted, 0))
	}
	return amqp091.Publishing{
		ContentType:  contentTypeJSON,
		DeliveryMode: amqp091.Persistent,
		Priority:     prio,
		MessageId:    m.Task.ID,
		Type:         messageTypeTask,
		Timestamp:    time.Now(),
		ReplyTo:      m.ReplyTo,
		Headers:      h,
		Body:         body,
	}, nil
}

// DecodeTask reads a task message from its body and headers; the caller
// sets ReplyTo from the message's reply-to property (Delivery.Task does).
func DecodeTask(body []byte, h amqp091.Table) (TaskMessage, error) {
	var m TaskMessage
	if err := json.Unmarshal(body, &m.Task); err != nil {
		return m, fmt.Errorf("%w: task body: %v", ErrBadMessage, err)
	}
	if m.Task.ID == "" {
		return m, fmt.Errorf("%w: task body has no id", ErrBadMessage)
	}
	m.Attempts = headerInt(h, HeaderAttempts)
	m.CaptchaID = headerString(h, HeaderCaptchaID)
	m.Accepted = headerTime(h, HeaderAccepted)
	m.Submitted = headerTime(h, HeaderSubmitted)
	m.LastError = headerString(h, HeaderError)
	m.LastErrorCode = headerString(h, HeaderErrorCode)
	m.Demoted = headerInt(h, HeaderDemoted)
	m.ReplayOf = headerString(h, HeaderReplayOf)
	return m, nil
}

func resultPublishing(r captchaq.Result) (amqp091.Publishing, error) {
	body, err := json.Marshal(r)
	if err != nil {
		return amqp091.Publishing{}, fmt.Errorf("amqp: encode result %q: %w", r.ID, err)
	}
	return amqp091.Publishing{
		ContentType:  contentTypeJSON,
		DeliveryMode: amqp091.Persistent,
		MessageId:    r.ID,
		Type:         messageTypeResul,
		Timestamp:    time.Now(),
		Body:         body,
	}, nil
}

// DecodeResult reads a result message.
func DecodeResult(body []byte) (captchaq.Result, error) {
	var r captchaq.Result
	if err := json.Unmarshal(body, &r); err != nil {
		return r, fmt.Errorf("%w: result body: %v", ErrBadMessage, err)
	}
	if r.ID == "" {
		return r, fmt.Errorf("%w: result body has no id", ErrBadMessage)
	}
	return r, nil
}

func headerString(h amqp091.Table, k string) string {
	s, _ := h[k].(string)
	return s
}

func headerInt(h amqp091.Table, k string) int {
	switch v := h[k].(type) {
	case int32:
		return int(v)
	case int64:
		return int(v)
	case int16:
		return int(v)
	case int8:
		return int(v)
	case uint8:
		return int(v)
	case int:
		return v
	}
	return 0
}

func headerTime(h amqp091.Table, k string) time.Time {
	s := headerString(h, k)
	if s == "" {
		return time.Time{}
	}
	t, _ := time.Parse(time.RFC3339Nano, s)
	return t
}

// Death is the newest entry of RabbitMQ's x-death header: why and from
// where the broker dead-lettered a message.
type Death struct {
	Reason string // expired, rejected, maxlen, delivery_limit
	Queue  string
	Count  int
}

// LastDeath reads the newest x-death entry, if any.
func LastDeath(h amqp091.Table) (Death, bool) {
	list, ok := h["x-death"].([]any)
	if !ok || len(list) == 0 {
		return Death{}, false
	}
	e, ok := list[0].(amqp091.Table)
	if !ok {
		return Death{}, false
	}
	d := Death{Reason: headerString(e, "reason"), Queue: headerString(e, "queue")}
	if c, ok := e["count"].(int64); ok {
		d.Count = int(c)
	}
	return d, true
}

// rawPublishing is a copy of d's message with extra headers, for moving a
// message that cannot be read as it is.
func rawPublishing(d *Delivery, extra amqp091.Table) amqp091.Publishing {
	h := amqp091.Table{}
	for k, v := range d.Headers {
		h[k] = v
	}
	for k, v := range extra {
		h[k] = v
	}
	return amqp091.Publishing{
		ContentType: contentTypeJSON, DeliveryMode: amqp091.Persistent,
		MessageId: d.MessageID, Timestamp: time.Now(), ReplyTo: d.ReplyTo, Headers: h, Body: d.Body,
	}
}
