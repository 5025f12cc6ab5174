package captchaqtype

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// An id names one task. The queue keeps, with every task, a fingerprint of
// what the provider would be asked for it; a known id submitted again with
// the same fingerprint is the same task (idempotent), with another one it
// is refused with an *IDConflictError before anything is sent or returned.

// ErrIDConflict matches every *IDConflictError.
var ErrIDConflict = errors.New("captchaq: id already names another task")

// CodeIDConflict is the ErrorCode of a task refused because its id names
// another task.
const CodeIDConflict = "ID_CONFLICT"

// fingerprintVersion prefixes what is hashed, so a change of the encoding
// can never make two different tasks look the same.
const fingerprintVersion = "captchaq-task-v1\n"

// Fingerprint is the hex SHA-256 of what the provider would be asked for
// t: its method and its params with the proxy and proxytype folded in (as
// ProviderTask sends them). The encoding is canonical: params sorted by
// key, keys and values taken byte for byte. Letter case counts, in keys as
// in values, because the provider receives them as written ("sitekey" and
// "SiteKey" are two params to it). The queue's own fields (ID, Priority,
// Tenant, Deadline, TTL, MaxAttempts, Pingback) change how the task is
// handled, not its answer, and are left out.
func (t Task) Fingerprint() string {
	pt := t.ProviderTask()
	// encoding/json writes a map's keys sorted, which makes this canonical.
	b, _ := json.Marshal(struct {
		Method string            `json:"method"`
		Params map[string]string `json:"params"`
	}{pt.Method, pt.Params})
	sum := sha256.Sum256(append([]byte(fingerprintVersion), b...))
	return hex.EncodeToString(sum[:])
}

// IDConflictError refuses a task whose id already names another task.
// Differs says what differs, by name only ("params.sitekey differs"):
// values may be secrets (a proxy's password) and are never included.
type IDConflictError struct {
	ID      string
	Differs string
}

func (e *IDConflictError) Error() string {
	return fmt.Sprintf("captchaq: id %q already names another task (%s): give this task its own id, or resubmit the first task unchanged", e.ID, e.Differs)
}

// Is makes every IDConflictError match ErrIDConflict.
func (e *IDConflictError) Is(target error) bool { return target == ErrIDConflict }

// The id rule is here, and every door applies it through these functions
// (the queue's intake and Adopt, the service's createTask, amqp's gateway
// and workers): a task submitted under a known id is another task when
// its fingerprint differs, and is refused; the same task is the known
// one, waited for, answered with its stored result, or, solved with a
// token that has expired, solved again.

// Known is what a task submitted under a known id is, when it is the same
// task (Record.Known).
type Known int

const (
	// KnownPending: the known task, not finished: its result is to come.
	KnownPending Known = iota
	// KnownAnswered: the known task, finished: its stored result answers.
	KnownAnswered
	// KnownExpired: the known task, solved, its token expired: a door that
	// renews solves it again (Store.Renew).
	KnownExpired
)

// Known applies the id rule to t, submitted at now under the id of r: an
// *IDConflictError (Conflict) when t is another task, else what t is.
func (r Record) Known(t Task, now time.Time) (Known, error) {
	if err := r.Conflict(t); err != nil {
		return KnownPending, err
	}
	switch {
	case r.Status == StatusSolved && r.Result != nil && r.Result.Expired(now):
		return KnownExpired, nil
	case r.Result != nil && r.Status.Final():
		return KnownAnswered, nil
	}
	return KnownPending, nil
}

// Conflict returns an *IDConflictError when t, submitted under r's id, is
// not the task r holds, and nil when it is the same task. A record stored
// before fingerprints were kept is compared by its task.
func (r Record) Conflict(t Task) error {
	fp := r.Fingerprint
	if fp == "" {
		fp = r.Task.Fingerprint()
	}
	return conflict(t, fp, func() string { return differs(r.Task, t) })
}

// ConflictByFingerprint is Conflict for a door that keeps only the
// fingerprint of the task an id named, not the task: an *IDConflictError
// whose Differs is what the door says of that task (by name only, no
// values), or nil when fingerprint is t's.
func ConflictByFingerprint(t Task, fingerprint, differs string) error {
	return conflict(t, fingerprint, func() string { return differs })
}

// conflict is the id rule's test: t is another task than the one of
// fingerprint fp when their fingerprints differ; differs names what.
func conflict(t Task, fp string, differs func() string) error {
	if fp == t.Fingerprint() {
		return nil
	}
	return &IDConflictError{ID: t.ID, Differs: differs()}
}

// differs names, without values, what differs between two tasks as the
// provider would see them: at most three things, then a count.
func differs(a, b Task) string {
	pa, pb := a.ProviderTask(), b.ProviderTask()
	var d []string
	if pa.Method != pb.Method {
		d = append(d, "method differs")
	}
	keys := make([]string, 0, len(pa.Params)+len(pb.Params))
	for k := range pa.Params {
		keys = append(keys, k)
	}
	for k := range pb.Params {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	for _, k := range keys {
		va, ina := pa.Params[k]
		vb, inb := pb.Params[k]
		name := "params." + k
		if k == "proxy" || k == "proxytype" {
			name = k
		}
		switch {
		case ina && !inb:
			d = append(d, name+" is missing")
		case !ina && inb:
			d = append(d, name+" is new")
		case va != vb:
			d = append(d, name+" differs")
		}
	}
	switch {
	case len(d) == 0:
		return "the task differs"
	case len(d) > 3:
		return fmt.Sprintf("%s and %d more", strings.Join(d[:3], ", "), len(d)-3)
	}
	return strings.Join(d, ", ")
}
