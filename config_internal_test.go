package captchaq

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq/internal/lane"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/provider/createtask"
)

// TestConfigDefaults pins every default withDefaults fills in.
func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c := Config{}.withDefaults()
	if c.Threads != ThreadsDefault || c.PollInterval != PollIntervalDefault || !c.adaptive ||
		c.PollGap != PollGapDefault || c.MaxQueued != MaxQueuedMin || c.MaxAttempts != MaxAttemptsDefault ||
		c.RetryBackoff != RetryBackoffDefault || c.RetryBackoffMax != RetryBackoffMaxDefault ||
		c.AgingInterval != AgingIntervalDefault || c.Store == nil || c.Logger != discardLogger || c.Now == nil {
		t.Errorf("defaults: %+v", c)
	}
	c = Config{Plan: "VIP-1", AgingInterval: -time.Second, PollInterval: time.Minute}.withDefaults()
	if c.Threads != 1000 || c.MaxQueued != 20000 || c.AgingInterval != 0 || c.adaptive {
		t.Errorf("Plan VIP-1, AgingInterval -1s, PollInterval 1m: Threads %d MaxQueued %d AgingInterval %v adaptive %v, want 1000, 20000, 0, false",
			c.Threads, c.MaxQueued, c.AgingInterval, c.adaptive)
	}
	if c := (Config{Threads: 7, Plan: "VIP-1"}).withDefaults(); c.Threads != 7 {
		t.Errorf("Threads 7 with a Plan: Threads %d, want 7", c.Threads)
	}
}

// TestConfigListsEveryProblem: New reports all the problems of a Config
// at once, each naming its field.
func TestConfigListsEveryProblem(t *testing.T) {
	t.Parallel()
	_, err := New(Config{
		Plan: "GOLD", PollGap: time.Microsecond, PollInterval: time.Millisecond,
		MaxQueued: -1, MaxAttempts: -2, RetryBackoff: time.Minute, RetryBackoffMax: time.Second,
		TenantWeights: map[string]int{"a": 0}, PingbackSecret: []byte("short"),
	})
	want := `captchaq: invalid Config: Provider: required (e.g. a *provider.Client), or Providers
Plan: unknown plan "GOLD": use one of BASIC, STANDARD, ADVANCE, PREMIUM, CORPORATE, ENTERPRISE, VIP-1, VIP-2, VIP-3, or set the thread count directly
PollGap: must be at least 1ms, got 1µs
PollInterval: must be at least 10ms, got 1ms
PingbackSecret: must be at least 16 bytes (e.g. 32 from crypto/rand), got 5
MaxQueued: must be positive, got -1
MaxAttempts: must be positive, got -2
RetryBackoff, RetryBackoffMax: need 0 < RetryBackoff <= RetryBackoffMax, got 1m0s and 1s
TenantWeights["a"]: must be positive, got 0`
	if err == nil || err.Error() != want {
		t.Errorf("New: %v\nwant: %s", err, want)
	}
	_, err = New(Config{Threads: -3})
	want = "captchaq: invalid Config: Provider: required (e.g. a *provider.Client), or Providers\nThreads: must be 0 (from Plan) or more, got -3"
	if err == nil || err.Error() != want {
		t.Errorf("New: %v\nwant: %s", err, want)
	}
}

// TestConfigProviders: withDefaults fills each provider's defaults and sums
// their threads; validate refuses the one-provider fields beside them and
// lists each provider's problems with the rest.
func TestConfigProviders(t *testing.T) {
	t.Parallel()
	var p Provider = nopProvider{}
	c := Config{Providers: []ProviderConfig{{Name: "main", Provider: p, Threads: 7}, {Name: "backup", Provider: p}}}.withDefaults()
	if c.providersThreads() != 7+ThreadsDefault || c.Threads != 0 || c.MaxQueued != MaxQueuedMin || c.Providers[1].Threads != ThreadsDefault ||
		c.Providers[1].DownAfter != DownAfterDefault || len(c.Providers[1].Methods) == 0 {
		t.Errorf("defaults: providers' threads %d, Threads %d, MaxQueued %d, backup %+v", c.providersThreads(), c.Threads, c.MaxQueued, c.Providers[1])
	}
	if err := c.validate(); err != nil {
		t.Errorf("valid providers: %v", err)
	}
	// MaxQueued's default counts the providers' threads: 20 a thread.
	if c := (Config{Providers: []ProviderConfig{{Name: "a", Provider: p, Threads: 60}, {Name: "b", Provider: p, Threads: 40}}}).withDefaults(); c.MaxQueued != 2000 {
		t.Errorf("providers with 100 threads: MaxQueued %d, want 2000", c.MaxQueued)
	}
	for _, lone := range []Config{{Provider: p}, {Threads: 1}, {Plan: "BASIC"}} {
		lone.Providers = []ProviderConfig{{Name: "main", Provider: p}}
		want := "captchaq: invalid Config: Provider, Threads, Plan: leave them unset with Providers (each provider has its own Threads)"
		if _, err := New(lone); err == nil || err.Error() != want {
			t.Errorf("New(%+v): %v\nwant: %s", lone, err, want)
		}
	}
	bad := Config{Threads: 3, MaxAttempts: -1, Providers: []ProviderConfig{{Name: "main", Provider: p}, {Name: "main", Threads: -2}}}
	_, err := New(bad)
	want := "captchaq: invalid Config: Provider, Threads, Plan: leave them unset with Providers (each provider has its own Threads)\n" +
		"Providers[1].Name: \"main\" is used twice; give each provider its own name\n" +
		"Providers[1].Provider: required (e.g. a *provider.Client)\n" +
		"Providers[1].Threads: must be 0 (default 5) or more, got -2\n" +
		"MaxAttempts: must be positive, got -1"
	if err == nil || err.Error() != want {
		t.Errorf("New: %v\nwant: %s", err, want)
	}
}

