package createtask

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// folded is a JSON object read with its names folded to lower case.
type folded map[string]foldedValue

type foldedValue struct {
	name string // as given
	raw  json.RawMessage
}

// foldObject reads a JSON object; a name given twice in two letter cases
// is refused (which one a service reads is anyone's guess).
func foldObject(raw []byte, what string) (folded, *Fault) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, fault("ERROR_BAD_PARAMETERS", fmt.Sprintf("%s: must be a JSON object, got %s", what, short(raw)))
	}
	out := make(folded, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		lk := strings.ToLower(k)
		if prev, dup := out[lk]; dup {
			return nil, fault("ERROR_BAD_PARAMETERS", fmt.Sprintf("%s.%s: %q and %q name one field (names are read in any letter case): give it once", what, k, prev.name, k))
		}
		out[lk] = foldedValue{name: k, raw: m[k]}
	}
	return out, nil
}

func (o folded) get(name string) (string, json.RawMessage, bool) {
	v, ok := o[strings.ToLower(name)]
	return v.name, v.raw, ok
}

// field finds fd under its name or an alias.
func (o folded) field(fd field) (string, json.RawMessage, bool) {
	if n, v, ok := o.get(fd.wire); ok {
		return n, v, true
	}
	for _, a := range fd.alias {
		if n, v, ok := o.get(a); ok {
			return n, v, true
		}
	}
	return "", nil, false
}

// str is a string field's value.
func (o folded) str(name string) (string, bool) {
	_, v, ok := o.get(name)
	if !ok {
		return "", false
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return "", false
	}
	return s, true
}

// text is a string or number field's text.
func (o folded) text(name string) (string, bool) {
	n, v, ok := o.get(name)
	if !ok {
		return "", false
	}
	s, f := convert(n, v, vString)
	return strings.TrimSpace(s), f == nil
}
