package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/apiform"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/provider/createtask"
)

// frontSide serves the provider protocols' front: in.php and res.php,
// and createTask and getTaskResult.
type frontSide struct {
	deps
	metrics      *httpMetrics
	reportsLater bool // the Backend answers reports' outcomes (ReportOutcomer)
	bal          balanceCache
	// newIDs are the store ids of front tasks whose ids came from the
	// IDSource, from newFrontTask to acceptFront (NewSubmitter).
	newIDs sync.Map
}

// frontReply writes a protocol answer: {"status":s,"request":v} with
// json=1, else "OK|v" or the bare code. HTTP status is 200, as the
// provider's.
type frontReply struct {
	w    http.ResponseWriter
	json bool
}

func (f frontReply) ok(v string) {
	if f.json {
		f.write(map[string]any{"status": 1, "request": v})
		return
	}
	f.text("OK|" + v)
}

// okAnswer answers a solved task whose answer is a JSON document (raw)
// or binds its token (b). Plain text is OK|token, which has no room for
// what binds a token.
func (f frontReply) okAnswer(token string, raw json.RawMessage, b provider.Bindings) {
	if f.json {
		f.write(resAnswer(token, raw, b))
		return
	}
	f.text("OK|" + token)
}

// resAnswer is res.php's json=1 answer for a solved task. A structured
// answer (GeeTest, a Cloudflare Challenge object) is the request as the
// provider gave it. A token answered with what binds it is the request,
// the binding beside it: a res.php answer's own fields verbatim (2captcha's
// "useragent", CaptchaAI's "user_agent", "cookies"), else b (a createTask
// solution's, the task's user agent; createtask.BindingsFor) as
// "useragent", "cookies" and "proxy", beside a structured answer too.
func resAnswer(token string, raw json.RawMessage, b provider.Bindings) map[string]any {
	out := map[string]any{"status": 1, "request": token}
	var doc map[string]json.RawMessage
	if len(raw) > 0 {
		out["request"] = raw
		if json.Unmarshal(raw, &doc) != nil {
			return out
		}
	}
	if req, ok := doc["request"]; ok {
		for k, v := range doc {
			if k != "status" && k != "error_text" {
				out[k] = v
			}
		}
		out["request"] = req
		return out
	}
	if doc != nil && carriesToken(doc, token) {
		out["request"] = token
	}
	b.AddTo(out, "useragent")
	return out
}

// withReservoir adds to a solved task's JSON answer (res.php json=1,
// getTaskResult) where its token came from: "reservoir" names the
// reservoir that answered it at once, "expires_at" (Unix seconds) is when
// the target site stops taking it. A task solved for itself has neither.
func withReservoir(out map[string]any, r captchaq.Result) map[string]any {
	if r.Reservoir == "" {
		return out
	}
	out["reservoir"] = r.Reservoir
	if !r.ExpiresAt.IsZero() {
		out["expires_at"] = r.ExpiresAt.Unix()
	}
	return out
}

// carriesToken reports whether a getTaskResult solution carries token as
// its answer (token, gRecaptchaResponse, text or a DataDome cookie, in any
// letter case).
func carriesToken(doc map[string]json.RawMessage, token string) bool {
	for k, v := range doc {
		switch strings.ToLower(k) {
		case "token", "grecaptcharesponse", "text", "cookie":
			var s string
			if json.Unmarshal(v, &s) == nil && s == token {
				return true
			}
		}
	}
	return false
}

// plain answers a value without the OK| prefix (bulk, balance, reports).
func (f frontReply) plain(status int, v string) {
	if f.json {
		f.write(map[string]any{"status": status, "request": v})
		return
	}
	f.text(v)
}

func (f frontReply) fail(code, text string) {
	if f.json {
		m := map[string]any{"status": 0, "request": code}
		if text != "" {
			m["error_text"] = text
		}
		f.write(m)
		return
	}
	f.text(code)
}

func (f frontReply) write(v any) {
	f.w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(f.w).Encode(v)
}

