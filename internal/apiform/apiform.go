// Package apiform reads one in.php or res.php request of the
// 2captcha-style protocol into a field set, whichever form carries it: the
// query string, an urlencoded body, a multipart body (with an optional
// "file" upload) or a JSON object body. captchaq's HTTP front and its
// provider simulator both read requests through Parse, so the two cannot
// drift apart.
//
// Bodies are read as the real services read what real clients send: a
// JSON object under application/json or under any other type when the
// body is one (the npm client 2captcha posts its object as node-fetch's
// default text/plain); an urlencoded body under its type or with no
// Content-Type at all (puppeteer-extra-plugin-recaptcha posts one so,
// chunked); multipart by its type. A body of another type that is not a
// JSON object carries no fields. Chunked bodies are read as any other.
//
// Field names are matched without regard to case ("userAgent" and
// "useragent" are one field), as clients differ. When a field comes twice,
// the body's value wins over the query's, and the first of several values
// is taken.
//
// Reading is bounded: a key in the query string is checked (Options.KeyOK)
// before any byte of the body is read, and the body is read through
// http.MaxBytesReader, so neither a wrong key nor a huge body costs more
// than Options.MaxBody bytes. A JSON body is scanned before any of it is
// decoded: more than Options.MaxFields values (net/url's cap on a query's
// fields) or a string longer than Options.MaxString refuses it, so its
// decoding costs a bounded multiple of its size, not one map entry per
// few bytes.
package apiform

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Errors Parse returns; the Request returned with them holds the fields
// read so far (the query's at least), so the answer can still honour
// json=1 and header_acao=1.
var (
	// ErrWrongKey: Options.KeyOK refused the key given in the query
	// string. The body was not read.
	ErrWrongKey = errors.New("apiform: wrong key")
	// ErrTooBig: the body is over Options.MaxBody bytes.
	ErrTooBig = errors.New("apiform: request body too large")
	// ErrTooManyFields: a JSON body holds more than Options.MaxFields
	// values. None was decoded.
	ErrTooManyFields = errors.New("apiform: too many fields")
	// ErrFieldTooLong: a JSON body holds a string longer than
	// Options.MaxString. None was decoded.
	ErrFieldTooLong = errors.New("apiform: field too long")
)

// Options bound and guard the reading.
type Options struct {
	// MaxBody is the most body bytes read; a larger body is ErrTooBig.
	// Zero means DefaultMaxBody.
	MaxBody int64
	// KeyOK, when set, is asked about a key found in the query string
	// before the body is read; false ends the reading with ErrWrongKey.
	// A key given only in the body is the caller's to check.
	KeyOK func(key string) bool
	// MaxFields is the most values a JSON body may hold: its members and
	// array elements at every depth. More is ErrTooManyFields. Zero means
	// DefaultMaxFields.
	MaxFields int
	// MaxString, above zero, is the longest string (a name or a value) a
	// JSON body may hold, in bytes with an escape counted as one. Longer
	// is ErrFieldTooLong. Zero means no limit but MaxBody.
	MaxString int
}

// DefaultMaxBody is Options.MaxBody's default: far above any captcha image.
const DefaultMaxBody = 4 << 20

// DefaultMaxFields is Options.MaxFields's default, net/url's cap on the
// fields of a query (and so of an urlencoded body): a request of the
// protocol has a few dozen.
const DefaultMaxFields = 10000

// maxDepth is how deep a JSON body may nest, encoding/json's own limit.
const maxDepth = 10000

// Request is one call's fields.
type Request struct {
	fields map[string]string // lower-cased name → value
	names  map[string]string // lower-cased name → the name as given
	// File is the multipart part named "file" (method=post's image), read
	// whole; HasFile says there was one, even empty.
	File    []byte
	HasFile bool
	// JSON: json=1 (or true) asked for JSON answers.
	JSON bool
	// ACAO: header_acao=1 asked for Access-Control-Allow-Origin: * on the
	// answer.
	ACAO bool
}

// Get returns a field's value by its name in any case, "" when absent.
func (q *Request) Get(name string) string { return q.fields[strings.ToLower(name)] }

// Has says whether the field was given (even empty).
func (q *Request) Has(name string) bool {
	_, ok := q.fields[strings.ToLower(name)]
	return ok
}

// Fields returns the fields by lower-cased name (the caller may keep it;
// it is a copy).
func (q *Request) Fields() map[string]string {
	out := make(map[string]string, len(q.fields))
	for k, v := range q.fields {
		out[k] = v
	}
	return out
}

// Named returns the fields under the names the client gave them (the
// first spelling seen for each), for passing them on unchanged.
func (q *Request) Named() map[string]string {
	out := make(map[string]string, len(q.fields))
	for k, v := range q.fields {
		out[q.names[k]] = v
	}
	return out
}

