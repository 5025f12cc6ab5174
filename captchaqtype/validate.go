package captchaqtype

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/captchaq/captchaq/internal/checks"
	"github.com/captchaq/captchaq/provider"
)

// What makes a task valid, in one place. Every door calls Task.Validate
// before it accepts a task: Queue.Submit, the CLI's batch, solve and
// enqueue, the service's in.php and JSON API, the fleet's gateway and
// worker. With several providers (Config.Providers, --providers) a door
// calls Task.ValidateFor those providers instead (Queue.Validate does it
// for its own): a type is supported when any of them solves it. Both go
// through one body, validateFor. A refusal is a *TaskError whose Code is one of two:
//
//   - CodeUnsupportedType: the provider does not solve this captcha type
//     (hCaptcha, FunCaptcha, GeeTest v4, ...);
//   - CodeInvalidTask: anything else: a field missing, malformed or out of
//     range.
//
// A new rule goes in check (the queue's own fields) or in the provider's
// Task.Validate (the provider's params), never in a door.
//
// A task is validated once on its way, at the door (each check calls
// internal/checks, which the tests watch): ParseTask reads a line without
// validating it; a door that hands a task on checks it with Task.CheckFor
// or Queue.Check, and the steps after it (Queue.SubmitValid, the server's
// Backend, the gateway) take the ValidTask as it is. What the check found
// (provider.Checked: the provider task, a post task's image decoded) is
// what the queue carries to the provider, which does not validate it
// again. A process trusts only the ValidTasks its own doors made: a fleet
// worker checks each task it takes from the broker once more, at its door
// (Adopt).
//
// What a door adds is about the door, not the task, and is refused with
// the same codes: the service's ids (at most 200 characters, no '/') and
// pingback URLs, the gateway's message id length, the CLI's local image
// file (an unreadable one is CodeInvalidTask). Each door turns a refusal
// into its answer with RefusalCode; the service's in.php maps it to the
// 2captcha codes its clients know (ERROR_BAD_PARAMETERS, ...).

// Validate checks t as every door does before accepting it: the queue's
// fields, then the provider's (type supported, fields present and well
// formed). The error is a *TaskError naming the field and the fix.
func (t Task) Validate() error {
	_, err := t.checkFor(nil)
	return err
}

// ValidTask is a task a door validated (Task.CheckFor, Queue.Check):
// only they make one, so the steps after the door (Queue.SubmitValid,
// the server's Backend, amqp.Gateway.Submit) take it as it is and do not
// validate it again, and a door cannot forget to check: a step handed a
// ValidTask no check made for its providers (the zero ValidTask) checks
// it itself. What the check found travels with it to the provider: the
// provider task as checked, a post task's image decoded.
type ValidTask struct {
	task    Task
	pt      provider.Checked
	methods []string // what it was checked for (methodsFor)
}

// Task is the task as it was validated, with Params of its own.
func (v ValidTask) Task() Task {
	t := v.task
	t.Params = maps.Clone(t.Params)
	return t
}

// ID is the task's id.
func (v ValidTask) ID() string { return v.task.ID }

// Checked is what the check found, which the queue carries to the
// provider: the provider task as checked, a post task's image decoded.
func (v ValidTask) Checked() provider.Checked { return v.pt }

// CheckedFor reports whether v was validated for these providers, as
// Task.CheckFor(providers) validates: a step for them takes it as it is.
func (v ValidTask) CheckedFor(providers []ProviderConfig) bool {
	return v.methods != nil && slices.Equal(v.methods, methodsFor(providers))
}

// CheckFor validates t as ValidateFor does and returns it validated, for
// the steps after the door (ValidTask). Its Params are its own: a change
// to t's map after CheckFor does not reach it.
func (t Task) CheckFor(providers []ProviderConfig) (ValidTask, error) {
	pt, err := t.checkFor(providers)
	if err != nil {
		return ValidTask{}, err
	}
	t.Params = maps.Clone(t.Params)
	return ValidTask{task: t, pt: pt, methods: methodsFor(providers)}, nil
}

// methodsFor is the methods a task is validated for with these
// providers: those any of them solves, in provider.KnownMethods' order;
// none: provider.CaptchaAIMethods.
func methodsFor(providers []ProviderConfig) []string {
	if len(providers) == 0 {
		return provider.CaptchaAIMethods
	}
	var methods []string
	for _, m := range provider.KnownMethods {
		for _, p := range providers {
			if slices.Contains(methodsOf(p), m) {
				methods = append(methods, m)
				break
			}
		}
	}
	return methods
}

// methodsOf is the methods p solves.
func methodsOf(p ProviderConfig) []string {
	if p.Methods == nil {
		return provider.CommonMethods
	}
	return p.Methods
}

// checkedFor checks t for the methods the providers solve (the one body
// of Validate and ValidateFor) and returns the provider task as checked
// (provider.Task.Check): what the queue carries to the provider, which
// does not validate it again.
func (t Task) checkedFor(methods []string) (provider.Checked, error) {
	if err := t.check(); err != nil {
		return provider.Checked{}, err
	}
	pt, err := t.ProviderTask().Check(methods)
	if err != nil {
		code := CodeInvalidTask
		if errors.Is(err, provider.ErrUnsupportedType) {
			code = CodeUnsupportedType
		}
		return provider.Checked{}, &TaskError{ID: t.ID, Code: code, Msg: err.Error(), Err: err}
	}
	return pt, nil
}