func (f frontReply) text(s string) {
	f.w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(f.w, s)
}

// maxFieldBytes is the longest string a JSON body's field may be: an
// image of provider.MaxImageBytes base64-encoded, and a tenth more for
// line breaks and a data: prefix. A longer one is refused before any of
// the body is decoded.
var maxFieldBytes = base64.StdEncoding.EncodedLen(provider.MaxImageBytes) * 11 / 10

// frontForm reads an in.php/res.php request through the parser the
// simulator shares: a key in the query string is checked before the body
// is read, and the body is capped at Config.MaxBodyBytes and metered as
// it arrives (see bodyBudget): against the client's share when the query
// names its key, else as a body whose key is only inside it, from its
// address's share and within KeylessBodyTimeout. Refused or too slow, it
// is cut short with errBodiesBusy or errBodyTooSlow; the query's fields
// are read all the same, for the answer's form. A JSON body of more
// fields than apiform.DefaultMaxFields, or with a field longer than
// maxFieldBytes, is refused before it is decoded. The body's bytes stay
// charged until release is called (it may be called more than once):
// after the task is decoded from them, so decoding is paid within the
// budget too.
func (s *frontSide) frontForm(w http.ResponseWriter, r *http.Request) (form *apiform.Request, release func(), err error) {
	o := apiform.Options{
		MaxBody:   s.cfg.MaxBodyBytes,
		KeyOK:     func(key string) bool { return s.clients.client(key) != nil },
		MaxString: maxFieldBytes,
	}
	var m *meteredBody
	release = func() {}
	if r.Body != nil && r.Body != http.NoBody {
		if key, ok := apiform.QueryKey(r); ok {
			if cs := s.clients.client(key); cs != nil {
				m, release = s.clientBody(r, cs)
			}
		} else {
			m, release = s.keylessBody(w, r)
		}
	}
	release = sync.OnceFunc(release)
	form, err = apiform.Parse(w, r, o)
	if m != nil && m.err != nil {
		err = m.err // the parser may have wrapped or replaced it
		cutShort(w, r)
	}
	return form, release, err
}

// replyFor is the answer form the request asked for, with
// Access-Control-Allow-Origin: * when it asked for that too.
func replyFor(w http.ResponseWriter, form *apiform.Request) frontReply {
	if form.ACAO {
		w.Header().Set("Access-Control-Allow-Origin", "*")
	}
	return frontReply{w: w, json: form.JSON}
}

// formErrorCode is the in.php code and text for a request the parser
// refused.
func formErrorCode(cfg Config, err error) (string, string) {
	switch {
	case errors.Is(err, apiform.ErrWrongKey):
		return "ERROR_WRONG_USER_KEY", "unknown key: use a key from the server's clients file"
	case errors.Is(err, errBodiesBusy):
		return "ERROR_NO_SLOT_AVAILABLE", err.Error()
	case errors.Is(err, errBodyTooSlow):
		return "ERROR_NO_SLOT_AVAILABLE", fmt.Sprintf("the request body did not arrive within %v: a body whose key is only inside it must come at once; send key= in the query string for a slow upload", cfg.KeylessBodyTimeout)
	case errors.Is(err, apiform.ErrTooManyFields):
		return "ERROR_BAD_PARAMETERS", strings.TrimPrefix(err.Error(), "apiform: too many fields: ")
	case errors.Is(err, apiform.ErrFieldTooLong):
		return "ERROR_TOO_BIG_CAPTCHA_FILESIZE", strings.TrimPrefix(err.Error(), "apiform: field too long: ") +
			fmt.Sprintf(" (an image of %d bytes, the provider's limit, is %d base64-encoded)", provider.MaxImageBytes, base64.StdEncoding.EncodedLen(provider.MaxImageBytes))
	case errors.Is(err, apiform.ErrTooBig):
		return "ERROR_TOO_BIG_CAPTCHA_FILESIZE", "request body " + strings.TrimPrefix(err.Error(), "apiform: request body too large: ") + ", the server's limit"
	}
	return "ERROR_BAD_PARAMETERS", "the request could not be read: " + err.Error()
}

