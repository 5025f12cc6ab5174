package provider

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// ReservedParams are the names in.php reads as the request's own, not the
// task's: a param a provider would read as one of these names would
// override the key, the method or where answers go. A provider reads names
// in any letter case, and one that parses forms as PHP does reads more
// spellings as one name (FoldParamName): each is refused. action, id and
// ids are res.php's and pass: tasks use action (reCAPTCHA v3, Turnstile).
var ReservedParams = []string{"key", "method", "json", "soft_id", "pingback", "header_acao"}

// FoldParamName is the name a provider may read a form field name as: in
// lower case, cut at a NUL byte (C code stops there), without the spaces
// around it, and with the rest folded as PHP registers a request variable:
// ' ' and '.' read as '_', and a '[' with a ']' after it starts an array
// index (the name is the text before it, the index is kept as given),
// while a '[' with none reads as '_' and ends the folding. "Soft.ID",
// " soft_id", "soft id\x00x" and "soft_id[]" all name soft_id.
func FoldParamName(name string) string {
	if i := strings.IndexByte(name, 0); i >= 0 {
		name = name[:i]
	}
	name = strings.ToLower(strings.TrimSpace(name))
	b := []byte(name)
	for i, c := range b {
		switch c {
		case ' ', '.':
			b[i] = '_'
		case '[':
			if !strings.Contains(name[i+1:], "]") {
				b[i] = '_'
			}
			return string(b)
		}
	}
	return string(b)
}

// foldedBase is the variable a folded name sets: the text before an array
// index.
func foldedBase(folded string) string {
	if i := strings.IndexByte(folded, '['); i >= 0 {
		return folded[:i]
	}
	return folded
}

// IsReservedParam reports whether a provider may read a param named name
// as one of ReservedParams (FoldParamName), and which.
func IsReservedParam(name string) (string, bool) {
	base := foldedBase(FoldParamName(name))
	return base, slices.Contains(ReservedParams, base)
}

// paramField is the field name of a param in a ValidationError, quoted
// when it holds a byte that would not print (a NUL, a line break).
func paramField(name string) string {
	for _, r := range name {
		if !strconv.IsPrint(r) {
			return "params." + strconv.Quote(name)
		}
	}
	return "params." + name
}

// checkReserved refuses params a provider may read as a protocol field
// (IsReservedParam), spellings of file and body other than the lower-case
// one (which alone may carry them), and one name given twice in two
// spellings a provider may read as one (it takes one of them, maybe not
// the one checked here): "pageurl" beside "PageURL" or "page.url" beside
// "page_url", and a name beside an array of that name ("data" and
// "data[blob]").
func checkReserved(t Task) error {
	seen := make(map[string]string, len(t.Params))
	bases := make(map[string]string, len(t.Params))
	for _, k := range slices.Sorted(maps.Keys(t.Params)) {
		fk := FoldParamName(k)
		if base, ok := IsReservedParam(k); ok {
			how := ""
			if k != base {
				how = fmt.Sprintf(" a provider reads %q as %q:", k, base)
			}
			return &ValidationError{Field: paramField(k), Reason: fmt.Sprintf("%s is the protocol's own field, not a task param;%s reserved in any letter case and in every spelling a form parser reads as one of %s ('.', ' ' or '[' for '_', spaces around, text after a NUL); remove it", strconv.Quote(k), how, strings.Join(ReservedParams, ", "))}
		}
		first, dup := seen[fk]
		if !dup {
			// A plain name and an array of that name set one variable.
			if base := foldedBase(fk); base != fk {
				first, dup = seen[base]
			} else {
				first, dup = bases[fk]
			}
		}
		if dup {
			return &ValidationError{Field: paramField(k), Reason: fmt.Sprintf("%q and %q name one field (a provider reads names in any letter case, '.' and ' ' as '_', without spaces around): give it once", first, k)}
		}
		seen[fk] = k
		if base := foldedBase(fk); base != fk {
			if _, ok := bases[base]; !ok {
				bases[base] = k
			}
		}
		if (fk == "file" || fk == "body") && k != fk {
			return &ValidationError{Field: paramField(k), Reason: fmt.Sprintf("write %q in lower case, with nothing around it: %q", k, fk)}
		}
	}
	return nil
}