// nopProvider is a Provider for configs that are never started.
type nopProvider struct{}

func (nopProvider) Submit(context.Context, provider.Task, string) (string, error) { return "", nil }
func (nopProvider) PollMany(context.Context, []string) ([]provider.PollResult, error) {
	return nil, nil
}

// ruledProvider is a nopProvider with a poll rule of its own, as a
// *createtask.Client has.
type ruledProvider struct {
	nopProvider
	gap time.Duration
}

func (p ruledProvider) PollGap() time.Duration { return p.gap }

// TestConfigPollGaps: each provider's gap between two polls of one task
// on the default scheduler is its ProviderConfig.PollGap, else its own
// rule, else Config.PollGap, else PollGapDefault; a queue of one Provider
// takes its rule unless Config.PollGap is set; a fixed PollInterval keeps
// only a provider's own rule; a gap below PollGapMin is refused by name.
func TestConfigPollGaps(t *testing.T) {
	t.Parallel()
	ruled := ruledProvider{gap: 2 * time.Second}
	gaps := func(c Config) (gaps, rules []time.Duration) {
		for _, l := range lane.NewSet(c.laneConfigs(nil)).Lanes() {
			gaps, rules = append(gaps, c.pollGapOf(l)), append(rules, c.pollRuleOf(l))
		}
		return gaps, rules
	}
	ps := []ProviderConfig{
		{Name: "inphp", Provider: nopProvider{}},
		{Name: "ruled", Provider: ruled},
		{Name: "ruled-set", Provider: ruled, PollGap: 3 * time.Second},
		{Name: "inphp-set", Provider: nopProvider{}, PollGap: 100 * time.Millisecond},
	}
	// rules: what a fixed PollInterval keeps too (0: no rule of its own).
	for _, c := range []struct {
		cfg         Config
		gaps, rules []time.Duration
	}{
		{Config{Providers: ps}, []time.Duration{PollGapDefault, 2 * time.Second, 3 * time.Second, 100 * time.Millisecond}, []time.Duration{0, 2 * time.Second, 3 * time.Second, 100 * time.Millisecond}},
		{Config{Providers: ps, PollGap: 700 * time.Millisecond}, []time.Duration{700 * time.Millisecond, 2 * time.Second, 3 * time.Second, 100 * time.Millisecond}, []time.Duration{0, 2 * time.Second, 3 * time.Second, 100 * time.Millisecond}},
		{Config{Provider: ruled}, []time.Duration{2 * time.Second}, []time.Duration{2 * time.Second}},
		{Config{Provider: ruled, PollGap: 5 * time.Second}, []time.Duration{5 * time.Second}, []time.Duration{2 * time.Second}},
		{Config{Provider: nopProvider{}}, []time.Duration{PollGapDefault}, []time.Duration{0}},
	} {
		c.cfg = c.cfg.withDefaults()
		if err := c.cfg.validate(); err != nil {
			t.Errorf("%+v: %v", c.cfg.Providers, err)
		}
		if gaps, rules := gaps(c.cfg); !slices.Equal(gaps, c.gaps) || !slices.Equal(rules, c.rules) {
			t.Errorf("gaps %v rules %v, want %v and %v", gaps, rules, c.gaps, c.rules)
		}
	}
	_, err := New(Config{Providers: []ProviderConfig{{Name: "a", Provider: ruled, PollGap: -time.Second}, {Name: "b", Provider: ruled, PollGap: time.Microsecond}}})
	want := "captchaq: invalid Config: Providers[0].PollGap: must be at least 1ms, got -1s; leave it out for the provider's own rule\n" +
		"Providers[1].PollGap: must be at least 1ms, got 1µs; leave it out for the provider's own rule"
	if err == nil || err.Error() != want {
		t.Errorf("New: %v\nwant: %s", err, want)
	}
}

