package server

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
)

// Config defaults.
const (
	MaxBodyBytesDefault     = 8 << 20
	SubmitWaitDefault       = time.Second
	BalanceCacheDefault     = 10 * time.Second
	PingbackTimeoutDefault  = 5 * time.Second
	PingbackAttemptsDefault = 3
	PingbackParallelDefault = 16
	PingbackGraceDefault    = 15 * time.Second
	WaitMaxDefault          = 60 * time.Second
	ReplayEveryDefault      = time.Second
	BulkMaxIDs              = 100
)

// Client is one user of the service, with its own key.
type Client struct {
	// Name identifies the client; it is its tenant in the queue. Letters,
	// digits, '.', '_' and '-'.
	Name string `json:"name"`
	// Key is what the client sends as key= or Authorization: Bearer.
	Key string `json:"key"`
	// Weight is its fair share among clients. Default 1.
	Weight int `json:"weight,omitempty"`
	// MaxInflight bounds its unfinished tasks. Zero means no bound.
	// Both bounds hold for the whole front when the Backend keeps them
	// across its replicas (FrontLimiter).
	MaxInflight int `json:"max_inflight,omitempty"`
	// Rate bounds its submits, in tasks per second (burst: one second's
	// worth, at least one). Zero means no bound.
	Rate float64 `json:"rate,omitempty"`
	// Admin may see every client's tasks and use the dashboard.
	Admin bool `json:"admin,omitempty"`
	// PriorityMin and PriorityMax are the range of priorities the client
	// may ask for: a task's priority (PriorityDefault when it names none)
	// is moved into [PriorityMin, PriorityMax], never refused. Priority is
	// global across clients, so an operator keeps a client from outranking
	// the others with PriorityMin (e.g. 5: its tasks never go before the
	// default). Defaults 0 and no upper bound.
	PriorityMin int `json:"priority_min,omitempty"`
	PriorityMax int `json:"priority_max,omitempty"`
}

// clamp moves a client's task into the operator's limits: its priority
// into the client's range, its max_attempts down to maxAttempts. It runs
// before the task is validated, and leaves a value validation refuses (a
// negative one) as it is, for validation to refuse.
func (c Client) clamp(t *captchaq.Task, maxAttempts int) {
	if t.Priority >= 0 {
		p := cmp.Or(t.Priority, captchaq.PriorityDefault)
		p = max(p, c.PriorityMin)
		if c.PriorityMax > 0 {
			p = min(p, c.PriorityMax)
		}
		t.Priority = p
	}
	if maxAttempts > 0 && t.MaxAttempts >= 0 {
		t.MaxAttempts = min(cmp.Or(t.MaxAttempts, maxAttempts), maxAttempts)
	}
}

var clientName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// LoadClients reads a clients file: a JSON array of Client.
func LoadClients(path string) ([]Client, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("clients file: %w", err)
	}
	var cs []Client
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cs); err != nil {
		return nil, fmt.Errorf("clients file %s: %v (want a JSON array like [{\"name\":\"qa\",\"key\":\"…\",\"weight\":2,\"max_inflight\":50,\"rate\":20}])", path, err)
	}
	if err := checkClients(cs); err != nil {
		return nil, fmt.Errorf("clients file %s: %w", path, err)
	}
	return cs, nil
}

func checkClients(cs []Client) error {
	if len(cs) == 0 {
		return errors.New("no clients: add at least one {\"name\",\"key\"}")
	}
	names, keys := map[string]bool{}, map[string]bool{}
	var errs []error
	for i, c := range cs {
		switch {
		case !clientName.MatchString(c.Name):
			errs = append(errs, fmt.Errorf("[%d].name: %q must be 1-64 letters, digits, '.', '_' or '-'", i, c.Name))
		case names[c.Name]:
			errs = append(errs, fmt.Errorf("[%d].name: %q appears twice", i, c.Name))
		}
		switch {
		case len(c.Key) < 8:
			errs = append(errs, fmt.Errorf("[%d].key: client %q needs a key of at least 8 characters", i, c.Name))
		case keys[c.Key]:
			errs = append(errs, fmt.Errorf("[%d].key: client %q shares its key with another client", i, c.Name))
		}
		if c.Weight < 0 || c.MaxInflight < 0 || c.Rate < 0 {
			errs = append(errs, fmt.Errorf("[%d]: client %q: weight, max_inflight and rate must not be negative", i, c.Name))
		}
		if c.PriorityMin < 0 || c.PriorityMax < 0 || (c.PriorityMax > 0 && c.PriorityMax < c.PriorityMin) {
			errs = append(errs, fmt.Errorf("[%d]: client %q: priority_min %d and priority_max %d: give 0 or more, priority_max at least priority_min (or 0: no upper bound)", i, c.Name, c.PriorityMin, c.PriorityMax))
		}
		names[c.Name], keys[c.Key] = true, true
	}
	return errors.Join(errs...)
}

