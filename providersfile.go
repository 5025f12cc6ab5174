package captchaq

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/provider/createtask"
)

// ProvidersEnv is where ParseProviders reads keys and how it builds
// clients. Zero fields take the defaults.
type ProvidersEnv struct {
	// Getenv reads key_env variables. Default os.Getenv.
	Getenv func(string) string
	// ReadFile reads key_file files. Default os.ReadFile.
	ReadFile func(string) ([]byte, error)
	// NewClient builds a provider's client. Default a *provider.Client
	// with the given base URL, key and methods.
	NewClient func(cfg provider.ClientConfig) (Provider, error)
	// NewCreateTaskClient builds the client of a provider whose protocol
	// is "createtask". Default a *createtask.Client.
	NewCreateTaskClient func(cfg provider.ClientConfig) (Provider, error)
	// WithoutKeys reads the file for routing and validation only, as a
	// door that solves nothing does (the fleet's gateway, captchaq
	// enqueue): no key is read, no client built, and each Provider is
	// nil. Such a door needs no provider key.
	WithoutKeys bool
}

// providersFields are the fields of one entry of a providers file.
var providersFields = []string{
	"name", "url", "key_env", "key_file", "threads", "plan", "methods",
	"price_per_1000", "spill_after", "max_spend_per_hour", "down_after", "protocol", "poll_gap",
	"poll_budget", "result_window", "report_window", "proxy_addresses",
}

// ParseProviders reads a providers file: a JSON array of providers, the
// first preferred, as `captchaq --providers FILE` takes it:
//
//	[{"name": "main", "url": "https://ocr.captchaai.com", "key_env": "CAPTCHAAI_KEY", "threads": 20},
//	 {"name": "backup", "url": "https://api.example", "key_env": "BACKUP_KEY", "threads": 100,
//	  "methods": ["hcaptcha", "turnstile", "userrecaptcha", "base64"],
//	  "price_per_1000": {"default": 2.99, "base64": 0.5},
//	  "spill_after": "5s", "max_spend_per_hour": 3.00}]
//
// Each entry has a name and a url, and its key in the environment
// variable key_env names or the file key_file names: never in the file
// itself. threads (or plan, a plan's name), methods, price_per_1000,
// spill_after, max_spend_per_hour, down_after and poll_gap (durations as
// "5s") are the ProviderConfig fields of the same names; poll_gap
// defaults to the service's published rule for a createtask provider
// (createtask.PublishedPollGap: 2 s, 5 s at 2captcha, 3 s at CapSolver)
// and to the queue's PollGap for in.php. poll_budget (polls of one task)
// and result_window default to the service's published limits
// (createtask.PublishedPollBudget: 120 polls and 5m at CapMonster Cloud
// and CapSolver, none elsewhere); 0 says none. report_window (reports
// later than it after the answer are not sent) defaults to
// provider.PublishedReportWindow. proxy_addresses ("host" or "public_ip")
// defaults to createtask.PublishedProxyAddresses. methods defaults to
// CaptchaAI's for CaptchaAI's URL, createtask.Methods for a createtask
// provider (which may list createtask.Carried), else to provider.CommonMethods. Field
// names are lower case; an unknown field is refused. The error lists every
// problem at once, each naming the entry, the field and the fix, and never
// carries a key.
func ParseProviders(data []byte, env ProvidersEnv) ([]ProviderConfig, error) {
	if env.Getenv == nil {
		env.Getenv = os.Getenv
	}
	if env.ReadFile == nil {
		env.ReadFile = os.ReadFile
	}
	if env.NewClient == nil {
		env.NewClient = func(cfg provider.ClientConfig) (Provider, error) { return provider.NewClient(cfg) }
	}
	if env.NewCreateTaskClient == nil {
		env.NewCreateTaskClient = func(cfg provider.ClientConfig) (Provider, error) { return createtask.NewClient(cfg) }
	}
	var entries []map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&entries); err != nil {
		return nil, fmt.Errorf("providers file: not a JSON array of provider objects (%v); see the format in docs/providers.md", err)
	}
	if dec.More() {
		return nil, errors.New("providers file: text after the array; the file is one JSON array")
	}
	if len(entries) == 0 {
		return nil, errors.New("providers file: the array is empty; list at least one provider")
	}
	var errs []error
	out := make([]ProviderConfig, 0, len(entries))
	for i, e := range entries {
		pc, perrs := parseProviderEntry(i, e, env)
		errs = append(errs, perrs...)
		out = append(out, pc)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("providers file: %w", errors.Join(errs...))
	}
	// The Config checks (names unique, methods known, ...) with the
	// file's field names.
	cfg := Config{Providers: out}
	fileNames := map[string]string{
		"Name": "name", "Provider": "url", "Threads": "threads", "Methods": "methods", "PricePer1000": "price_per_1000",
		"SpillAfter": "spill_after", "MaxSpendPerHour": "max_spend_per_hour", "DownAfter": "down_after",
		"PollGap": "poll_gap", "PollBudget": "poll_budget", "ResultWindow": "result_window",
		"ReportWindow":   "report_window",
		"ProxyAddresses": "proxy_addresses",
	}
	if perrs := cfg.providersWithDefaults().checkProviders(func(i int, field string) string {
		return fmt.Sprintf("providers[%d] (%s).%s", i, out[i].Name, fileNames[field])
	}, !env.WithoutKeys); len(perrs) > 0 {
		return nil, fmt.Errorf("providers file: %w", errors.Join(perrs...))
	}
	return out, nil
}

