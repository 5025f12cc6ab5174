package provider

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/captchaq/captchaq/internal/checks"
	"github.com/captchaq/captchaq/internal/startstop"
)

// Defaults of ClientConfig and the protocol's limits.
const (
	// BaseURLDefault is CaptchaAI's API.
	BaseURLDefault = "https://ocr.captchaai.com"
	// HTTPTimeoutDefault bounds one request of the default HTTP client.
	HTTPTimeoutDefault = 30 * time.Second
	// PollConcurrencyDefault bounds the requests in flight when ids are
	// polled one per request.
	PollConcurrencyDefault = 8
	// BulkMaxIDs is the most ids one ids= request carries (2captcha's
	// documented limit).
	BulkMaxIDs = 100
	// answerLimit bounds an answer body: answers are short, an HTML error
	// page need not be read whole.
	answerLimit = 1 << 20
)

// BulkMode says whether PollMany asks for many ids in one request.
type BulkMode int

const (
	// BulkAuto uses ids= and falls back to one id per request, for the
	// life of the Client, once the provider shows it does not support it.
	BulkAuto BulkMode = iota
	// BulkOn always uses ids=; an answer that does not fit is an error.
	BulkOn
	// BulkOff always polls one id per request.
	BulkOff
)

func (m BulkMode) String() string {
	switch m {
	case BulkAuto:
		return "auto"
	case BulkOn:
		return "on"
	case BulkOff:
		return "off"
	}
	return "bulkmode(" + strconv.Itoa(int(m)) + ")"
}

// ParseBulkMode reads "auto", "on" or "off".
func ParseBulkMode(s string) (BulkMode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "auto", "":
		return BulkAuto, nil
	case "on", "true", "1":
		return BulkOn, nil
	case "off", "false", "0":
		return BulkOff, nil
	}
	return 0, fmt.Errorf("bulk poll mode %q: use auto, on or off", s)
}

// ClientConfig configures a Client.
type ClientConfig struct {
	// BaseURL is the service's root; in.php and res.php are under it.
	// Default BaseURLDefault.
	BaseURL string
	// Key is the account key. Required. It is sent to the provider only
	// and never appears in an error.
	Key string
	// HTTPClient makes the requests. Default: a client with a
	// HTTPTimeoutDefault timeout and connection reuse sized for polling.
	HTTPClient *http.Client
	// SoftID is sent as soft_id with every task when set.
	SoftID string
	// BulkPoll: BulkAuto (default), BulkOn or BulkOff.
	BulkPoll BulkMode
	// PollConcurrency bounds requests in flight when polling one id per
	// request. Default PollConcurrencyDefault.
	PollConcurrency int
	// Methods are the methods the service solves (RouteMethod names):
	// Submit refuses others without a request. Default CaptchaAIMethods;
	// CommonMethods suits 2captcha and its kin.
	Methods []string
}

// Client speaks the in.php/res.php protocol. It is safe for concurrent use.
type Client struct {
	root          string
	inURL, resURL string
	key           string
	hc            *http.Client
	softID        string
	bulk          BulkMode
	pollConc      int
	methods       []string

	bulkUnsupported atomic.Bool
	requests        atomic.Int64
}

// NewClient checks cfg and returns a Client. The error lists every
// problem of cfg.
func NewClient(cfg ClientConfig) (*Client, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	u, _ := url.Parse(cfg.BaseURL) // validate parsed it
	root := strings.TrimRight(u.String(), "/")
	return &Client{
		root:     root,
		inURL:    root + "/in.php",
		resURL:   root + "/res.php",
		key:      cfg.Key,
		hc:       cfg.HTTPClient,
		softID:   cfg.SoftID,
		bulk:     cfg.BulkPoll,
		pollConc: cfg.PollConcurrency,
		methods:  cfg.Methods,
	}, nil
}

// withDefaults returns c with its zero fields filled in. It checks
// nothing: validate does, on its result.
func (c ClientConfig) withDefaults() ClientConfig {
	c.BaseURL = cmp.Or(strings.TrimSpace(c.BaseURL), BaseURLDefault)
	if c.HTTPClient == nil {
		c.HTTPClient = defaultHTTPClient()
	}
	c.PollConcurrency = cmp.Or(c.PollConcurrency, PollConcurrencyDefault)
	if c.Methods == nil {
		c.Methods = CaptchaAIMethods
	}
	return c
}

