package createtask

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/captchaq/captchaq/internal/startstop"
	"github.com/captchaq/captchaq/provider"
)

// answerLimit bounds an answer body: answers are short.
const answerLimit = 1 << 20

// kindsRemembered bounds the task ids whose kind a Client keeps for its
// reports (Anti-Captcha and CapMonster take a report by the task's type).
const kindsRemembered = 4096

// Client speaks the createTask protocol to one service. It implements
// captchaq.Provider and captchaq.BalanceChecker, and reports. It is safe
// for concurrent use.
type Client struct {
	root     string
	key      string
	hc       *http.Client
	softID   json.Number // "" when not numeric
	pollConc int
	methods  []string
	requests atomic.Int64

	mu    sync.Mutex
	kinds map[string]provider.Kind // task id → kind, for reports
	order []string                 // kinds' ids, oldest first
	early map[string]provider.Answer
}

// NewClient checks cfg and returns a Client for the service at
// cfg.BaseURL (required: there is no default createTask service).
// cfg.Methods defaults to Methods and may name only Carried; BulkPoll does
// not apply (getTaskResult takes one id); SoftID is sent as softId when
// it is a number. The error lists every problem of cfg.
func NewClient(cfg provider.ClientConfig) (*Client, error) {
	var errs []error
	if strings.TrimSpace(cfg.Key) == "" {
		errs = append(errs, errors.New("createtask: key is required: the service account's key (clientKey)"))
	}
	base := strings.TrimSpace(cfg.BaseURL)
	u, err := url.Parse(base)
	switch {
	case base == "":
		errs = append(errs, errors.New("createtask: base URL is required, e.g. https://api.anti-captcha.com"))
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		errs = append(errs, fmt.Errorf("createtask: base URL %q is not an absolute http(s) URL, e.g. https://api.anti-captcha.com", base))
	case u.RawQuery != "" || u.Fragment != "":
		errs = append(errs, fmt.Errorf("createtask: base URL %q must not carry a query or fragment", base))
	}
	if cfg.PollConcurrency < 0 {
		errs = append(errs, fmt.Errorf("createtask: PollConcurrency %d must not be negative", cfg.PollConcurrency))
	}
	methods := cfg.Methods
	if methods == nil {
		methods = Methods
	}
	for _, m := range methods {
		if !slices.Contains(Carried, m) {
			errs = append(errs, fmt.Errorf("createtask: Methods has %q, which no createTask type carries; use methods of %s", m, strings.Join(Carried, ", ")))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	c := &Client{
		root:     strings.TrimRight(u.String(), "/"),
		key:      cfg.Key,
		hc:       cfg.HTTPClient,
		pollConc: cmp.Or(cfg.PollConcurrency, provider.PollConcurrencyDefault),
		methods:  methods,
		kinds:    map[string]provider.Kind{},
		early:    map[string]provider.Answer{},
	}
	if c.hc == nil {
		c.hc = defaultHTTPClient()
	}
	if _, err := strconv.Atoi(strings.TrimSpace(cfg.SoftID)); err == nil {
		c.softID = json.Number(strings.TrimSpace(cfg.SoftID))
	}
	return c, nil
}

func defaultHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 32
	t.ResponseHeaderTimeout = provider.HTTPTimeoutDefault
	t.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	return &http.Client{Timeout: provider.HTTPTimeoutDefault, Transport: t}
}

// Requests returns how many HTTP requests the Client has made.
func (c *Client) Requests() int64 { return c.requests.Load() }

// BulkSupported is false: getTaskResult asks for one task, so each id a
// poll round asks for costs a request.
func (c *Client) BulkSupported() bool { return false }

// Methods are the methods the Client takes (RouteMethod names).
func (c *Client) Methods() []string { return slices.Clone(c.methods) }

// call POSTs body (with the key as clientKey) to the service's method and
// returns the answer's fields. An answer with errorId > 0 is its code,
// classified; a failure to get an answer is transient. The key never
// shows in an error.
func (c *Client) call(ctx context.Context, op, method string, body map[string]any) (map[string]json.RawMessage, *provider.Error) {
	body["clientKey"] = c.key
	data, err := json.Marshal(body)
	if err != nil {
		return nil, &provider.Error{Op: op, Code: provider.CodeInvalidTask, Class: provider.ClassTask, Text: "the task cannot be written as JSON: " + err.Error()}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.root+"/"+method, bytes.NewReader(data))
	if err != nil {
		return nil, &provider.Error{Op: op, Code: provider.CodeNetwork, Class: provider.ClassTransient, Text: "building the request failed", Err: c.scrub(err)}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	c.requests.Add(1)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, &provider.Error{Op: op, Code: provider.CodeNetwork, Class: provider.ClassTransient, Text: "cannot reach the provider", Err: c.scrub(err)}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, answerLimit+1))
	if err != nil {
		return nil, &provider.Error{Op: op, Code: provider.CodeNetwork, Class: provider.ClassTransient, HTTPStatus: resp.StatusCode, Text: "reading the answer failed", Err: c.scrub(err)}
	}
	return c.parse(op, resp.StatusCode, raw)
}