// ValidateFor checks t as Validate does, for a queue of these providers
// (only their Name and Methods are read; nil Methods is
// provider.CommonMethods): its type is supported when any of them solves
// it, and a refusal names each provider's methods and which provider
// would solve it. No providers: Validate. The fleet's gateway and the
// CLI's enqueue check with it what a worker on the same providers will
// take.
func (t Task) ValidateFor(providers []ProviderConfig) error {
	_, err := t.checkFor(providers)
	return err
}

// checkFor is ValidateFor returning the checked provider task.
func (t Task) checkFor(providers []ProviderConfig) (provider.Checked, error) {
	pt, err := t.checkedFor(methodsFor(providers))
	if len(providers) == 0 {
		return pt, err
	}
	var te *TaskError
	if !errors.As(err, &te) || te.Code != CodeUnsupportedType {
		return pt, err
	}
	m := t.ProviderTask().RouteMethod()
	var each []string
	for _, p := range providers {
		each = append(each, p.Name+": "+strings.Join(methodsOf(p), ", "))
	}
	would := fmt.Sprintf("a provider with %q in its methods would", m)
	if slices.Contains(provider.CommonMethods, m) {
		would += " (per-solve services of the protocol such as 2captcha and RuCaptcha solve it)"
	}
	if !slices.Contains(provider.KnownMethods, m) {
		would = "captchaq cannot route this type to any provider"
	}
	te.Msg = fmt.Sprintf("unsupported captcha type %s (method %q): no configured provider solves it (%s); %s",
		cmp.Or(provider.TypeName(m), m), t.Method, strings.Join(each, "; "), would)
	return pt, te
}

// RefusalCode is the Result.ErrorCode for a task a door refused with err:
// the *TaskError's code, else CodeInvalidTask (a line that is not a task).
func RefusalCode(err error) string {
	var te *TaskError
	if errors.As(err, &te) && te.Code != "" {
		return te.Code
	}
	return CodeInvalidTask
}

// check validates the queue's own fields.
func (t Task) check() error {
	checks.Count(checks.Queue, t.Params)
	var errs []string
	if t.ID == "" {
		errs = append(errs, "id: required (a unique key for the task)")
	}
	if t.Method == "" {
		errs = append(errs, "method: required (e.g. \"turnstile\", \"userrecaptcha\")")
	}
	if t.Priority < 0 {
		errs = append(errs, "priority: must be 0 or more (lower is more urgent), got "+strconv.Itoa(t.Priority))
	}
	if t.MaxAttempts < 0 {
		errs = append(errs, "max_attempts: must be 0 (queue default) or more, got "+strconv.Itoa(t.MaxAttempts))
	}
	if t.TTL < 0 {
		errs = append(errs, "ttl: must be positive")
	}
	if !t.Deadline.IsZero() && t.TTL > 0 {
		errs = append(errs, "deadline, ttl: set one or the other")
	}
	errs = append(errs, t.storableErrs()...)
	if len(errs) == 0 {
		return nil
	}
	sort.Strings(errs)
	return &TaskError{ID: t.ID, Code: CodeInvalidTask, Msg: strings.Join(errs, "; ")}
}

// The limits of what every Store holds (memory, store/sqlite,
// store/postgres), checked with the task (storableErrs) so that no door
// publishes, submits or pays for a task its store then refuses.
const (
	// MaxIDBytes bounds Task.ID and Task.Tenant: PostgreSQL indexes both
	// (a unique index on the id), and an index entry holds at most 2704
	// bytes (2690 of text that does not compress).
	MaxIDBytes = 2048
	// MaxParamsBytes bounds the names and values of Task.Params together:
	// the stores keep them as one JSON text, which escapes a control byte
	// in 6, and a text holds at most 1 GB in SQLite and PostgreSQL.
	MaxParamsBytes = 128 << 20
)

// storableErrs is what a store could not hold as given: a NUL byte
// (PostgreSQL text holds none) or invalid UTF-8 (PostgreSQL refuses it;
// the stores' JSON of Params would turn it into U+FFFD, another task than
// the one submitted) in any text of the task, and an id or tenant over
// MaxIDBytes, params over MaxParamsBytes.
func (t Task) storableErrs() []string {
	var errs []string
	text := func(field, s string) {
		if strings.IndexByte(s, 0) >= 0 {
			errs = append(errs, field+": holds a NUL byte: send text without NUL bytes")
		} else if !utf8.ValidString(s) {
			errs = append(errs, field+": is not valid UTF-8: send UTF-8 text")
		}
	}
	text("id", t.ID)
	text("method", t.Method)
	text("tenant", t.Tenant)
	text("proxy", t.Proxy)
	text("proxytype", t.ProxyType)
	text("pingback", t.Pingback)
	size := 0
	for _, k := range slices.Sorted(maps.Keys(t.Params)) {
		v := t.Params[k]
		size += len(k) + len(v)
		// A name that is not text is shown as Go quotes it.
		text(fmt.Sprintf("params: name %q", k), k)
		text("params."+k, v)
	}
	for _, f := range []struct{ name, v string }{{"id", t.ID}, {"tenant", t.Tenant}} {
		if len(f.v) > MaxIDBytes {
			errs = append(errs, fmt.Sprintf("%s: %d bytes; at most %d (the stores index it): use a shorter %s", f.name, len(f.v), MaxIDBytes, f.name))
		}
	}
	if size > MaxParamsBytes {
		errs = append(errs, fmt.Sprintf("params: %d bytes in names and values; at most %d: send a smaller task", size, MaxParamsBytes))
	}
	return errs
}