// validate reports every problem of a ClientConfig that went through
// withDefaults at once, each naming the field and the fix.
func (c ClientConfig) validate() error {
	var errs []error
	if strings.TrimSpace(c.Key) == "" {
		errs = append(errs, errors.New("provider: key is required: set the account key (CAPTCHAAI_KEY)"))
	}
	u, err := url.Parse(c.BaseURL)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		errs = append(errs, fmt.Errorf("provider: base URL %q is not an absolute http(s) URL; use e.g. %s", c.BaseURL, BaseURLDefault))
	case u.RawQuery != "" || u.Fragment != "":
		errs = append(errs, fmt.Errorf("provider: base URL %q must not carry a query or fragment", c.BaseURL))
	}
	switch c.BulkPoll {
	case BulkAuto, BulkOn, BulkOff:
	default:
		errs = append(errs, fmt.Errorf("provider: BulkPoll %d: use BulkAuto, BulkOn or BulkOff", c.BulkPoll))
	}
	if c.PollConcurrency < 0 {
		errs = append(errs, fmt.Errorf("provider: PollConcurrency %d must not be negative", c.PollConcurrency))
	}
	for _, m := range c.Methods {
		if !slices.Contains(KnownMethods, m) {
			errs = append(errs, fmt.Errorf("provider: Methods has %q: use methods of %s", m, strings.Join(KnownMethods, ", ")))
		}
	}
	return errors.Join(errs...)
}

func defaultHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 32
	t.ResponseHeaderTimeout = HTTPTimeoutDefault
	t.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	return &http.Client{Timeout: HTTPTimeoutDefault, Transport: t}
}

// Requests returns how many HTTP requests the Client has made.
func (c *Client) Requests() int64 { return c.requests.Load() }

// BulkSupported reports whether PollMany still uses ids= requests.
func (c *Client) BulkSupported() bool {
	return c.bulk != BulkOff && !c.bulkUnsupported.Load()
}

// do sends req and reads the answer. Every failure is an *Error with the
// key redacted.
func (c *Client) do(op string, req *http.Request) (int, []byte, *Error) {
	c.requests.Add(1)
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, nil, &Error{Op: op, Code: CodeNetwork, Class: ClassTransient,
			Text: "cannot reach the provider", Err: c.redact(err)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, answerLimit+1))
	if err != nil {
		return resp.StatusCode, nil, &Error{Op: op, Code: CodeNetwork, Class: ClassTransient,
			HTTPStatus: resp.StatusCode, Text: "reading the answer failed", Err: c.redact(err)}
	}
	if len(body) > answerLimit {
		if resp.StatusCode >= 500 {
			return resp.StatusCode, nil, transportFailure(op, resp.StatusCode, nil)
		}
		return resp.StatusCode, nil, &Error{Op: op, Code: CodeBadAnswer, Class: ClassTransient,
			HTTPStatus: resp.StatusCode, Text: "the answer is larger than 1 MiB"}
	}
	return resp.StatusCode, body, nil
}

// get calls res.php with the key and the given fields.
func (c *Client) get(ctx context.Context, op string, q url.Values) (int, []byte, *Error) {
	q.Set("key", c.key)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.resURL+"?"+q.Encode(), nil)
	if err != nil {
		return 0, nil, &Error{Op: op, Code: CodeNetwork, Class: ClassTransient, Text: "building the request failed", Err: c.redact(err)}
	}
	return c.do(op, req)
}

// Submit validates t (no request is made for an invalid task) and sends it
// to in.php. It returns the provider's captcha id. pingback, when set, is
// sent for the provider to call when the task is solved.
func (c *Client) Submit(ctx context.Context, t Task, pingback string) (string, error) {
	return c.SubmitChecked(ctx, Unchecked(t), pingback)
}

// SubmitChecked is Submit for a task checked at the door (Task.Check): one
// checked for a method the client solves is sent without validating it,
// or decoding its image, again.
func (c *Client) SubmitChecked(ctx context.Context, ct Checked, pingback string) (string, error) {
	const op = "submit"
	t := ct.Task
	if !ct.CheckedFor(c.methods) {
		if err := t.ValidateFor(c.methods); err != nil {
			return "", invalid(op, err)
		}
	}
	if pingback != "" {
		if reason := CheckCallbackURL(pingback); reason != "" {
			return "", invalid(op, &ValidationError{Field: "pingback", Reason: reason})
		}
	}
	form, file := c.submitForm(ct, pingback)
	var req *http.Request
	var err error
	if len(file) > 0 {
		body, ctype, ferr := multipartBody(form, file)
		if ferr != nil {
			return "", ferr
		}
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, c.inURL, body)
		if err == nil {
			req.Header.Set("Content-Type", ctype)
		}
	} else {
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, c.inURL, strings.NewReader(form.Encode()))
		if err == nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
	}
	if err != nil {
		return "", &Error{Op: op, Code: CodeNetwork, Class: ClassTransient, Text: "building the request failed", Err: c.redact(err)}
	}
	status, body, perr := c.do(op, req)
	if perr != nil {
		return "", perr
	}
	id, perr := parseSubmitAnswer(status, body)
	if perr != nil {
		return "", perr
	}
	return id, nil
}