// parseProviderEntry reads entry i of a providers file: its ProviderConfig
// (with its client, unless env.WithoutKeys) and every problem it has.
func parseProviderEntry(i int, e map[string]json.RawMessage, env ProvidersEnv) (ProviderConfig, []error) {
	r := newEntryReader(i, e)
	r.checkFields()
	var pc ProviderConfig
	pc.Name = r.str("name")
	if _, ok := e["name"]; !ok {
		r.fail("name", "required: the provider's name in results and metrics, e.g. \"main\"")
	}
	base := r.baseURL()
	pc.Threads = r.threads()
	createTask, newClient := r.protocol(base, env)
	pc.Methods = r.methods(base, createTask)
	if raw, ok := e["price_per_1000"]; ok {
		if err := json.Unmarshal(raw, &pc.PricePer1000); err != nil {
			r.fail("price_per_1000", "must be an object of prices by method, e.g. {\"default\": 2.99, \"base64\": 0.5}")
		}
	}
	pc.SpillAfter = r.dur("spill_after")
	pc.MaxSpendPerHour = r.num("max_spend_per_hour")
	pc.DownAfter = r.dur("down_after")
	pc.PollGap = r.dur("poll_gap")
	if _, ok := e["poll_gap"]; ok && pc.PollGap == 0 {
		r.fail("poll_gap", "must be at least %v; leave it out for the protocol's default (%v for createtask, the queue's PollGap for in.php)", PollGapMin, createtask.PollGapDefault)
	}
	pc.PollBudget, pc.ResultWindow = r.pollBudget()
	pc.ReportWindow = r.window("report_window", "after the answer")
	pc.ProxyAddresses = provider.ProxyAddresses(r.str("proxy_addresses"))

	if env.WithoutKeys {
		return pc, r.errs
	}
	key := providerKey(r.fail, r.str("key_env"), r.str("key_file"), env)
	if key != "" && base != "" && len(r.errs) == 0 {
		methods := pc.Methods
		if methods == nil {
			methods = provider.CommonMethods
		}
		cl, err := newClient(provider.ClientConfig{BaseURL: base, Key: key, Methods: methods})
		if err != nil {
			r.fail("url", "%v", err)
		}
		pc.Provider = cl
	}
	return pc, r.errs
}