// set records a field unless one of that name (in any case) is already
// there: the first value wins.
func (q *Request) set(name, value string) {
	ln := strings.ToLower(name)
	if _, dup := q.fields[ln]; dup {
		return
	}
	q.fields[ln] = value
	q.names[ln] = name
}

// Parse reads r's fields. See the package doc for the order and the
// bounds. The Request is never nil.
func Parse(w http.ResponseWriter, r *http.Request, o Options) (*Request, error) {
	if o.MaxBody <= 0 {
		o.MaxBody = DefaultMaxBody
	}
	if o.MaxFields <= 0 {
		o.MaxFields = DefaultMaxFields
	}
	q := &Request{fields: map[string]string{}, names: map[string]string{}}
	query := r.URL.Query()
	if o.KeyOK != nil {
		if key := firstFold(query, "key"); key != nil && !o.KeyOK(*key) {
			q.addValues(query)
			q.flags()
			return q, ErrWrongKey
		}
	}
	err := q.readBody(w, r, o)
	q.addValues(query)
	q.flags()
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return q, fmt.Errorf("%w: over %d bytes", ErrTooBig, mbe.Limit)
	}
	return q, err
}

func (q *Request) flags() {
	q.JSON = q.fields["json"] == "1" || strings.EqualFold(q.fields["json"], "true")
	q.ACAO = q.fields["header_acao"] == "1" || strings.EqualFold(q.fields["header_acao"], "true")
}

// QueryKey is the key r's query string gives, named in any case.
func QueryKey(r *http.Request) (string, bool) {
	if k := firstFold(r.URL.Query(), "key"); k != nil {
		return *k, true
	}
	return "", false
}

// firstFold finds a query field by name in any case.
func firstFold(v map[string][]string, name string) *string {
	for k, vs := range v {
		if strings.EqualFold(k, name) && len(vs) > 0 {
			return &vs[0]
		}
	}
	return nil
}

func (q *Request) addValues(v map[string][]string) {
	// Sorted for a stable choice between spellings of one name.
	for _, k := range sortedKeys(v) {
		if vs := v[k]; len(vs) > 0 {
			q.set(k, vs[0])
		}
	}
}

// readBody reads the body, at most max bytes: multipart by its type; a
// JSON object under application/json, or under any other type (or none)
// when the body is one (node-fetch posts a string as text/plain); an
// urlencoded body under its type or under none (Node's https.request
// posts one without a Content-Type, chunked). Another type's body that is
// not a JSON object carries no fields: the query alone counts.
func (q *Request) readBody(w http.ResponseWriter, r *http.Request, o Options) error {
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	r.Body = http.MaxBytesReader(w, r.Body, o.MaxBody)
	ct := r.Header.Get("Content-Type")
	if ct != "" {
		var err error
		if ct, _, err = mime.ParseMediaType(ct); err != nil {
			ct = "application/octet-stream" // unreadable: some other type
		}
	}
	if ct == "multipart/form-data" {
		return q.readMultipart(r, o.MaxBody)
	}
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	switch {
	case ct == "application/json" || jsonObject(raw):
		return q.readJSON(raw, o)
	case ct == "application/x-www-form-urlencoded" || ct == "":
		v, err := url.ParseQuery(string(raw))
		if err != nil {
			return fmt.Errorf("body: not an urlencoded form (%v); send key=…&method=…", err)
		}
		q.addValues(v)
	}
	return nil
}

// jsonObject says whether raw looks like a JSON object: its first
// non-space byte is '{'. It is then read as one whatever its type, and an
// error says what is wrong with it.
func jsonObject(raw []byte) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && t[0] == '{'
}

// readMultipart reads a multipart body's fields and its first part named
// "file" (in any case).
func (q *Request) readMultipart(r *http.Request, max int64) error {
	if err := r.ParseMultipartForm(max); err != nil {
		return err
	}
	defer r.MultipartForm.RemoveAll()
	q.addValues(r.MultipartForm.Value)
	for _, name := range sortedKeys(r.MultipartForm.File) {
		fhs := r.MultipartForm.File[name]
		if !strings.EqualFold(name, "file") || len(fhs) == 0 {
			continue
		}
		f, err := fhs[0].Open()
		if err != nil {
			return err
		}
		q.File, err = io.ReadAll(f)
		f.Close()
		if err != nil {
			return err
		}
		q.HasFile = true
		break
	}
	return nil
}

