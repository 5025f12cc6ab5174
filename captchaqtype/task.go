package captchaqtype

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/captchaq/captchaq/provider"
)

// PriorityDefault is the priority of a task that names none. Lower numbers
// are more urgent.
const PriorityDefault = 5

// Task is one unit of work for the queue: a provider task plus the queue's
// own fields. Its JSON form is one line of task JSONL:
//
//	{"id":"checkout-1","method":"turnstile","params":{"sitekey":"0x4AAA…","pageurl":"https://shop.example/checkout"},"priority":1}
type Task struct {
	// ID is the idempotency key: submitting a known ID with the same task
	// (same Fingerprint) returns the existing task instead of creating a
	// second one; a known ID with another task is refused with an
	// *IDConflictError. Required.
	ID string `json:"id"`
	// Method and Params are the provider's own names (see package provider).
	Method string            `json:"method"`
	Params map[string]string `json:"params,omitempty"`
	// Priority: lower is more urgent. Zero means PriorityDefault.
	Priority int `json:"priority,omitempty"`
	// Tenant names who fed the task, for fair share among producers that
	// use one key. Empty is a tenant like any other.
	Tenant string `json:"tenant,omitempty"`
	// Deadline: a task still waiting at its deadline is never submitted; it
	// fails with ErrExpired. Zero means none. TTL, when set on input, is
	// turned into a Deadline when the task is accepted.
	Deadline time.Time     `json:"deadline,omitzero"`
	TTL      time.Duration `json:"-"`
	// MaxAttempts bounds submissions to the provider (retries included).
	// Zero means the queue's Config.MaxAttempts.
	MaxAttempts int `json:"max_attempts,omitempty"`
	// Proxy is user:pass@host:port for types that take a proxy; ProxyType is
	// HTTP, HTTPS, SOCKS4 or SOCKS5.
	Proxy     string `json:"proxy,omitempty"`
	ProxyType string `json:"proxytype,omitempty"`
	// Pingback, when set, is called by the queue (not the provider) with
	// the result once the task is done.
	Pingback string `json:"pingback,omitempty"`
}

// ProviderTask is the task as sent to the provider: method and params, with
// the proxy folded into the params.
func (t Task) ProviderTask() provider.Task {
	params := make(map[string]string, len(t.Params)+2)
	for k, v := range t.Params {
		params[k] = v
	}
	if t.Proxy != "" {
		params["proxy"] = t.Proxy
	}
	if t.ProxyType != "" {
		params["proxytype"] = t.ProxyType
	}
	return provider.Task{Method: t.Method, Params: params}
}

// Status is where a task stands.
type Status string

// The states of a task. Solved and Failed are final.
const (
	StatusQueued   Status = "queued"   // accepted, waiting for a thread
	StatusInFlight Status = "inflight" // submitted; the provider's id is known
	StatusSolved   Status = "solved"
	StatusFailed   Status = "failed"
)

// Final reports whether s is a final state, Solved or Failed: a task in one
// has its Result, and Cancel of it fails with ErrFinal.
func (s Status) Final() bool { return s == StatusSolved || s == StatusFailed }

// Result is the final outcome of a task. Its JSON form is one line of
// result JSONL.
type Result struct {
	ID     string        `json:"id"`
	Status Status        `json:"status"`
	Method string        `json:"method"`
	Kind   provider.Kind `json:"type,omitempty"`
	// Token is what to put in the target page's form: the token for token
	// types, the text for image types, the raw answer for structured types.
	Token string `json:"token,omitempty"`
	// Answer is the provider's raw answer when it is structured (GeeTest,
	// Cloudflare Challenge), verbatim JSON.
	Answer json.RawMessage `json:"answer,omitempty"`
	// Error says why a failed task failed; ErrorCode is the provider's code
	// (ERROR_…) or the queue's own (EXPIRED, INVALID_TASK, …).
	Error     string `json:"error,omitempty"`
	ErrorCode string `json:"error_code,omitempty"`
	Attempts  int    `json:"attempts"`
	// CaptchaID is the provider's id of the attempt that solved the task,
	// kept so that reportbad/reportgood can reach the provider.
	CaptchaID string `json:"captcha_id,omitempty"`
	// SolveSeconds is from the accepting submit to the answer being ready.
	SolveSeconds float64 `json:"solve_seconds"`
	// ExpiresAt is when the token stops being accepted by the target site,
	// as far as the type's published lifetime says.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// Reservoir names the reservoir whose token answered the task at
	// once (Config.Reservoirs); empty for a task solved for itself.
	Reservoir string `json:"reservoir,omitempty"`
	// Provider names the provider of the last attempt, the one that
	// solved it, in a queue of several (Config.Providers); empty with one.
	Provider string `json:"provider,omitempty"`
	// Price is what the task cost: its solve at a per-solve provider
	// (ProviderConfig.PricePer1000 / 1000), plus the solves abandoned at
	// the providers in Abandoned. Zero on a flat-rate plan.
	Price float64 `json:"price,omitempty"`
	// Abandoned names the providers the task was in flight at when they
	// went down: it was submitted again elsewhere, and each of them may
	// bill its solve too (the task was paid for twice).
	Abandoned []string `json:"abandoned,omitempty"`
	// Timings of the task's life.
	AcceptedAt  time.Time `json:"accepted_at,omitzero"`
	SubmittedAt time.Time `json:"submitted_at,omitzero"`
	FinishedAt  time.Time `json:"finished_at,omitzero"`
}

// Expired reports whether r is a solved result whose token has passed its
// ExpiresAt at now: the target site no longer accepts it, so it is never
// handed out as a fresh answer. A result with no ExpiresAt does not expire.
func (r Result) Expired(now time.Time) bool {
	return r.Status == StatusSolved && !r.ExpiresAt.IsZero() && !now.Before(r.ExpiresAt)
}

// CheckStockable says why r cannot be a reservoir's token
// (ReservoirStore.StockToken), or nil when it can: a token is a solved
// result with its ExpiresAt. Every ReservoirStore refuses r with this
// error.
func (r Result) CheckStockable() error {
	switch {
	case r.Status != StatusSolved:
		return fmt.Errorf("captchaq: reservoir token %q: status is %q: stock only %q results", r.ID, r.Status, StatusSolved)
	case r.ExpiresAt.IsZero():
		return fmt.Errorf("captchaq: reservoir token %q has no expires_at: set Result.ExpiresAt from the type's token lifetime", r.ID)
	}
	return nil
}