// entryReader reads the fields of one entry of a providers file and
// collects its problems, each naming the entry and the field.
type entryReader struct {
	e    map[string]json.RawMessage
	name string // "providers[i] (name)"
	errs []error
}

func newEntryReader(i int, e map[string]json.RawMessage) *entryReader {
	r := &entryReader{e: e, name: fmt.Sprintf("providers[%d]", i)}
	if raw, ok := e["name"]; ok {
		var n string
		if json.Unmarshal(raw, &n) == nil && n != "" {
			r.name = fmt.Sprintf("providers[%d] (%s)", i, n)
		}
	}
	return r
}

func (r *entryReader) fail(field, format string, args ...any) {
	r.errs = append(r.errs, fmt.Errorf("%s.%s: %s", r.name, field, fmt.Sprintf(format, args...)))
}

// checkFields refuses the fields the format does not have, saying which
// it meant where it can (a name in another case, a key).
func (r *entryReader) checkFields() {
	for k := range r.e {
		if slices.Contains(providersFields, k) {
			continue
		}
		lk := strings.ToLower(k)
		switch {
		case slices.Contains(providersFields, lk):
			r.fail(k, "write the field name in lower case: %q", lk)
		case lk == "key" || lk == "api_key" || lk == "apikey":
			r.fail(k, "a key is never read from the providers file; put it in an environment variable named by \"key_env\", or a file named by \"key_file\"")
		default:
			r.fail(k, "unknown field; the fields are %s", strings.Join(providersFields, ", "))
		}
	}
}

func (r *entryReader) str(field string) string {
	raw, ok := r.e[field]
	if !ok {
		return ""
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		r.fail(field, "must be a string, got %s", shortJSON(raw))
	}
	return strings.TrimSpace(s)
}

func (r *entryReader) num(field string) float64 {
	raw, ok := r.e[field]
	if !ok {
		return 0
	}
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil {
		r.fail(field, "must be a number, got %s", shortJSON(raw))
	}
	return f
}

func (r *entryReader) dur(field string) time.Duration {
	s := r.str(field)
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		r.fail(field, "%q is not a duration; write it as \"5s\", \"500ms\" or \"2m\"", s)
	}
	return d
}

// pollBudget is the entry's poll_budget and result_window as
// ProviderConfig takes them: left out, 0 (the service's published
// limits); 0 in the file, -1 (none).
func (r *entryReader) pollBudget() (polls int, window time.Duration) {
	if _, ok := r.e["poll_budget"]; ok {
		n := r.num("poll_budget")
		if n < 0 || n != float64(int(n)) {
			r.fail("poll_budget", "must be a whole number of polls a task, or 0 for none; got %v", n)
		}
		polls = cmp.Or(int(n), -1)
	}
	return polls, r.window("result_window", "after the submit")
}

// window is the entry's duration field as ProviderConfig takes it: left
// out, 0 (the service's published value); "0s" in the file, -1 (none).
func (r *entryReader) window(field, after string) time.Duration {
	if _, ok := r.e[field]; !ok {
		return 0
	}
	w := r.dur(field)
	if w < 0 {
		r.fail(field, "must be a duration %s, or \"0s\" for none; got %v", after, w)
	}
	return cmp.Or(w, -1)
}

// baseURL is the entry's url, or "" when it has none or none usable.
func (r *entryReader) baseURL() string {
	base := r.str("url")
	if base == "" {
		r.fail("url", "required: the service's base URL, e.g. %s", provider.BaseURLDefault)
	} else if u, err := url.Parse(base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		r.fail("url", "%q is not an absolute http(s) URL; use e.g. %s", base, provider.BaseURLDefault)
		base = ""
	} else if u.User != nil {
		// Not quoted: it would show the password.
		r.fail("url", "must not carry a user or password (they would be sent and logged with it); give the service's base URL, e.g. %s", provider.BaseURLDefault)
		base = ""
	} else if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		r.fail("url", "%q must not carry a query or fragment; give the service's base URL, e.g. %s", base, provider.BaseURLDefault)
		base = ""
	}
	return base
}