// Config configures a Server. Clients are required, and either Queue or
// Backend.
type Config struct {
	// Queue configures the queue the server builds and owns, which solves
	// the tasks itself. Its TenantWeights, OnResult, OnPause and
	// PingbackURL are set by the server; Store must be set when the server
	// is to report it as open.
	Queue captchaq.Config
	// Backend, when set, is where the tasks go instead (Queue must then be
	// the zero value): an amqp.Gateway, say, that hands them to a RabbitMQ
	// fleet. The server attaches to it in New and starts and shuts it down
	// with itself.
	Backend Backend
	// Clients are the keys the server accepts.
	Clients []Client
	// Replica, when set, names this server among the replicas of a front:
	// every series of /metrics carries the label replica="Replica", so
	// the replicas' series stay apart where they are scraped together.
	Replica string
	// PublicURL, when set, is where the provider can reach this server:
	// each provider is asked to call PublicURL/pingback/<secret> with its
	// own provider= and sig= (captchaq.Queue.PingbackHandler) when an
	// answer is ready (polling stays as the fallback). It must be a full
	// http or https URL with no user, query or fragment (CheckPublicURL).
	PublicURL string
	// Balance answers getbalance. Default: ERROR_BAD_PARAMETERS.
	Balance func(ctx context.Context) (float64, error)
	// Report forwards a client's reportbad (good false) or reportgood to
	// the provider of the solved result r, by the provider's captcha id
	// (r.CaptchaID; r.Provider names the provider in a queue of several).
	// What came of it is counted (captchaq.ReportOutcomeOf of its error;
	// captchaq serve's is internal/reportfwd's, which keeps to each
	// provider's report window). Default: nothing is sent (not_sent).
	Report func(ctx context.Context, r captchaq.Result, good bool) error
	// MaxAttempts is the most submissions a client's task may ask for: a
	// larger max_attempts is lowered to it, and a task that names none gets
	// it. Default: Queue.MaxAttempts, else captchaq.MaxAttemptsDefault.
	MaxAttempts int
	// MaxBodyBytes bounds a request body. Default MaxBodyBytesDefault.
	MaxBodyBytes int64
	// SubmitWait is how long a submit waits for room in a full queue
	// before it is refused. Default SubmitWaitDefault. It applies to the
	// server's own queue; a Config.Backend's submit (publish, confirm,
	// record) is bounded by 30 s instead.
	SubmitWait time.Duration
	// PingbackTimeout, PingbackAttempts and PingbackParallel shape the
	// calls to clients' pingback URLs.
	PingbackTimeout  time.Duration
	PingbackAttempts int
	PingbackParallel int
	// PingbackLedger keeps the pingbacks owed durable, so that one this
	// process does not send (it dies) is sent by another replica of the
	// front, or by this one started again. Default: the local queue's
	// Queue.Store when it is a captchaq.PingbackLedger; with a Backend,
	// give its Store here. Nil: pingbacks are kept in memory only.
	PingbackLedger captchaq.PingbackLedger
	// PingbackGrace is how long a pingback owed stays with the process
	// that recorded its result before any replica sends it (from
	// PingbackLedger, looked for every PingbackGrace, at most 5 s).
	// Default PingbackGraceDefault.
	PingbackGrace time.Duration
	// MaxTasksPerRequest bounds the tasks of one POST /v1/tasks (413
	// past it). MaxStreamsPerClient and MaxStreams bound open event
	// streams, MaxWaitsPerClient and MaxWaits long polls (?wait=), per
	// client and overall (429 past them). Defaults: the *Default
	// constants.
	//
	// Request bodies being read are counted as their bytes arrive (429,
	// on the front ERROR_NO_SLOT_AVAILABLE, past a bound): a client's
	// (the API's, and in.php and res.php with key= in the query string)
	// take their first MaxBodyPerClient bytes from the client's own share,
	// which no other client can take, the rest from a pool of
	// MaxBodyInflight bytes shared by the clients; the front's bodies
	// whose key is only inside them take at most MaxBodyPerAddress from
	// one source address (IPv6 by /64) out of a pool of MaxBodyInflight
	// of their own, and are cut off unless they arrive within
	// KeylessBodyTimeout. Defaults: MaxBodyInflightDefault,
	// MaxBodyBytes, twice MaxBodyBytes, KeylessBodyTimeoutDefault.
	//
	// MaxConns and MaxConnsPerAddress cap the connections open at once on
	// the server's Listener, overall and from one source address (IPv6 by
	// /64). Defaults MaxConnsDefault and MaxConnsPerAddressDefault.
	MaxTasksPerRequest  int
	MaxConns            int
	MaxConnsPerAddress  int
	MaxBodyInflight     int64
	MaxBodyPerClient    int64
	MaxBodyPerAddress   int64
	KeylessBodyTimeout  time.Duration
	MaxStreamsPerClient int
	MaxStreams          int
	MaxWaitsPerClient   int
	MaxWaits            int
	// ReplayEvery is the least time between the starts of two dead-letter
	// replays of one client (POST /v1/deadletters/replay; 429 with
	// Retry-After sooner); a client has one replay running at a time (429
	// while it runs). Default ReplayEveryDefault.
	ReplayEvery time.Duration
	// PingbackAllow lets clients' pingbacks reach these internal networks
	// (loopback, private, link-local, CGNAT, metadata addresses are refused
	// otherwise, checked on every connect). Default none; for tests and an
	// operator's own receivers.
	PingbackAllow []netip.Prefix
	// ObserveRequest, when set, is called with each front or API request's
	// route and the time spent in its handler (for load tests).
	ObserveRequest func(route string, d time.Duration)
	// HistoryEvery is how often the dashboard's charts take a sample, and
	// HistoryWindow how far back they reach (kept in memory, served at
	// /v1/history). Defaults HistoryEveryDefault and HistoryWindowDefault.
	HistoryEvery, HistoryWindow time.Duration
	// Logger receives the server's logs. Default: the Queue's, else discard.
	Logger *slog.Logger
}