// submitForm is the in.php form of a checked task, with its image (for
// "post") apart, decoded once at the door or here.
func (c *Client) submitForm(ct Checked, pingback string) (url.Values, []byte) {
	t := ct.Task
	form := url.Values{}
	form.Set("key", c.key)
	form.Set("method", t.wireMethod())
	form.Set("json", "1")
	if c.softID != "" {
		form.Set("soft_id", c.softID)
	}
	if pingback != "" {
		form.Set("pingback", pingback)
	}
	var file []byte
	for k, v := range t.Params {
		if strings.TrimSpace(v) == "" {
			continue
		}
		switch k {
		case "key", "method", "json":
			continue // ours to set
		case "file":
			if t.Method == "post" {
				file = ct.file
				if file == nil {
					checks.Count(checks.Decode, t.Params)
					file, _ = decodeBase64(v) // validated above
				}
				continue
			}
		case "proxytype":
			v = strings.ToUpper(strings.TrimSpace(v))
		case "invisible", "enterprise", "phrase", "regsense", "calc", "recaptcha":
			if isTrue(v) {
				v = "1"
			} else {
				v = "0"
			}
		}
		form.Set(k, v)
	}
	return form, file
}

// invalid wraps a validation failure as the *Error Submit returns.
func invalid(op string, err error) error {
	var pe *Error
	if errors.As(err, &pe) {
		cp := *pe
		cp.Op = op
		return &cp
	}
	return &Error{Op: op, Code: CodeInvalidTask, Class: ClassTask, Text: err.Error(), Err: err}
}

// multipartBody builds the upload of the image bytes with the other
// fields. No path is ever opened here: the bytes travel in the task.
func multipartBody(form url.Values, data []byte) (io.Reader, string, error) {
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	for k, vs := range form {
		for _, v := range vs {
			if err := w.WriteField(k, v); err != nil {
				return nil, "", err
			}
		}
	}
	fw, err := w.CreateFormFile("file", "captcha")
	if err != nil {
		return nil, "", err
	}
	if _, err := fw.Write(data); err != nil {
		return nil, "", err
	}
	if err := w.Close(); err != nil {
		return nil, "", err
	}
	return &buf, w.FormDataContentType(), nil
}

// Poll asks for one id's state. A not-ready task gives Ready=false and no
// error; a failed task gives PollResult.Err. The error return is for the
// request itself (network, bad key, rate limit).
func (c *Client) Poll(ctx context.Context, id string) (PollResult, error) {
	if !validID(id) {
		return PollResult{ID: id, Err: Classify("poll", ErrWrongIDFormat.Code, "")}, nil
	}
	q := url.Values{"action": {"get"}, "id": {id}, "json": {"1"}}
	status, body, perr := c.get(ctx, "poll", q)
	if perr != nil {
		return PollResult{}, perr
	}
	o := parsePollAnswer(status, body)
	if o.reqErr != nil {
		return PollResult{}, o.reqErr
	}
	return o.result(id), nil
}

func (o pollOutcome) result(id string) PollResult {
	r := PollResult{ID: id, Ready: o.ready, Answer: o.answer}
	if o.idErr != nil {
		r.Err = o.idErr
	}
	return r
}