// threads is the entry's threads, or its plan's.
func (r *entryReader) threads() int {
	threads := r.num("threads")
	if threads != float64(int(threads)) || threads < 0 {
		r.fail("threads", "must be a whole number of threads, got %v", threads)
	}
	n := int(threads)
	if plan := r.str("plan"); plan != "" {
		if n != 0 {
			r.fail("plan", "give threads or plan, not both")
		} else if pn, err := provider.PlanThreads(plan); err != nil {
			r.fail("plan", "%v", err)
		} else {
			n = pn
		}
	}
	return n
}

// protocol reads the entry's protocol: whether it is createTask, and the
// client env builds for it.
func (r *entryReader) protocol(base string, env ProvidersEnv) (createTask bool, newClient func(provider.ClientConfig) (Provider, error)) {
	newClient = env.NewClient
	protocol := r.str("protocol")
	switch protocol {
	case "", "in.php":
	case "createtask":
		newClient = env.NewCreateTaskClient
		if isCaptchaAI(base) {
			r.fail("protocol", "CaptchaAI speaks only in.php/res.php: leave protocol out for its URL")
		}
	default:
		r.fail("protocol", "%q is not a protocol captchaq speaks; use \"in.php\" (the default) or \"createtask\"", protocol)
	}
	return protocol == "createtask", newClient
}

// methods is the entry's methods, or its protocol's or CaptchaAI's when
// it names none (nil: provider.CommonMethods, filled in later).
func (r *entryReader) methods(base string, createTask bool) []string {
	raw, ok := r.e["methods"]
	switch {
	case !ok && createTask:
		return createtask.Methods
	case !ok && isCaptchaAI(base):
		return provider.CaptchaAIMethods
	case !ok:
		return nil
	}
	var methods []string
	if err := json.Unmarshal(raw, &methods); err != nil {
		r.fail("methods", "must be an array of method names, e.g. [\"hcaptcha\", \"turnstile\"]")
	} else if methods == nil {
		methods = []string{}
	}
	for j, m := range methods {
		switch {
		case !slices.Contains(provider.KnownMethods, m):
			r.fail("methods", "[%d] %q is not a method captchaq can validate; use one of %s", j, m, strings.Join(provider.KnownMethods, ", "))
		case createTask && !slices.Contains(createtask.Carried, m):
			r.fail("methods", "[%d] %q has no createTask type; a createtask provider may list %s", j, m, strings.Join(createtask.Carried, ", "))
		}
	}
	return methods
}

// providerKey reads an entry's key from its key_env variable or key_file.
func providerKey(fail func(field, format string, args ...any), keyEnv, keyFile string, env ProvidersEnv) string {
	switch {
	case keyEnv != "" && keyFile != "":
		fail("key_env", "give key_env or key_file, not both")
	case keyEnv != "":
		if k := strings.TrimSpace(env.Getenv(keyEnv)); k != "" {
			return k
		}
		fail("key_env", "the environment variable %s is not set; export it with the provider's account key", keyEnv)
	case keyFile != "":
		b, err := env.ReadFile(keyFile)
		if err != nil {
			var pe *os.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			fail("key_file", "cannot read %q: %v", keyFile, err)
			return ""
		}
		if k := strings.TrimSpace(string(b)); k != "" {
			return k
		}
		fail("key_file", "%q is empty; put the provider's account key in it", keyFile)
	default:
		fail("key_env", "required: the environment variable that holds the account key (or key_file, a file that does)")
	}
	return ""
}

// isCaptchaAI reports whether base is CaptchaAI's service.
func isCaptchaAI(base string) bool {
	u, err := url.Parse(base)
	if err != nil {
		return false
	}
	h := strings.ToLower(u.Hostname())
	return h == "captchaai.com" || strings.HasSuffix(h, ".captchaai.com")
}

func shortJSON(raw json.RawMessage) string {
	s := string(raw)
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return s
}