// readJSON reads a JSON object: strings as they are, numbers as written,
// booleans as 1 or 0 (the protocol's flags), null as absent, and arrays or
// objects as their JSON text.
func (q *Request) readJSON(raw []byte, o Options) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	if err := scanJSON(raw, o.MaxFields, o.MaxString); err != nil {
		return err
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return fmt.Errorf("body: not a JSON object of fields (%v); send {\"key\":\"…\",\"method\":\"…\",…}", err)
	}
	for _, k := range sortedKeys(obj) {
		v := bytes.TrimSpace(obj[k])
		switch {
		case len(v) == 0 || string(v) == "null":
		case v[0] == '"':
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				return fmt.Errorf("body: field %s: %v", strconv.Quote(k), err)
			}
			q.set(k, s)
		case string(v) == "true":
			q.set(k, "1")
		case string(v) == "false":
			q.set(k, "0")
		case v[0] == '{' || v[0] == '[':
			var b bytes.Buffer
			if err := json.Compact(&b, v); err != nil {
				return fmt.Errorf("body: field %s: %v", strconv.Quote(k), err)
			}
			q.set(k, b.String())
		default: // a number, as written
			q.set(k, string(v))
		}
	}
	return nil
}

// ScanJSON is the walk a JSON body gets before it is decoded (see Parse),
// for a body that is decoded otherwise: it refuses raw on its first value
// past maxFields (ErrTooManyFields) or string longer than maxString
// (ErrFieldTooLong; 0: any length), having decoded nothing.
func ScanJSON(raw []byte, maxFields, maxString int) error { return scanJSON(raw, maxFields, maxString) }

// scanJSON walks raw's tokens, decoding nothing and allocating only its
// stack of open objects and arrays, and refuses raw on its first value
// past maxFields (ErrTooManyFields) or string longer than maxString
// (ErrFieldTooLong, naming the field by its path). Whether raw is valid
// JSON is left to the decoder: the walk only bounds what decoding it
// costs.
func scanJSON(raw []byte, maxFields, maxString int) error {
	var stack []jsonOpen
	fields := 0
	expect := false // a member name (object) or an element (array) may start here
	count := func() error {
		if fields++; fields > maxFields {
			return fmt.Errorf("%w: the body holds more than %d fields (values of objects and arrays); "+
				"send only the request's fields", ErrTooManyFields, maxFields)
		}
		return nil
	}
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch c {
		case ' ', '\t', '\n', '\r', ':':
			continue
		case '{', '[':
			if expect && stack[len(stack)-1].array {
				if err := count(); err != nil {
					return err
				}
			}
			if len(stack) == maxDepth {
				return fmt.Errorf("body: not a JSON object of fields (nested over %d deep)", maxDepth)
			}
			stack = append(stack, jsonOpen{array: c == '['})
			expect = true
		case '}', ']':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
			expect = false
		case ',':
			expect = len(stack) > 0
		case '"':
			start := i + 1
			n := 0 // its length decoded, an escape counted as one byte
			for i++; i < len(raw) && raw[i] != '"'; i++ {
				if raw[i] == '\\' {
					i++
				}
				n++
			}
			name := expect && len(stack) > 0 && !stack[len(stack)-1].array
			if expect && len(stack) > 0 {
				if err := count(); err != nil {
					return err
				}
			}
			if name {
				stack[len(stack)-1].key = raw[start:min(i, len(raw))]
			}
			if maxString > 0 && n > maxString {
				return fmt.Errorf("%w: field %s is %d bytes, over the %d a field may be", ErrFieldTooLong, fieldPath(stack, name), n, maxString)
			}
			expect = false
		default: // a number, true, false, null
			if expect && len(stack) > 0 && stack[len(stack)-1].array {
				if err := count(); err != nil {
					return err
				}
			}
			expect = false
		}
	}
	return nil
}

// jsonOpen is an object or array scanJSON is inside.
type jsonOpen struct {
	array bool
	key   []byte // an object's current member name, as written
}

// fieldPath names the string scanJSON is at by the members it is in
// ("task.body"), each name cut to 40 bytes: the names are the client's.
func fieldPath(stack []jsonOpen, name bool) string {
	var b strings.Builder
	for _, o := range stack {
		if o.array {
			b.WriteString("[]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.Write(o.key[:min(len(o.key), 40)])
	}
	if name {
		b.WriteString(" (its name)")
	}
	return strconv.Quote(b.String())
}

// Preflight answers a CORS preflight (OPTIONS) for in.php and res.php, as
// browser clients send before a JSON POST, and reports whether it did.
func Preflight(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodOptions {
		return false
	}
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", "*")
	h.Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
	h.Set("Access-Control-Allow-Headers", "Content-Type")
	h.Set("Access-Control-Max-Age", "86400")
	w.WriteHeader(http.StatusNoContent)
	return true
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