// frontKeys are in.php fields that are the front's, not the task's.
var frontKeys = map[string]bool{"key": true, "method": true, "json": true, "soft_id": true, "pingback": true, "priority": true, "header_acao": true, "file": true}

func (s *frontSide) handleIn(w http.ResponseWriter, r *http.Request) {
	if apiform.Preflight(w, r) {
		return
	}
	form, release, err := s.frontForm(w, r)
	defer release()
	reply := replyFor(w, form)
	if err != nil {
		reply.fail(formErrorCode(s.cfg, err))
		return
	}
	cs := s.clients.client(form.Get("key"))
	if cs == nil {
		reply.fail("ERROR_WRONG_USER_KEY", "unknown key: use a key from the server's clients file")
		return
	}
	t, code, text := s.frontTask(r.Context(), cs, form)
	release() // the task is decoded and checked; acceptFront may wait
	if code == "" {
		var local string
		if local, code, text = s.acceptFront(r.Context(), cs, t); code == "" {
			reply.ok(local)
			return
		}
	}
	reply.fail(inPHPCode(code), text)
}

// inPHPCode is a front code as in.php answers it: a type no provider
// solves is ERROR_BAD_PARAMETERS there, as at the provider.
func inPHPCode(code string) string {
	if code == provider.CodeUnsupportedType {
		return "ERROR_BAD_PARAMETERS"
	}
	return code
}

// acceptFront hands a task of either protocol's front to the Backend,
// within the client's rate and max_inflight, and returns the client's id
// for it, or the in.php code refusing it.
func (s *frontSide) acceptFront(ctx context.Context, cs *clientState, v captchaq.ValidTask) (local, code, text string) {
	id := v.ID()
	_, isNew := s.newIDs.LoadAndDelete(id)
	if le := s.clients.reserve(ctx, cs, []string{id}); le != nil {
		if le.inflight {
			return "", "ERROR_NO_SLOT_AVAILABLE", le.msg
		}
		return "", "MAX_USER_TURN", le.msg
	}
	submit := s.submit
	if nb, ok := s.backend.(NewSubmitter); ok && isNew {
		submit = func(ctx context.Context, v captchaq.ValidTask) error {
			ctx, cancel := context.WithTimeout(ctx, backendSubmitTimeout)
			defer cancel()
			return nb.SubmitNew(ctx, v)
		}
	}
	if err := submit(ctx, v); err != nil {
		s.clients.release(cs, id)
		code, text := submitErrorCode(err)
		return "", code, text
	}
	cs.mu.Lock()
	cs.accepted++
	cs.mu.Unlock()
	_, local = splitID(id)
	return local, "", ""
}

// frontTask turns an in.php form into a Task, or a protocol error.
func (s *frontSide) frontTask(ctx context.Context, cs *clientState, form *apiform.Request) (captchaq.ValidTask, string, string) {
	method := strings.TrimSpace(form.Get("method"))
	if method == "" {
		return captchaq.ValidTask{}, "ERROR_BAD_PARAMETERS", "method: required (e.g. userrecaptcha, turnstile, base64, post)"
	}
	params := map[string]string{}
	for k, v := range form.Named() {
		if frontKeys[strings.ToLower(k)] {
			continue
		}
		params[k] = v
	}
	if method == "post" {
		// The image travels inside the task (the Store keeps it), as base64.
		file := form.File
		if len(file) == 0 {
			return captchaq.ValidTask{}, "ERROR_ZERO_CAPTCHA_FILESIZE", "method post needs a multipart part named file with the image"
		}
		method = "base64"
		params["body"] = base64.StdEncoding.EncodeToString(file)
	}
	priority := 0
	if p := form.Get("priority"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return captchaq.ValidTask{}, "ERROR_BAD_PARAMETERS", "priority: must be a whole number, 0 or more (lower is more urgent), got " + strconv.Quote(p)
		}
		priority = n
	}
	pingback := ""
	if pb := form.Get("pingback"); pb != "" {
		if reason := provider.CheckCallbackURL(pb); reason != "" {
			return captchaq.ValidTask{}, "ERROR_BAD_PARAMETERS", "pingback: " + reason
		}
		pingback = formPingback + pb
	}
	return s.newFrontTask(ctx, cs, provider.Task{Method: method, Params: params}, priority, pingback)
}