// withDefaults returns c with its zero fields filled in. It checks
// nothing: validate does, on its result.
func (c Config) withDefaults() Config {
	c.HistoryEvery = cmp.Or(c.HistoryEvery, HistoryEveryDefault)
	c.HistoryWindow = cmp.Or(c.HistoryWindow, HistoryWindowDefault)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, c.Queue.MaxAttempts, captchaq.MaxAttemptsDefault)
	c.MaxBodyBytes = cmp.Or(c.MaxBodyBytes, MaxBodyBytesDefault)
	c.SubmitWait = cmp.Or(c.SubmitWait, SubmitWaitDefault)
	c.PingbackTimeout = cmp.Or(c.PingbackTimeout, PingbackTimeoutDefault)
	c.PingbackGrace = cmp.Or(c.PingbackGrace, PingbackGraceDefault)
	c.PingbackAttempts = cmp.Or(c.PingbackAttempts, PingbackAttemptsDefault)
	c.PingbackParallel = cmp.Or(c.PingbackParallel, PingbackParallelDefault)
	c.MaxTasksPerRequest = cmp.Or(c.MaxTasksPerRequest, MaxTasksPerRequestDefault)
	c.MaxStreamsPerClient = cmp.Or(c.MaxStreamsPerClient, MaxStreamsPerClientDefault)
	c.MaxStreams = cmp.Or(c.MaxStreams, MaxStreamsDefault)
	c.MaxWaitsPerClient = cmp.Or(c.MaxWaitsPerClient, MaxWaitsPerClientDefault)
	c.MaxWaits = cmp.Or(c.MaxWaits, MaxWaitsDefault)
	c.ReplayEvery = cmp.Or(c.ReplayEvery, ReplayEveryDefault)
	c.MaxConns = cmp.Or(c.MaxConns, MaxConnsDefault)
	c.MaxConnsPerAddress = cmp.Or(c.MaxConnsPerAddress, MaxConnsPerAddressDefault)
	c.MaxBodyInflight = cmp.Or(c.MaxBodyInflight, max(MaxBodyInflightDefault, c.MaxBodyBytes))
	c.MaxBodyPerClient = cmp.Or(c.MaxBodyPerClient, c.MaxBodyBytes)
	c.MaxBodyPerAddress = cmp.Or(c.MaxBodyPerAddress, 2*c.MaxBodyBytes)
	c.KeylessBodyTimeout = cmp.Or(c.KeylessBodyTimeout, KeylessBodyTimeoutDefault)
	c.Logger = cmp.Or(c.Logger, c.Queue.Logger, discardLogger)
	return c
}

