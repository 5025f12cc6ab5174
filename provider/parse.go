package provider

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

// The answer parsers are pure functions of (HTTP status, body) so they can
// be fuzzed; the client only moves bytes.

const notReady = "CAPCHA_NOT_READY"

// envelope is the json=1 answer. status and request come as numbers or
// strings depending on the server; request can also be an object (GeeTest)
// or an array (BLS).
type envelope struct {
	status    int
	request   json.RawMessage
	errorText string
	extra     bool // fields beyond status, request and error_text
}

func parseEnvelope(body []byte) (envelope, bool) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return envelope{}, false
	}
	st, ok := m["status"]
	if !ok {
		return envelope{}, false
	}
	var e envelope
	switch s := strings.Trim(string(bytes.TrimSpace(st)), `"`); s {
	case "1", "true":
		e.status = 1
	case "0", "false":
		e.status = 0
	default:
		return envelope{}, false
	}
	e.request = m["request"]
	if t, ok := m["error_text"]; ok {
		e.errorText, _ = jsonString(t)
	}
	for k := range m {
		if k != "status" && k != "request" && k != "error_text" {
			e.extra = true
		}
	}
	return e, true
}

// jsonString returns a JSON string's value, or a number's text.
func jsonString(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", false
	}
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return "", false
		}
		return s, true
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		var n json.Number
		if json.Unmarshal(raw, &n) != nil {
			return "", false
		}
		return n.String(), true
	}
	return "", false
}

// transportFailure classifies an HTTP status that carries no answer.
func transportFailure(op string, status int, body []byte) *Error {
	if status >= 500 {
		return &Error{Op: op, Code: CodeHTTP5xx, Class: ClassTransient, HTTPStatus: status,
			Text: "HTTP " + strconv.Itoa(status) + " " + http.StatusText(status)}
	}
	e := badAnswer(op, body)
	e.HTTPStatus = status
	return e
}

func badAnswer(op string, body []byte) *Error {
	return &Error{Op: op, Code: CodeBadAnswer, Class: ClassTransient,
		Text: "unexpected answer " + quoteShort(string(bytes.TrimSpace(body)))}
}

// looksLikeCode reports whether a plain answer is a protocol code rather
// than a value.
func looksLikeCode(s string) bool {
	if _, ok := codeTable[s]; ok {
		return true
	}
	return strings.HasPrefix(s, "ERROR_") || strings.HasPrefix(s, "ERROR: ") || s == notReady
}

// validID reports whether id can be sent back in id= and ids= lists.
func validID(id string) bool {
	if id == "" || len(id) > 100 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if c <= ' ' || c >= 0x7f || c == ',' || c == '|' || c == '&' || c == '#' {
			return false
		}
	}
	return true
}

// parseSubmitAnswer reads in.php's answer: the captcha id, or the error.
// Exactly one of the results is set.
func parseSubmitAnswer(status int, body []byte) (string, *Error) {
	const op = "submit"
	if status >= 500 {
		return "", transportFailure(op, status, body)
	}
	trimmed := bytes.TrimSpace(body)
	var id string
	if env, ok := parseEnvelope(trimmed); ok {
		req, ok := jsonString(env.request)
		switch {
		case !ok:
			return "", badAnswer(op, body)
		case env.status == 1:
			id = req
		default:
			return "", Classify(op, req, env.errorText)
		}
	} else {
		s := string(trimmed)
		switch {
		case strings.HasPrefix(s, "OK|"):
			id = s[3:]
		case looksLikeCode(s):
			return "", Classify(op, s, "")
		default:
			return "", transportFailure(op, status, body)
		}
	}
	id = strings.TrimSpace(id)
	if !validID(id) {
		return "", badAnswer(op, body)
	}
	// An id is an accepted task whatever the HTTP status says: keep it, a
	// second submit would pay twice.
	return id, nil
}

// pollOutcome is one id's state as read from an answer.
type pollOutcome struct {
	ready  bool
	answer Answer
	idErr  *Error // the task failed (unsolvable, wrong id, ...)
	reqErr *Error // the request failed (network, key, rate limit, ...)
}