// laneConfig carries every ProviderConfig field but PollGap (the
// poller's, pollGapOf) to the lane.Config field of the same name and
// type (or an interface of the same methods), with its value: the two
// cannot drift apart.
func TestLaneConfigCarriesProviderConfig(t *testing.T) {
	t.Parallel()
	var p ProviderConfig
	pv := reflect.ValueOf(&p).Elem()
	for i := range pv.NumField() {
		f := pv.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("x")
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(i + 1))
		case reflect.Float64:
			f.SetFloat(float64(i) + 0.5)
		case reflect.Slice:
			f.Set(reflect.ValueOf([]string{"x"}))
		case reflect.Map:
			f.Set(reflect.ValueOf(map[string]float64{"x": 1}))
		case reflect.Interface:
			f.Set(reflect.ValueOf(nopProvider{}))
		default:
			t.Fatalf("ProviderConfig.%s: a %s; fill it here", pv.Type().Field(i).Name, f.Kind())
		}
	}
	lc := reflect.ValueOf(laneConfig(p, nil, nil))
	for i := range pv.NumField() {
		name := pv.Type().Field(i).Name
		switch name {
		case "PollGap", "PollBudget", "ResultWindow", "ProxyAddresses", "ReportWindow":
			continue // the poller's, the submitter's (proxyAddressesOf) and the reports', not the lane's
		}
		got, want := lc.FieldByName(name), pv.Field(i).Type()
		// Provider is an interface of the same methods on both sides.
		if !got.IsValid() || got.Type() != want && !(want.Implements(got.Type()) && got.Type().Implements(want)) {
			t.Errorf("lane.Config has no field %s of ProviderConfig's type", name)
			continue
		}
		if !reflect.DeepEqual(got.Interface(), pv.Field(i).Interface()) {
			t.Errorf("lane.Config.%s = %v, want ProviderConfig's %v", name, got, pv.Field(i))
		}
	}
}

// TestPollBudgetDefaults: a provider's poll budget and result window are
// its service's published limits (CapMonster Cloud and CapSolver: 120
// polls in 5 minutes; 2captcha and in.php services: none) unless set;
// negative says none.
func TestPollBudgetDefaults(t *testing.T) {
	t.Parallel()
	ct := func(base string) Provider { return createTaskClient(t, base) }
	cfg := Config{Providers: []ProviderConfig{
		{Name: "capmonster", Provider: ct("https://api.capmonster.cloud")},
		{Name: "capsolver", Provider: ct("https://api.capsolver.com")},
		{Name: "twocaptcha", Provider: ct("https://api.2captcha.com")},
		{Name: "inphp", Provider: nopProvider{}},
		{Name: "set", Provider: ct("https://api.capmonster.cloud"), PollBudget: 60, ResultWindow: time.Minute},
		{Name: "none", Provider: ct("https://api.capmonster.cloud"), PollBudget: -1, ResultWindow: -1},
	}}.withDefaults()
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	lanes := lane.NewSet(cfg.laneConfigs(nil))
	want := []createtask.PollBudget{{Polls: 120, Window: 5 * time.Minute}, {Polls: 120, Window: 5 * time.Minute}, {}, {}, {Polls: 60, Window: time.Minute}, {}}
	for i, l := range lanes.Lanes() {
		if got := cfg.pollBudgetOf(l); got != want[i] {
			t.Errorf("%s: %+v, want %+v", cfg.Providers[i].Name, got, want[i])
		}
	}
}

// TestProxyAddressesDefaults: what a provider takes as a proxy's address
// is its service's published rule (Anti-Captcha and CapMonster Cloud:
// public IP addresses only; CapSolver, 2captcha and in.php services: host
// names too) unless set; a value that is no rule is refused, naming it.
func TestProxyAddressesDefaults(t *testing.T) {
	t.Parallel()
	ct := func(base string) Provider { return createTaskClient(t, base) }
	cfg := Config{Providers: []ProviderConfig{
		{Name: "anticaptcha", Provider: ct("https://api.anti-captcha.com")},
		{Name: "capmonster", Provider: ct("https://api.capmonster.cloud")},
		{Name: "capsolver", Provider: ct("https://api.capsolver.com")},
		{Name: "twocaptcha", Provider: ct("https://api.2captcha.com")},
		{Name: "inphp", Provider: nopProvider{}},
		{Name: "set", Provider: ct("https://api.anti-captcha.com"), ProxyAddresses: provider.ProxyAnyHost},
	}}.withDefaults()
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	ip, host := provider.ProxyPublicIP, provider.ProxyAnyHost
	want := []provider.ProxyAddresses{ip, ip, host, host, host, host}
	for i, l := range lane.NewSet(cfg.laneConfigs(nil)).Lanes() {
		if got := cfg.proxyAddressesOf(l); got != want[i] {
			t.Errorf("%s: %q, want %q", cfg.Providers[i].Name, got, want[i])
		}
	}
	bad := Config{Providers: []ProviderConfig{{Name: "a", Provider: nopProvider{}, ProxyAddresses: "ip"}}}.withDefaults()
	if err := bad.validate(); err == nil || !strings.Contains(err.Error(), `Providers[0].ProxyAddresses: "ip" is not a rule; use "host" or "public_ip"`) {
		t.Errorf("ProxyAddresses \"ip\": %v", err)
	}
}

// createTaskClient is a createtask client of the service at base.
func createTaskClient(t *testing.T, base string) Provider {
	t.Helper()
	c, err := createtask.NewClient(provider.ClientConfig{BaseURL: base, Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
