package captchaq

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/captchaq/captchaq/internal/checkspy"
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
// A task is validated once on its way, at the door (checkspy counts it in
// the tests): ParseTask reads a line without validating it, and what the
// check found (provider.Checked: the provider task, a post task's image
// decoded) is what the queue carries to the provider, which does not
// validate it again.
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
	if len(providers) == 0 {
		return t.checkedFor(provider.CaptchaAIMethods)
	}
	methodsOf := func(p ProviderConfig) []string {
		if p.Methods == nil {
			return provider.CommonMethods
		}
		return p.Methods
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
	pt, err := t.checkedFor(methods)
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
	checkspy.Count(checkspy.Queue, t.Params)
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
	if len(errs) == 0 {
		return nil
	}
	sort.Strings(errs)
	return &TaskError{ID: t.ID, Code: CodeInvalidTask, Msg: strings.Join(errs, "; ")}
}
