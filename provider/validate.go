package provider

import (
	"maps"
	"slices"
	"strings"

	"github.com/captchaq/captchaq/internal/checks"
)

// ValidationError says which field of a task is wrong and how to fix it.
// errors.Is(err, ErrInvalidTask) is true for every *ValidationError.
type ValidationError struct {
	Field  string // "method", "params.pageurl", ...
	Reason string // what is wrong and the fix
	// Code is the in.php answer for it (ERROR_PAGEURL,
	// ERROR_TOO_BIG_CAPTCHA_FILESIZE, ...) where the rule that refused
	// the task names one; empty: ProtocolCode decides by the field.
	Code string
}

func (e *ValidationError) Error() string { return e.Field + ": " + e.Reason }

// ProtocolCode is the in.php error code a service of the protocol
// answers for this refusal: the rule's own Code, else the field's
// (ERROR_GOOGLEKEY, ERROR_PAGEURL, ERROR_BAD_PROXY,
// ERROR_IMAGE_TYPE_NOT_SUPPORTED for an image that cannot be read), else
// ERROR_BAD_PARAMETERS.
func (e *ValidationError) ProtocolCode() string {
	if e.Code != "" {
		return e.Code
	}
	switch strings.TrimPrefix(e.Field, "params.") {
	case "googlekey":
		return "ERROR_GOOGLEKEY"
	case "pageurl":
		return "ERROR_PAGEURL"
	case "proxy":
		return "ERROR_BAD_PROXY"
	case "body", "file":
		return "ERROR_IMAGE_TYPE_NOT_SUPPORTED"
	}
	return "ERROR_BAD_PARAMETERS"
}

// Is makes every ValidationError match ErrInvalidTask and ErrClassTask.
func (e *ValidationError) Is(target error) bool {
	return target == ErrInvalidTask || target == ErrClassTask
}

// Validate checks t against the method-spec table for CaptchaAI: a known,
// supported method, every required field present, and each value well formed. It
// makes no request. Errors are a *ValidationError (errors.Is
// ErrInvalidTask) or an *Error matching ErrUnsupportedType.
func (t Task) Validate() error { return t.ValidateFor(CaptchaAIMethods) }

// Checked is a task that passed validation (Task.Check). What the check
// found travels with it: its kind and, for a "post" task, its decoded
// image, so it is not validated, nor its image decoded, again on its way
// to the provider (Client.SubmitChecked).
type Checked struct {
	Task
	Kind  Kind
	route string // Task.RouteMethod
	file  []byte // the decoded image of a "post" task
}

// Check validates t as ValidateFor does and returns it checked, with
// Params of its own: a change to t's map after Check does not reach it.
func (t Task) Check(supported []string) (Checked, error) {
	k, image, err := t.validate(supported)
	if err != nil {
		return Checked{}, err
	}
	c := Checked{Task: Task{Method: t.Method, Params: maps.Clone(t.Params)}, Kind: k, route: t.RouteMethod()}
	if t.Method == "post" {
		c.file = image // decoded once, by the check
	}
	return c, nil
}

// Unchecked carries t as a Checked that says it was not checked: a
// Client's SubmitChecked validates it as Submit does.
func Unchecked(t Task) Checked { return Checked{Task: t} }

// CheckedFor reports whether c was checked and its method is one of
// supported: then it needs no validation for a provider that solves
// them.
func (c Checked) CheckedFor(supported []string) bool {
	return c.route != "" && slices.Contains(supported, c.route)
}

// ValidateFor is Validate for a provider that solves the given methods
// (names as RouteMethod gives them).
func (t Task) ValidateFor(supported []string) error {
	_, _, err := t.validate(supported)
	return err
}

// validate is the one body of ValidateFor and Check: it returns t's kind
// and, for an image task, its image decoded.
func (t Task) validate(supported []string) (Kind, []byte, error) {
	checks.Count(checks.Provider, t.Params)
	k, err := t.KindFor(supported)
	if err != nil {
		return "", nil, err
	}
	if err := checkReserved(t); err != nil {
		return "", nil, err
	}
	spec := specs[k]
	for _, f := range spec.required {
		v, ok := param(t.Params, f.name)
		if !ok || strings.TrimSpace(v) == "" {
			return "", nil, &ValidationError{Field: "params." + f.name, Reason: "required for " + string(k) + "; " + f.hint}
		}
	}
	for _, f := range append(slices.Clip(spec.required), spec.optional...) {
		v, ok := param(t.Params, f.name)
		if !ok || f.check == nil {
			continue
		}
		if strings.TrimSpace(v) == "" {
			continue // required ones are non-empty by now; empty optional ones are not sent
		}
		if reason := f.check(v); reason != "" {
			return "", nil, &ValidationError{Field: "params." + f.name, Reason: reason}
		}
	}
	// Proxy fields on kinds that take none are not rejected: some services
	// accept them everywhere. But a proxytype needs a proxy.
	if t.Params["proxytype"] != "" && strings.TrimSpace(t.Params["proxy"]) == "" {
		return "", nil, &ValidationError{Field: "params.proxy", Reason: "required when proxytype is set; " + fProxy.hint}
	}
	var image []byte
	if k == KindImage || k == KindGrid {
		if image, err = validateImage(t); err != nil {
			return "", nil, err
		}
	}
	if spec.extra != nil {
		if err := spec.extra(t); err != nil {
			return "", nil, err
		}
	}
	return k, image, nil
}

// param is the value of the param named name in any letter case, as a
// provider reads it (checkReserved refuses two spellings of one name).
func param(p map[string]string, name string) (string, bool) {
	if v, ok := p[name]; ok {
		return v, true
	}
	for k, v := range p {
		if strings.EqualFold(k, name) {
			return v, true
		}
	}
	return "", false
}