// discardLogger is the default Logger: the server logs nothing unless it
// is given a Logger (here or in Queue).
var discardLogger = slog.New(slog.DiscardHandler)

// validate reports every problem of a Config that went through
// withDefaults at once, each naming the field and the fix.
func (c Config) validate() error {
	var errs []error
	if err := checkClients(c.Clients); err != nil {
		errs = append(errs, fmt.Errorf("server: Clients: %w", err))
	}
	if c.HistoryEvery < 0 || c.HistoryWindow < c.HistoryEvery {
		errs = append(errs, fmt.Errorf("server: HistoryEvery %v and HistoryWindow %v: give a positive HistoryEvery and a HistoryWindow at least as long (or neither, for %v and %v)", c.HistoryEvery, c.HistoryWindow, HistoryEveryDefault, HistoryWindowDefault))
	}
	if c.MaxAttempts < 0 {
		errs = append(errs, fmt.Errorf("server: MaxAttempts: must be positive, got %d", c.MaxAttempts))
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"MaxTasksPerRequest", int64(c.MaxTasksPerRequest)}, {"MaxStreamsPerClient", int64(c.MaxStreamsPerClient)},
		{"MaxStreams", int64(c.MaxStreams)}, {"MaxWaitsPerClient", int64(c.MaxWaitsPerClient)}, {"MaxWaits", int64(c.MaxWaits)},
		{"MaxBodyBytes", c.MaxBodyBytes}, {"MaxBodyInflight", c.MaxBodyInflight}, {"SubmitWait", int64(c.SubmitWait)},
		{"MaxConns", int64(c.MaxConns)}, {"MaxConnsPerAddress", int64(c.MaxConnsPerAddress)},
		{"MaxBodyPerClient", c.MaxBodyPerClient}, {"MaxBodyPerAddress", c.MaxBodyPerAddress}, {"KeylessBodyTimeout", int64(c.KeylessBodyTimeout)},
		{"PingbackTimeout", int64(c.PingbackTimeout)}, {"PingbackAttempts", int64(c.PingbackAttempts)},
		{"PingbackParallel", int64(c.PingbackParallel)}, {"ReplayEvery", int64(c.ReplayEvery)},
		{"PingbackGrace", int64(c.PingbackGrace)},
	} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("server: %s: must not be negative (0 for the default)", f.name))
		}
	}
	if c.PublicURL != "" && c.Backend == nil {
		if reason := CheckPublicURL(c.PublicURL); reason != "" {
			errs = append(errs, fmt.Errorf("server: Config.PublicURL: %s", reason))
		}
	}
	if c.Backend != nil {
		if c.Queue.Provider != nil || c.Queue.Store != nil {
			errs = append(errs, errors.New("server: Config.Queue and Config.Backend: set one, not both (Queue builds a local queue; Backend replaces it)"))
		}
		if c.PublicURL != "" {
			errs = append(errs, errors.New("server: Config.PublicURL: provider pingbacks need the local queue; with a Backend the provider is the Backend's business"))
		}
	}
	return errors.Join(errs...)
}

// CheckPublicURL returns why v cannot be Config.PublicURL, or "": the
// provider is sent v with /pingback/<secret> appended, so it must be a
// full http or https URL (a scheme-less one fails every submit), with no
// user or password, query or fragment, and no spaces around it.
func CheckPublicURL(v string) string {
	if strings.TrimSpace(v) != v {
		return fmt.Sprintf("%q has spaces around it; give the URL alone", v)
	}
	if reason := provider.CheckCallbackURL(v); reason != "" {
		return reason + "; give this server's address as the provider reaches it, e.g. https://captchaq.example.com"
	}
	if u, _ := url.Parse(v); u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(v, "#") {
		return fmt.Sprintf("%q has a query or fragment; give the server's base URL (the pingback path is appended to it)", v)
	}
	return ""
}