// bulkResult is o as an ids= request answered it for id.
func (o pollOutcome) bulkResult(id string) PollResult {
	r := o.result(id)
	r.Bulk = true
	return r
}

// perID reports whether an error belongs to one task rather than to the
// request or the account.
func perID(e *Error) bool { return e.Class == ClassTask || e.Class == ClassUnsolvable }

// codeOutcome turns a code seen in a poll answer into an outcome.
func codeOutcome(code, text string) pollOutcome {
	if code == notReady || code == "CAPTCHA_NOT_READY" {
		return pollOutcome{}
	}
	e := Classify("poll", code, text)
	if perID(e) {
		return pollOutcome{idErr: e}
	}
	return pollOutcome{reqErr: e}
}

// parsePollAnswer reads res.php's answer for one id.
func parsePollAnswer(status int, body []byte) pollOutcome {
	const op = "poll"
	if status >= 500 {
		return pollOutcome{reqErr: transportFailure(op, status, body)}
	}
	trimmed := bytes.TrimSpace(body)
	if env, ok := parseEnvelope(trimmed); ok {
		if env.status == 0 {
			code, ok := jsonString(env.request)
			if !ok {
				return pollOutcome{reqErr: badAnswer(op, body)}
			}
			return codeOutcome(strings.TrimSpace(code), env.errorText)
		}
		a, ok := answerFromJSON(env.request)
		if !ok {
			return pollOutcome{reqErr: badAnswer(op, body)}
		}
		if env.extra {
			// Extra fields (a Cloudflare user_agent, ...) belong with the
			// answer: keep the whole document as Raw.
			a.Raw = string(trimmed)
			a.JSON = json.RawMessage(a.Raw)
			if tok, found := findClearance(a.JSON); found {
				a.Token = tok
			}
		}
		return pollOutcome{ready: true, answer: a}
	}
	s := string(trimmed)
	switch {
	case strings.HasPrefix(s, "OK|") && len(s) > 3:
		return pollOutcome{ready: true, answer: answerFromText(s[3:])}
	case looksLikeCode(s):
		return codeOutcome(s, "")
	}
	return pollOutcome{reqErr: transportFailure(op, status, body)}
}

// answerFromJSON makes an Answer from the request field of a solved answer:
// a string (token, text, or a JSON document in a string), a number, an
// object or an array.
func answerFromJSON(raw json.RawMessage) (Answer, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return Answer{}, false
	}
	if s, ok := jsonString(raw); ok {
		if strings.TrimSpace(s) == "" {
			return Answer{}, false
		}
		return answerFromText(s), true
	}
	if raw[0] != '{' && raw[0] != '[' {
		return Answer{}, false
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return Answer{}, false
	}
	a := Answer{Raw: buf.String()}
	a.JSON = json.RawMessage(a.Raw)
	a.Token = a.Raw
	if tok, ok := findClearance(a.JSON); ok {
		a.Token = tok
	}
	return a, true
}

// answerFromText makes an Answer from a plain answer, recognising a JSON
// document carried in a string.
func answerFromText(s string) Answer {
	a := Answer{Raw: s, Token: s}
	t := strings.TrimSpace(s)
	if len(t) > 1 && (t[0] == '{' || t[0] == '[') && json.Valid([]byte(t)) {
		a.JSON = json.RawMessage(s)
		if tok, ok := findClearance(a.JSON); ok {
			a.Token = tok
		}
	}
	return a
}

// findClearance looks for a cf_clearance value anywhere in a Cloudflare
// Challenge answer: {"cf_clearance":"…"}, {"cookies":{"cf_clearance":"…"}},
// [{"name":"cf_clearance","value":"…"}] or a cookie header string.
func findClearance(doc json.RawMessage) (string, bool) {
	var v any
	if json.Unmarshal(doc, &v) != nil {
		return "", false
	}
	return clearanceIn(v, 0)
}

