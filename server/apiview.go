package server

import (
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
)

// TaskView is a task as the API shows it: the caller's id, the record's
// state and the result once final.
type TaskView struct {
	ID            string          `json:"id"`
	Client        string          `json:"client,omitempty"`
	Status        captchaq.Status `json:"status"`
	Method        string          `json:"method"`
	Priority      int             `json:"priority"`
	Attempts      int             `json:"attempts"`
	AcceptedAt    time.Time       `json:"accepted_at,omitzero"`
	LastError     string          `json:"last_error,omitempty"`
	LastErrorCode string          `json:"last_error_code,omitempty"`
	Existed       bool            `json:"existed,omitempty"`
	// Expired: the task was solved but its token has passed
	// result.expires_at; the token is withheld (the target site would
	// refuse it). POST the same task again to have it solved again.
	Expired bool             `json:"expired,omitempty"`
	Result  *captchaq.Result `json:"result,omitempty"`
	// Report is the client's report on the answer (reportgood or
	// reportbad on res.php): "good" or "bad", once.
	Report string `json:"report,omitempty"`
	// Bindings are what the provider answered the token is bound to
	// (read from result.answer; else the task's user agent where the
	// type is solved with it): send the token with exactly these.
	Bindings *Bindings `json:"bindings,omitempty"`
}

// Bindings are a token's user agent, cookies and proxy as the provider
// answered them (provider.Bindings).
type Bindings struct {
	UserAgent string          `json:"user_agent,omitempty"`
	Cookies   json.RawMessage `json:"cookies,omitempty"`
	Proxy     json.RawMessage `json:"proxy,omitempty"`
}

// view shows rec to cs: an admin sees "client/id", others their own id.
func view(rec captchaq.Record, cs *clientState) TaskView {
	client, local := splitID(rec.Task.ID)
	id := local
	if cs.Admin && client != cs.Name {
		id = rec.Task.ID
	}
	v := TaskView{
		ID: id, Client: client, Status: rec.Status, Method: rec.Task.Method,
		Priority: rec.Task.Priority, Attempts: rec.Attempts, AcceptedAt: rec.AcceptedAt,
		LastError: scrubURLs(rec.LastError), LastErrorCode: rec.LastErrorCode, Report: rec.Report,
	}
	if v.Priority == 0 {
		v.Priority = captchaq.PriorityDefault
	}
	if rec.Result != nil {
		res := scrubResult(*rec.Result)
		res.ID = id
		if cs.Admin {
			res.CaptchaID = rec.Result.CaptchaID
		}
		if res.Expired(time.Now()) {
			v.Expired = true
			res.Token, res.Answer = "", nil
		}
		v.Bindings = apiBindings(res, rec.Task.Params)
		v.Result = &res
	}
	return v
}

// visibleID turns an id from cs into the Store's id, or "" when cs may not
// name it.
func visibleID(cs *clientState, id string) string {
	if id == "" {
		return ""
	}
	if cs.Admin && strings.Contains(id, "/") {
		return id
	}
	return storeID(cs.Name, id)
}

// fieldOf names the input field an error is about.
func fieldOf(err error) string {
	var ve *provider.ValidationError
	if errors.As(err, &ve) {
		if strings.HasPrefix(ve.Field, "params.") || ve.Field == "method" || ve.Field == "pingback" {
			return ve.Field
		}
		return "params." + ve.Field
	}
	var pe *provider.Error
	if errors.As(err, &pe) && pe.Code == provider.CodeUnsupportedType {
		return "method"
	}
	msg := err.Error()
	var te *captchaq.TaskError
	if errors.As(err, &te) {
		msg = te.Msg
	}
	msg = strings.TrimPrefix(msg, "task: ")
	if strings.HasPrefix(msg, "unknown field ") {
		if q, err := strconv.QuotedPrefix(strings.TrimPrefix(msg, "unknown field ")); err == nil {
			f, _ := strconv.Unquote(q)
			return f
		}
	}
	if i := strings.Index(msg, ":"); i > 0 && !strings.ContainsAny(msg[:i], " \"") {
		return msg[:i]
	}
	return ""
}

// providerURL matches a URL inside an error text: the provider's base URL
// (or any other) is the operator's business, not a client's.
// A name the resolver could not look up (lookup HOST on RESOLVER:53) is
// one too, and so is a host:port written without a scheme (a URL missing
// its scheme is quoted so in a refusal).
var providerURL = regexp.MustCompile(`(?i)\b(?:https?|amqps?)://[^\s"'<>]+|\b(?:dial|read|write) (?:tcp|udp)[46]? \S+|\blookup [^\s:]+(?: on \S+?:\d+)?` +
	`|(?:\blocalhost|\b(?:[a-z0-9-]+\.)+[a-z][a-z0-9-]*|\b\d{1,3}(?:\.\d{1,3}){3}|\[[0-9a-f:.]+\]):\d{1,5}\b[^\s"'<>()]*`)

// pingbackPath matches a token holding the server's pingback path: its
// secret is what lets a caller post answers to this server.
var pingbackPath = regexp.MustCompile(`[^\s"'<>()]*/pingback/[^\s"'<>()]*`)

// scrubURLs hides the URLs in a client-visible error text, and any
// pingback path of this server's, scheme or none.
func scrubURLs(s string) string {
	if strings.Contains(s, "/pingback/") {
		s = pingbackPath.ReplaceAllString(s, "(the server's pingback URL)")
	}
	return providerURL.ReplaceAllString(s, "(the provider)")
}

// scrubResult is r as a client may see it: without the provider's
// captcha id, which is the operator's account's business (reports go
// through the server by the task's id; an admin sees it in view).
func scrubResult(r captchaq.Result) captchaq.Result {
	r.Error = scrubURLs(r.Error)
	r.CaptchaID = ""
	return r
}