// parse reads an answer: the fields when errorId is 0, else the error.
func (c *Client) parse(op string, status int, raw []byte) (map[string]json.RawMessage, *provider.Error) {
	var m map[string]json.RawMessage
	if len(raw) > answerLimit || json.Unmarshal(raw, &m) != nil || m == nil {
		if status >= 500 {
			return nil, &provider.Error{Op: op, Code: provider.CodeHTTP5xx, Class: provider.ClassTransient, HTTPStatus: status,
				Text: "HTTP " + strconv.Itoa(status) + " " + http.StatusText(status)}
		}
		return nil, &provider.Error{Op: op, Code: provider.CodeBadAnswer, Class: provider.ClassTransient, HTTPStatus: status,
			Text: "unexpected answer " + c.quote(raw)}
	}
	id, _ := jsonText(m["errorId"])
	if id == "" || id == "0" {
		if status >= 300 {
			return nil, &provider.Error{Op: op, Code: provider.CodeBadAnswer, Class: provider.ClassTransient, HTTPStatus: status,
				Text: "HTTP " + strconv.Itoa(status) + " without an error code: " + c.quote(raw)}
		}
		return m, nil
	}
	code, _ := jsonText(m["errorCode"])
	desc, _ := jsonText(m["errorDescription"])
	if code == NotReady {
		return map[string]json.RawMessage{"status": json.RawMessage(`"processing"`)}, nil
	}
	if code == "" {
		code = "ERROR_" + id
	}
	e := classify(op, code, c.scrubText(desc))
	e.HTTPStatus = status
	return nil, e
}

// Submit validates t (an invalid task makes no request) and sends it by
// createTask; the answer's taskId (a number, or a string at services
// such as CapSolver) is the captcha id. pingback, when set, is sent as
// callbackUrl: the service POSTs getTaskResult's JSON there, with the
// taskId, once the task is done (ReadCallback reads it; 2captcha's API v2
// posts in.php's id and code instead).
func (c *Client) Submit(ctx context.Context, t provider.Task, pingback string) (string, error) {
	const op = "submit"
	if err := t.ValidateFor(c.methods); err != nil {
		return "", invalid(op, err)
	}
	obj, err := TaskObject(t)
	if err != nil {
		return "", invalid(op, err)
	}
	body := map[string]any{"task": obj}
	if pingback != "" {
		body["callbackUrl"] = pingback
	}
	if c.softID != "" {
		body["softId"] = c.softID
	}
	m, perr := c.call(ctx, op, "createTask", body)
	if perr != nil {
		return "", perr
	}
	id, ok := jsonText(m["taskId"])
	if !ok || !validID(id) {
		return "", &provider.Error{Op: op, Code: provider.CodeBadAnswer, Class: provider.ClassTransient, Text: "createTask answered no taskId"}
	}
	kind, _ := t.KindFor(provider.KnownMethods)
	c.mu.Lock()
	c.rememberLocked(id, kind)
	if st, _ := jsonText(m["status"]); st == "ready" {
		// Services that solve images at once (CapSolver) answer them here.
		if a, ok := answerOf(m["solution"]); ok {
			c.early[id] = a
		}
	}
	c.mu.Unlock()
	return id, nil
}

// rememberLocked keeps id's kind for its reports, the oldest forgotten
// past kindsRemembered. Callers hold c.mu.
func (c *Client) rememberLocked(id string, k provider.Kind) {
	if _, ok := c.kinds[id]; !ok {
		c.order = append(c.order, id)
	}
	c.kinds[id] = k
	for len(c.order) > kindsRemembered {
		delete(c.kinds, c.order[0])
		delete(c.early, c.order[0])
		c.order = c.order[1:]
	}
}

// invalid wraps a validation failure as the *provider.Error Submit
// returns, as the in.php client does.
func invalid(op string, err error) error {
	var pe *provider.Error
	if errors.As(err, &pe) {
		cp := *pe
		cp.Op = op
		return &cp
	}
	return &provider.Error{Op: op, Code: provider.CodeInvalidTask, Class: provider.ClassTask, Text: err.Error(), Err: err}
}