func clearanceIn(v any, depth int) (string, bool) {
	if depth > 8 {
		return "", false
	}
	switch x := v.(type) {
	case map[string]any:
		if s, ok := x["cf_clearance"].(string); ok && s != "" {
			return s, true
		}
		if n, _ := x["name"].(string); n == "cf_clearance" {
			if s, ok := x["value"].(string); ok && s != "" {
				return s, true
			}
		}
		for _, k := range []string{"cookies", "cookie", "solution", "request", "result"} {
			if c, ok := x[k]; ok {
				if s, ok := clearanceIn(c, depth+1); ok {
					return s, true
				}
			}
		}
	case []any:
		for _, e := range x {
			if s, ok := clearanceIn(e, depth+1); ok {
				return s, true
			}
		}
	case string:
		for part := range strings.SplitSeq(x, ";") {
			k, val, ok := strings.Cut(strings.TrimSpace(part), "=")
			if ok && k == "cf_clearance" && val != "" {
				return val, true
			}
		}
	}
	return "", false
}

// bulkOutcome is the reading of one ids= answer.
type bulkOutcome struct {
	results []pollOutcome // one per id when the answer fits
	reqErr  *Error        // the request failed as a whole
	// unsupported: the answer does not fit a bulk reply (an error code for
	// many ids, or the wrong number of parts).
	unsupported bool
	reason      string
}

// parseBulkAnswer reads res.php's answer to action=get&ids=… for n ids.
func parseBulkAnswer(status int, body []byte, n int) bulkOutcome {
	const op = "poll"
	if status >= 500 {
		return bulkOutcome{reqErr: transportFailure(op, status, body)}
	}
	trimmed := bytes.TrimSpace(body)
	text := string(trimmed)
	errorText := ""
	if env, ok := parseEnvelope(trimmed); ok {
		s, ok := jsonString(env.request)
		if !ok {
			return bulkOutcome{unsupported: true, reason: "the answer's request field is not a string"}
		}
		text, errorText = s, env.errorText
	}
	if text == "" {
		return bulkOutcome{unsupported: true, reason: "empty answer"}
	}
	parts := splitBulk(text)
	if len(parts) == n+1 && parts[0] == "OK" {
		parts = parts[1:]
	}
	if len(parts) == 1 && n > 1 {
		code := strings.TrimSpace(parts[0])
		if looksLikeCode(code) && code != notReady {
			e := Classify(op, code, errorText)
			if !perID(e) {
				return bulkOutcome{reqErr: e}
			}
		}
		return bulkOutcome{unsupported: true, reason: "one answer " + quoteShort(code) + " for " + strconv.Itoa(n) + " ids"}
	}
	if len(parts) != n {
		return bulkOutcome{unsupported: true, reason: strconv.Itoa(len(parts)) + " answers for " + strconv.Itoa(n) + " ids"}
	}
	out := make([]pollOutcome, n)
	for i, p := range parts {
		p = strings.TrimSpace(p)
		switch {
		case p == "":
			return bulkOutcome{unsupported: true, reason: "an empty answer at position " + strconv.Itoa(i+1)}
		case looksLikeCode(p):
			o := codeOutcome(p, "")
			if o.reqErr != nil {
				return bulkOutcome{reqErr: o.reqErr}
			}
			out[i] = o
		default:
			out[i] = pollOutcome{ready: true, answer: answerFromText(p)}
		}
	}
	if status != http.StatusOK && status != 0 {
		return bulkOutcome{reqErr: transportFailure(op, status, body)}
	}
	return bulkOutcome{results: out}
}

// splitBulk splits a bulk answer on '|', keeping JSON answers whole: a
// GeeTest answer's geetest_seccode contains a '|' ("…|jordan").
func splitBulk(text string) []string {
	const maxPipesInAnswer = 8
	raw := strings.Split(text, "|")
	out := make([]string, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		p := raw[i]
		t := strings.TrimSpace(p)
		if len(t) > 0 && (t[0] == '{' || t[0] == '[') && !json.Valid([]byte(t)) {
			// Join the following parts until the document is whole; if it
			// never is, keep the part as it was. A few pipes at most: this
			// bounds the work a hostile answer can cause.
			joined := p
			for j := i + 1; j < len(raw) && j <= i+maxPipesInAnswer; j++ {
				joined += "|" + raw[j]
				if json.Valid([]byte(strings.TrimSpace(joined))) {
					p, i = joined, j
					break
				}
			}
		}
		out = append(out, p)
	}
	return out
}