// PollMany implements captchaq.Provider: one result per id, in order. More
// than one id goes out as ids= requests of up to BulkMaxIDs ids while the
// provider supports them (see BulkMode); otherwise one request per id, at
// most PollConcurrency at once. The error is for a request as a whole; on
// such an error no results are returned.
func (c *Client) PollMany(ctx context.Context, ids []string) ([]PollResult, error) {
	out := make([]PollResult, len(ids))
	var todo []int // indexes with a pollable id
	for i, id := range ids {
		if validID(id) {
			todo = append(todo, i)
			continue
		}
		out[i] = PollResult{ID: id, Err: Classify("poll", ErrWrongIDFormat.Code, "")}
	}
	if len(todo) == 0 {
		return out, nil
	}
	if len(todo) == 1 || !c.BulkSupported() {
		if err := c.pollEach(ctx, ids, todo, out); err != nil {
			return nil, err
		}
		return out, nil
	}
	for start := 0; start < len(todo); start += BulkMaxIDs {
		chunk := todo[start:min(start+BulkMaxIDs, len(todo))]
		if len(chunk) == 1 || !c.BulkSupported() {
			if err := c.pollEach(ctx, ids, chunk, out); err != nil {
				return nil, err
			}
			continue
		}
		if err := c.pollBulk(ctx, ids, chunk, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// pollBulk polls the ids at idx with one ids= request, falling back to
// pollEach when the answer shows bulk is unsupported (in BulkAuto).
func (c *Client) pollBulk(ctx context.Context, ids []string, idx []int, out []PollResult) error {
	list := make([]string, len(idx))
	for j, i := range idx {
		list[j] = ids[i]
	}
	q := url.Values{"action": {"get"}, "ids": {strings.Join(list, ",")}}
	status, body, perr := c.get(ctx, "poll", q)
	if perr != nil {
		return perr
	}
	b := parseBulkAnswer(status, body, len(idx))
	switch {
	case b.reqErr != nil:
		return b.reqErr
	case b.unsupported:
		if c.bulk == BulkOn {
			e := badAnswer("poll", body)
			e.Text = "bulk poll: " + b.reason + "; set bulk polling to auto or off for this provider"
			return e
		}
		c.bulkUnsupported.Store(true)
		return c.pollEach(ctx, ids, idx, out)
	}
	for j, i := range idx {
		out[i] = b.results[j].bulkResult(ids[i])
	}
	return nil
}

// pollEach polls the ids at idx one request each, at most pollConc at once.
// The first request-level error stops the rest and is returned.
func (c *Client) pollEach(ctx context.Context, ids []string, idx []int, out []PollResult) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	pool := startstop.NewPool(c.pollConc)
	var once sync.Once
	var first error
	launched := 0
	for _, i := range idx {
		started := pool.GoCtx(ctx, func() {
			r, err := c.Poll(ctx, ids[i])
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
		return first
	}
	if launched < len(idx) {
		return &Error{Op: "poll", Code: CodeNetwork, Class: ClassTransient, Text: "polling stopped", Err: context.Cause(ctx)}
	}
	return nil
}

// Balance returns the account balance.
func (c *Client) Balance(ctx context.Context) (float64, error) {
	const op = "balance"
	status, body, perr := c.get(ctx, op, url.Values{"action": {"getbalance"}, "json": {"1"}})
	if perr != nil {
		return 0, perr
	}
	s, perr := simpleAnswer(op, status, body)
	if perr != nil {
		return 0, perr
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return 0, badAnswer(op, body)
	}
	return f, nil
}

// ReportBad tells the provider an answer was wrong (for a refund and the
// provider's quality statistics).
func (c *Client) ReportBad(ctx context.Context, id string) error {
	return c.report(ctx, "reportbad", id)
}

// ReportGood tells the provider an answer was accepted.
func (c *Client) ReportGood(ctx context.Context, id string) error {
	return c.report(ctx, "reportgood", id)
}

// ReportWindow is how long after an answer the Client's service takes a
// report (PublishedReportWindow of its base URL; 0: not published).
func (c *Client) ReportWindow() time.Duration { return PublishedReportWindow(c.root) }

func (c *Client) report(ctx context.Context, action, id string) error {
	if !validID(id) {
		return Classify(action, ErrWrongIDFormat.Code, "")
	}
	status, body, perr := c.get(ctx, action, url.Values{"action": {action}, "id": {id}, "json": {"1"}})
	if perr != nil {
		return perr
	}
	s, perr := simpleAnswer(action, status, body)
	if perr != nil {
		return perr
	}
	if s != "OK_REPORT_RECORDED" && s != "OK" {
		return badAnswer(action, body)
	}
	return nil
}

// simpleAnswer reads a one-value answer (JSON or plain).
func simpleAnswer(op string, status int, body []byte) (string, *Error) {
	if status >= 500 {
		return "", transportFailure(op, status, body)
	}
	trimmed := bytes.TrimSpace(body)
	if env, ok := parseEnvelope(trimmed); ok {
		s, ok := jsonString(env.request)
		if !ok {
			return "", badAnswer(op, body)
		}
		if env.status != 1 {
			return "", Classify(op, s, env.errorText)
		}
		return s, nil
	}
	s := string(trimmed)
	if looksLikeCode(s) {
		return "", Classify(op, s, "")
	}
	if strings.HasPrefix(s, "OK|") {
		s = s[3:]
	}
	if s == "" || status != http.StatusOK {
		return "", transportFailure(op, status, body)
	}
	return s, nil
}

// ThreadsInfo is the plan's thread use as the provider reports it.
type ThreadsInfo struct {
	Threads int    // the plan's threads
	Busy    int    // threads solving now
	Free    int    // Threads - Busy when not reported
	Plan    string // the plan's name, when reported
	Raw     string // the answer verbatim
}

// ThreadsInfo asks the provider for the plan's threads (CaptchaAI's
// threadsinfo action). The answer's shape is undocumented: known field
// names are looked for in any JSON object of the answer; an answer without
// a thread count is an error saying so.
func (c *Client) ThreadsInfo(ctx context.Context) (ThreadsInfo, error) {
	const op = "threadsinfo"
	status, body, perr := c.get(ctx, op, url.Values{"action": {"threadsinfo"}, "json": {"1"}})
	if perr != nil {
		return ThreadsInfo{}, perr
	}
	return parseThreadsInfo(status, body)
}

func parseThreadsInfo(status int, body []byte) (ThreadsInfo, error) {
	const op = "threadsinfo"
	if status >= 500 {
		return ThreadsInfo{}, transportFailure(op, status, body)
	}
	trimmed := bytes.TrimSpace(body)
	info := ThreadsInfo{Raw: string(trimmed)}
	var doc any
	if err := json.Unmarshal(trimmed, &doc); err != nil {
		s := string(trimmed)
		if looksLikeCode(s) {
			return ThreadsInfo{}, Classify(op, s, "")
		}
		return ThreadsInfo{}, unknownThreadsShape(body)
	}
	if m, ok := doc.(map[string]any); ok {
		if st, ok := m["status"]; ok && fmt.Sprint(st) == "0" {
			code, _ := m["request"].(string)
			text, _ := m["error_text"].(string)
			return ThreadsInfo{}, Classify(op, code, text)
		}
	}
	found := map[string]int{}
	var plan string
	collectThreads(doc, found, &plan, 0)
	total, hasTotal := found["threads"]
	busy, hasBusy := found["busy"]
	free, hasFree := found["free"]
	switch {
	case hasTotal:
	case hasBusy && hasFree:
		total, hasTotal = busy+free, true
	}
	if !hasTotal {
		return ThreadsInfo{}, unknownThreadsShape(body)
	}
	if !hasBusy && hasFree {
		busy = total - free
	}
	if !hasFree {
		free = total - busy
	}
	info.Threads, info.Busy, info.Free, info.Plan = total, busy, max(free, 0), plan
	return info, nil
}

func unknownThreadsShape(body []byte) error {
	return &Error{Op: "threadsinfo", Code: CodeBadAnswer, Class: ClassTransient,
		Text: "threadsinfo answer has an unknown shape (no thread count found): " + quoteShort(string(bytes.TrimSpace(body))) +
			"; set the thread count in the configuration instead"}
}

// threadKeys maps the field names seen for threadsinfo to what they mean.
var threadKeys = map[string]string{
	"threads": "threads", "totalthreads": "threads", "total": "threads", "maxthreads": "threads", "planthreads": "threads", "limit": "threads",
	"workingthreads": "busy", "busythreads": "busy", "busy": "busy", "used": "busy", "usedthreads": "busy", "working": "busy", "inuse": "busy", "active": "busy", "activethreads": "busy",
	"freethreads": "free", "free": "free", "available": "free", "availablethreads": "free", "idle": "free",
}

func collectThreads(v any, found map[string]int, plan *string, depth int) {
	if depth > 4 {
		return
	}
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			norm := strings.ToLower(strings.NewReplacer("_", "", "-", "", " ", "").Replace(k))
			if what, ok := threadKeys[norm]; ok {
				if n, ok := intOf(val); ok {
					if _, dup := found[what]; !dup {
						found[what] = n
					}
					continue
				}
			}
			if norm == "plan" || norm == "planname" || norm == "package" {
				if s, ok := val.(string); ok && *plan == "" {
					*plan = s
					continue
				}
			}
			collectThreads(val, found, plan, depth+1)
		}
	case string:
		// A JSON document carried in a string.
		s := strings.TrimSpace(x)
		if strings.HasPrefix(s, "{") {
			var inner any
			if json.Unmarshal([]byte(s), &inner) == nil {
				collectThreads(inner, found, plan, depth+1)
			}
		}
	}
}

func intOf(v any) (int, bool) {
	switch x := v.(type) {
	case float64:
		if x < 0 || x > 1e9 || x != float64(int(x)) {
			return 0, false
		}
		return int(x), true
	case string:
		n, err := strconv.Atoi(strings.TrimSpace(x))
		if err != nil || n < 0 {
			return 0, false
		}
		return n, true
	}
	return 0, false
}