// Poll asks getTaskResult for one task. A task not solved yet gives
// Ready false; a failed task gives PollResult.Err; the error return is
// for the request itself (network, bad key, rate limit).
func (c *Client) Poll(ctx context.Context, id string) (provider.PollResult, error) {
	const op = "poll"
	if !validID(id) {
		return provider.PollResult{ID: id, Err: provider.Classify(op, provider.ErrWrongIDFormat.Code, "")}, nil
	}
	c.mu.Lock()
	a, early := c.early[id]
	delete(c.early, id)
	c.mu.Unlock()
	if early {
		return provider.PollResult{ID: id, Ready: true, Answer: a}, nil
	}
	m, perr := c.call(ctx, op, "getTaskResult", map[string]any{"taskId": wireID(id)})
	if perr != nil {
		if perr.Class == provider.ClassTask || perr.Class == provider.ClassUnsolvable {
			return provider.PollResult{ID: id, Err: perr}, nil
		}
		return provider.PollResult{}, perr
	}
	switch st, _ := jsonText(m["status"]); st {
	case "ready":
		a, ok := answerOf(m["solution"])
		if !ok {
			return provider.PollResult{}, &provider.Error{Op: op, Code: provider.CodeBadAnswer, Class: provider.ClassTransient,
				Text: "getTaskResult answered ready with no solution captchaq can read: " + c.quote(m["solution"])}
		}
		return provider.PollResult{ID: id, Ready: true, Answer: a}, nil
	case "processing", "idle", "":
		return provider.PollResult{ID: id}, nil
	default:
		return provider.PollResult{}, &provider.Error{Op: op, Code: provider.CodeBadAnswer, Class: provider.ClassTransient,
			Text: "getTaskResult answered status " + strconv.Quote(st)}
	}
}

// PollMany implements captchaq.Provider: one result per id, in order, one
// getTaskResult request per id (the protocol has no bulk form), at most
// PollConcurrency at once. The first request-level error stops the rest
// and is returned, with no results.
func (c *Client) PollMany(ctx context.Context, ids []string) ([]provider.PollResult, error) {
	out := make([]provider.PollResult, len(ids))
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	pool := startstop.NewPool(c.pollConc)
	var once sync.Once
	var first error
	launched := 0
	for i, id := range ids {
		started := pool.GoCtx(ctx, func() {
			r, err := c.Poll(ctx, id)
			if err != nil {
				once.Do(func() { first = err; cancel(err) })
				return
			}
			out[i] = r
		})
		if !started {
			break
		}
		launched++
	}
	pool.Wait()
	if first != nil {
		return nil, first
	}
	if launched < len(ids) {
		return nil, &provider.Error{Op: "poll", Code: provider.CodeNetwork, Class: provider.ClassTransient, Text: "polling stopped", Err: context.Cause(ctx)}
	}
	return out, nil
}

// Balance returns the account's balance (getBalance).
func (c *Client) Balance(ctx context.Context) (float64, error) {
	const op = "balance"
	m, perr := c.call(ctx, op, "getBalance", map[string]any{})
	if perr != nil {
		return 0, perr
	}
	s, _ := jsonText(m["balance"])
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return 0, &provider.Error{Op: op, Code: provider.CodeBadAnswer, Class: provider.ClassTransient, Text: "getBalance answered no balance"}
	}
	return f, nil
}

// ReportBad tells the service the answer of task id was refused. The
// method is the one for the task's type where services differ
// (Anti-Captcha's reportIncorrectImageCaptcha and
// reportIncorrectRecaptcha, CapMonster's reportIncorrectTokenCaptcha),
// then 2captcha's reportIncorrect: the next is tried only when the
// service does not know a method.
func (c *Client) ReportBad(ctx context.Context, id string) error {
	var methods []string
	switch c.kindOf(id) {
	case provider.KindImage:
		methods = []string{"reportIncorrectImageCaptcha", "reportIncorrect"}
	case provider.KindRecaptchaV2, provider.KindRecaptchaV3:
		methods = []string{"reportIncorrectRecaptcha", "reportIncorrectTokenCaptcha", "reportIncorrect"}
	case provider.KindHCaptcha:
		methods = []string{"reportIncorrectHcaptcha", "reportIncorrectTokenCaptcha", "reportIncorrect"}
	case "":
		methods = []string{"reportIncorrect", "reportIncorrectTokenCaptcha", "reportIncorrectImageCaptcha"}
	default:
		methods = []string{"reportIncorrectTokenCaptcha", "reportIncorrect"}
	}
	return c.report(ctx, "reportbad", id, methods)
}