// newFrontTask gives a task that came by either protocol's front (its
// in.php method and params, translated at the door for createTask) an id
// of the client's, and checks and clamps it as every front task is: one
// validation, one set of rules. pingback is the stored Task.Pingback,
// marked with the protocol of its POST.
func (s *frontSide) newFrontTask(ctx context.Context, cs *clientState, pt provider.Task, priority int, pingback string) (captchaq.ValidTask, string, string) {
	id, isNew, err := s.ids.freshID(ctx, cs.Name)
	if errors.Is(err, errNoFreshID) {
		return captchaq.ValidTask{}, "ERROR_NO_SLOT_AVAILABLE", err.Error()
	}
	if err != nil {
		// The store is out of reach (a database restarting): the task was
		// not taken, and the client tries again as for a full queue.
		s.log.Error("store read failed", "err", err)
		return captchaq.ValidTask{}, "ERROR_NO_SLOT_AVAILABLE", "the store cannot be reached now; try again shortly"
	}
	t := captchaq.Task{ID: storeID(cs.Name, id), Method: pt.Method, Params: pt.Params, Tenant: cs.Name, Priority: priority, Pingback: pingback}
	cs.clamp(&t, s.cfg.MaxAttempts)
	v, err := s.backend.Check(t)
	if err != nil {
		code, text := submitErrorCode(err)
		return v, code, text
	}
	if _, ok := s.backend.(NewSubmitter); ok && isNew {
		s.newIDs.Store(t.ID, struct{}{})
	}
	return v, "", ""
}

// submitErrorCode maps a refused submit to the protocol's code.
func submitErrorCode(err error) (string, string) {
	var ve *provider.ValidationError
	var pe *provider.Error
	switch {
	case errors.As(err, &ve):
		return ve.ProtocolCode(), ve.Error()
	case errors.As(err, &pe) && pe.Code == provider.CodeUnsupportedType:
		// in.php answers it ERROR_BAD_PARAMETERS (inPHPCode); createTask
		// has a code of its own.
		return provider.CodeUnsupportedType, pe.Text
	case errors.Is(err, captchaq.ErrInvalidTask):
		return "ERROR_BAD_PARAMETERS", err.Error()
	case errors.Is(err, captchaq.ErrClosed):
		return "ERROR_NO_SLOT_AVAILABLE", "the server is shutting down"
	}
	return "ERROR_NO_SLOT_AVAILABLE", "the queue is full; try again shortly"
}

func (s *frontSide) handleRes(w http.ResponseWriter, r *http.Request) {
	if apiform.Preflight(w, r) {
		return
	}
	form, release, err := s.frontForm(w, r)
	release() // res.php decodes nothing more from the body
	reply := replyFor(w, form)
	if err != nil {
		reply.fail(formErrorCode(s.cfg, err))
		return
	}
	cs := s.clients.client(form.Get("key"))
	if cs == nil {
		reply.fail("ERROR_WRONG_USER_KEY", "unknown key: use a key from the server's clients file")
		return
	}
	switch action := form.Get("action"); action {
	case "get", "get2":
		if ids := form.Get("ids"); ids != "" {
			s.resBulk(r, reply, cs, ids)
			return
		}
		s.resOne(r, reply, cs, form.Get("id"))
	case "getbalance":
		v, err := s.bal.balance(r.Context())
		if err != nil {
			// Not the caller's fault, and it may pass: the protocol's
			// "try again later" (see CodeBalanceUnknown).
			reply.fail(CodeBalanceUnknown, "getbalance: "+scrubURLs(err.Error())+"; try again in a few seconds")
			return
		}
		reply.plain(1, strconv.FormatFloat(v, 'f', -1, 64))
	case "reportbad", "reportgood":
		if code, text := s.frontReport(r, cs, form.Get("id"), action == "reportgood"); code != "" {
			reply.fail(code, text)
			return
		}
		reply.plain(1, "OK_REPORT_RECORDED")
	case "":
		reply.fail("ERROR_BAD_PARAMETERS", "action: required (get, getbalance, reportbad, reportgood)")
	default:
		reply.fail("ERROR_BAD_PARAMETERS", "action: "+strconv.Quote(action)+" is not supported (get, getbalance, reportbad, reportgood)")
	}
}

