package captchaqtype

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// taskFields are the JSON fields a task line may carry.
var taskFields = []string{"id", "method", "params", "priority", "tenant", "deadline", "ttl", "max_attempts", "proxy", "proxytype", "pingback"}

// UnmarshalJSON reads one task line leniently where users differ and
// strictly where a typo would silently change meaning: params values may
// be strings, numbers or booleans (true becomes "1", false "0"), deadline
// is RFC 3339, ttl is a Go duration ("90s") or a number of seconds, and an
// unknown field is an error that names it.
func (t *Task) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("task: not a JSON object: %w", err)
	}
	for k := range raw {
		if !contains(taskFields, k) {
			return fmt.Errorf("task: unknown field %q (known fields: %s)", k, strings.Join(taskFields, ", "))
		}
	}
	var out Task
	str := func(name string, dst *string) error {
		v, ok := raw[name]
		if !ok || isNull(v) {
			return nil
		}
		if err := json.Unmarshal(v, dst); err != nil {
			return fmt.Errorf("%s: must be a string, got %s", name, v)
		}
		return nil
	}
	integer := func(name string, dst *int) error {
		v, ok := raw[name]
		if !ok || isNull(v) {
			return nil
		}
		if err := json.Unmarshal(v, dst); err != nil {
			return fmt.Errorf("%s: must be a whole number, got %s", name, v)
		}
		return nil
	}
	for _, f := range []error{
		str("id", &out.ID), str("method", &out.Method), str("tenant", &out.Tenant),
		str("proxy", &out.Proxy), str("proxytype", &out.ProxyType), str("pingback", &out.Pingback),
		integer("priority", &out.Priority), integer("max_attempts", &out.MaxAttempts),
	} {
		if f != nil {
			return f
		}
	}
	if v, ok := raw["params"]; ok && !isNull(v) {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(v, &m); err != nil {
			return fmt.Errorf("params: must be an object of field names to values, got %s", v)
		}
		out.Params = make(map[string]string, len(m))
		for k, pv := range m {
			s, err := paramString(pv)
			if err != nil {
				return fmt.Errorf("params.%s: %w", k, err)
			}
			out.Params[k] = s
		}
	}
	if v, ok := raw["deadline"]; ok && !isNull(v) {
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return fmt.Errorf("deadline: must be an RFC 3339 time string such as \"2026-01-02T15:04:05Z\", got %s", v)
		}
		d, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return fmt.Errorf("deadline: %q is not RFC 3339 (use e.g. \"2026-01-02T15:04:05Z\")", s)
		}
		out.Deadline = d
	}
	if v, ok := raw["ttl"]; ok && !isNull(v) {
		d, err := parseTTL(v)
		if err != nil {
			return err
		}
		out.TTL = d
	}
	*t = out
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func isNull(v json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(v), []byte("null")) }

// paramString turns a JSON param value into the provider's string form.
func paramString(v json.RawMessage) (string, error) {
	var x any
	d := json.NewDecoder(bytes.NewReader(v))
	d.UseNumber()
	if err := d.Decode(&x); err != nil {
		return "", err
	}
	switch x := x.(type) {
	case string:
		return x, nil
	case json.Number:
		return x.String(), nil
	case bool:
		if x {
			return "1", nil
		}
		return "0", nil
	}
	return "", fmt.Errorf("must be a string, number or boolean, got %s", v)
}

func parseTTL(v json.RawMessage) (time.Duration, error) {
	const hint = `ttl: use a duration such as "90s" or "5m", or a number of seconds`
	var s string
	if err := json.Unmarshal(v, &s); err == nil {
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0, fmt.Errorf("%s; got %q", hint, s)
		}
		if d <= 0 {
			return 0, fmt.Errorf("ttl: must be positive, got %q", s)
		}
		return d, nil
	}
	var f float64
	if err := json.Unmarshal(v, &f); err != nil {
		return 0, fmt.Errorf("%s; got %s", hint, v)
	}
	if f <= 0 || math.IsInf(f, 0) || f > math.MaxInt64/float64(time.Second) {
		return 0, fmt.Errorf("ttl: must be a positive number of seconds, got %s", v)
	}
	return time.Duration(f * float64(time.Second)), nil
}

// ParseTask reads one line of task JSONL. Errors name the field:
// "ttl: use a duration ...", "priority: must be a whole number". It reads
// and does not validate: the task is validated once, by the door it is
// submitted at (Task.Validate, captchaq.Queue.Validate: see validate.go).
func ParseTask(line []byte) (Task, error) {
	var t Task
	if err := json.Unmarshal(line, &t); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return Task{}, fmt.Errorf("task: invalid JSON at byte %d: %v", se.Offset, se)
		}
		return Task{}, err
	}
	return t, nil
}