// ReportGood tells the service the answer of task id was accepted:
// reportCorrectRecaptcha for reCAPTCHA (Anti-Captcha), then 2captcha's
// reportCorrect. A service with neither (CapMonster takes complaints
// only) is not told.
func (c *Client) ReportGood(ctx context.Context, id string) error {
	methods := []string{"reportCorrect"}
	if k := c.kindOf(id); k == provider.KindRecaptchaV2 || k == provider.KindRecaptchaV3 {
		methods = []string{"reportCorrectRecaptcha", "reportCorrect"}
	}
	err := c.report(ctx, "reportgood", id, methods)
	if errors.Is(err, errNoMethod) {
		return nil
	}
	return err
}

// errNoMethod: the service knows none of the report methods tried.
var errNoMethod = &provider.Error{Op: "report", Code: "ERROR_METHOD_CALL", Class: provider.ClassTask, Text: "the service takes none of the report methods"}

func (c *Client) report(ctx context.Context, op, id string, methods []string) error {
	if !validID(id) {
		return provider.Classify(op, provider.ErrWrongIDFormat.Code, "")
	}
	for _, method := range methods {
		m, perr := c.call(ctx, op, method, map[string]any{"taskId": wireID(id)})
		if perr != nil {
			if perr.Code == "ERROR_METHOD_CALL" || perr.HTTPStatus == http.StatusNotFound || perr.HTTPStatus == http.StatusMethodNotAllowed {
				continue
			}
			return perr
		}
		if st, _ := jsonText(m["status"]); st != "" && st != "success" {
			return &provider.Error{Op: op, Code: provider.CodeBadAnswer, Class: provider.ClassTransient, Text: method + " answered status " + strconv.Quote(st)}
		}
		return nil
	}
	return errNoMethod
}

// ReportWindow is how long after an answer the Client's service takes a
// report (provider.PublishedReportWindow of its base URL; 0: not
// published).
func (c *Client) ReportWindow() time.Duration { return provider.PublishedReportWindow(c.root) }

func (c *Client) kindOf(id string) provider.Kind {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.kinds[id]
}

// answerOf reads a solution object by its fields: the types' solutions
// are told apart by them (text; gRecaptchaResponse; token; GeeTest's
// challenge, validate and seccode; GeeTest v4's captcha_output; Amazon
// WAF's captcha_voucher; DataDome's cookie), so a task resumed after a
// restart needs no memory of its type.
func answerOf(solution json.RawMessage) (provider.Answer, bool) {
	obj, f := foldObject(solution, "solution")
	if f != nil {
		return provider.Answer{}, false
	}
	k := provider.Kind("")
	switch {
	case has(obj, "captcha_output"):
		k = provider.KindGeeTestV4
	case has(obj, "cf_clearance"):
		k = provider.KindCloudflareChallenge
	case has(obj, "click"):
		k = provider.KindGrid
	case has(obj, "challenge_id") && has(obj, "answer"):
		k = provider.KindLemin
	case has(obj, "captcha_voucher"):
		k = provider.KindAmazonWAF
	case has(obj, "cookie") && !has(obj, "token"):
		k = provider.KindDataDome
	case has(obj, "challenge") && has(obj, "validate"):
		k = provider.KindGeeTest
	case has(obj, "gRecaptchaResponse"):
		k = provider.KindRecaptchaV2
	case has(obj, "text"):
		k = provider.KindImage
	}
	return AnswerOf(k, solution)
}

func has(o folded, name string) bool {
	_, _, ok := o.get(name)
	return ok
}

// wireID is a task id as the service gave it: a number when it is one.
func wireID(id string) any {
	if _, err := strconv.ParseUint(id, 10, 64); err == nil && len(id) < 20 {
		return json.Number(id)
	}
	return id
}

// validID accepts ids of printable characters, at most 100.
func validID(id string) bool {
	if id == "" || len(id) > 100 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

// jsonText is a JSON string's value or a number's text.
func jsonText(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", false
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return "", false
		}
		return s, true
	}
	var n json.Number
	if json.Unmarshal(raw, &n) != nil {
		return "", false
	}
	return n.String(), true
}

// scrub keeps the key out of an error's text.
func (c *Client) scrub(err error) error {
	if err == nil || !strings.Contains(err.Error(), c.key) {
		return err
	}
	return errors.New(c.scrubText(err.Error()))
}

func (c *Client) scrubText(s string) string { return strings.ReplaceAll(s, c.key, "REDACTED") }

func (c *Client) quote(raw []byte) string { return c.scrubText(short(raw)) }