// frontReport checks a client's report on its task id (the caller's
// solved task) and counts it against the client's rate like a submit;
// code is the refusal, "" once recorded. A task is reported once: the
// first report is recorded in the Store (Backend.RecordReport), counted
// and forwarded to the provider (Config.Report); a later one of the same
// task is recorded already and goes nowhere, so no client can make the
// provider's account or address look abusive with repeats.
func (s *frontSide) frontReport(r *http.Request, cs *clientState, id string, good bool) (code, text string) {
	rec, code := s.frontRecord(r, cs, id)
	if code != "" {
		return code, ""
	}
	if rec.Status != captchaq.StatusSolved {
		return "ERROR_WRONG_CAPTCHA_ID", "only a solved task can be reported"
	}
	if le := s.clients.takeRate(r.Context(), cs, rec.Task.ID); le != nil {
		return "MAX_USER_TURN", le.msg + " (reports count as tasks)"
	}
	first, err := s.backend.RecordReport(r.Context(), rec.Task.ID, good)
	switch {
	case errors.Is(err, captchaq.ErrNotSolved), errors.Is(err, captchaq.ErrNotFound):
		// Solved again or pruned since it was read.
		return "ERROR_WRONG_CAPTCHA_ID", "only a solved task can be reported"
	case err != nil:
		s.log.Error("recording a report failed", "id", rec.Task.ID, "err", err)
		return "ERROR_INTERNAL_SERVER_ERROR", "the report could not be recorded; try again"
	case !first:
		return "", ""
	}
	verdict := captchaq.ReportBad
	if good {
		verdict = captchaq.ReportGood
	}
	s.metrics.reports.WithLabelValues(verdict).Inc()
	return s.forwardReport(r.Context(), cs, rec, good)
}

// forwardReport sends a task's first report to its provider (Config.Report)
// and counts what came of it; code is the client's answer, "" for
// OK_REPORT_RECORDED. A report past the provider's window is answered
// ERROR_REPORT_NOT_RECORDED, as the provider would, without a call. A
// Backend that answers outcomes later (ReportOutcomer) has them counted
// then.
func (s *frontSide) forwardReport(ctx context.Context, cs *clientState, rec captchaq.Record, good bool) (code, text string) {
	o := captchaq.ReportOutcome{Task: rec.Task.ID, Provider: rec.Result.Provider, Good: good, Outcome: captchaq.ReportNotSent}
	if s.cfg.Report == nil || rec.Result.CaptchaID == "" {
		s.reports.add(cs.Name, o)
		return "", ""
	}
	// Forwarded once, whatever comes of it: a repeat is not sent.
	err := s.cfg.Report(ctx, *rec.Result, good)
	if s.reportsLater && err == nil {
		return "", ""
	}
	o.Outcome, o.Code = captchaq.ReportOutcomeOf(err)
	if s.reportsLater {
		o.Outcome, o.Code = captchaq.ReportNotSent, ""
	}
	s.reports.add(cs.Name, o)
	var pe *provider.Error
	switch {
	case err == nil:
		return "", ""
	case o.Outcome == captchaq.ReportTooLate:
		return provider.ErrReportNotRecorded.Code, scrubURLs(err.Error())
	case errors.As(err, &pe) && strings.HasPrefix(pe.Code, "ERROR_"):
		return pe.Code, pe.Text
	}
	s.log.Warn("report recorded but not forwarded to the provider", "id", rec.Task.ID, "good", good, "err", err)
	return "ERROR_INTERNAL_SERVER_ERROR", "the report is recorded but could not reach the provider; it is not sent again"
}

// frontRecord finds the caller's task by its own id; code is the
// protocol's error when there is none.
func (s *frontSide) frontRecord(r *http.Request, cs *clientState, id string) (captchaq.Record, string) {
	id = strings.TrimSpace(id)
	if id == "" {
		return captchaq.Record{}, "ERROR_WRONG_ID_FORMAT"
	}
	rec, err := s.backend.Get(r.Context(), storeID(cs.Name, id))
	if errors.Is(err, captchaq.ErrNotFound) || (err == nil && rec.Task.Tenant != cs.Name) {
		return rec, "ERROR_WRONG_CAPTCHA_ID"
	}
	if err != nil {
		s.log.Error("store read failed", "err", err)
		return rec, codeStoreDown
	}
	return rec, ""
}

// codeStoreDown is frontRecord's code when the store cannot be read. A
// poll answers CAPCHA_NOT_READY instead (pollCode): the answer cannot be
// given now, and every client polls again on it, where this code would
// end its wait.
const codeStoreDown = "ERROR_INTERNAL_SERVER_ERROR"

func pollCode(code string) string {
	if code == codeStoreDown {
		return "CAPCHA_NOT_READY"
	}
	return code
}

// CodeBalanceUnknown is getbalance's answer when the balance cannot be
// read now (the provider is unreachable; a gateway has no reading from
// its workers yet): ERROR_NO_SLOT_AVAILABLE, which 2captcha documents as
// "try again later" and captchaq's own provider client retries after 5 s.
// The official clients retry no getbalance: they raise it to the caller
// as an API error with this code (2captcha-python's ApiException, the npm
// clients' APIError).
const CodeBalanceUnknown = "ERROR_NO_SLOT_AVAILABLE"

// CodeTokenExpired is res.php's answer for a task solved so long ago that
// its token has passed its expires_at.
const CodeTokenExpired = "ERROR_TOKEN_EXPIRED"

// answer is what res.php says about one record: ok with the token, or a
// code.
func answer(rec captchaq.Record) (token string, raw json.RawMessage, code, text string) {
	switch {
	case rec.Status == captchaq.StatusSolved && rec.Result != nil && rec.Result.Expired(time.Now()):
		// A dead token is never handed out: the target site would refuse it.
		return "", nil, CodeTokenExpired, "the token expired at " + rec.Result.ExpiresAt.UTC().Format(time.RFC3339) + ": submit the task again"
	case rec.Status == captchaq.StatusSolved && rec.Result != nil:
		return rec.Result.Token, rec.Result.Answer, "", ""
	case rec.Status == captchaq.StatusFailed && rec.Result != nil:
		code, text := failureCode(scrubResult(*rec.Result))
		return "", nil, code, text
	}
	return "", nil, "CAPCHA_NOT_READY", ""
}

func (s *frontSide) resOne(r *http.Request, reply frontReply, cs *clientState, id string) {
	rec, code := s.frontRecord(r, cs, id)
	if code != "" {
		reply.fail(pollCode(code), "")
		return
	}
	token, raw, code, text := answer(rec)
	var b provider.Bindings
	if code == "" {
		b = createtask.BindingsFor(rec.Result.Kind, raw, rec.Task.Params)
	}
	switch {
	case code != "":
		reply.fail(code, text)
	case reply.json && rec.Result.Reservoir != "":
		reply.write(withReservoir(resAnswer(token, raw, b), *rec.Result))
	case len(raw) > 0 || !b.Empty():
		reply.okAnswer(token, raw, b)
	default:
		reply.ok(token)
	}
}
