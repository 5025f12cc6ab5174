package captchaq_test

import (
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/provider/createtask"
)

// The issue's example file, word for word.
const exampleProviders = `[{"name": "main", "url": "https://ocr.captchaai.com", "key_env": "CAPTCHAAI_KEY", "threads": 20},
 {"name": "backup", "url": "https://api.example", "key_env": "BACKUP_KEY", "threads": 100,
  "methods": ["hcaptcha", "turnstile", "userrecaptcha", "base64"],
  "price_per_1000": {"default": 2.99, "base64": 0.5},
  "spill_after": "5s", "max_spend_per_hour": 3.00}]`

func providersEnv(vars map[string]string) captchaq.ProvidersEnv {
	return captchaq.ProvidersEnv{
		Getenv:   func(k string) string { return vars[k] },
		ReadFile: func(string) ([]byte, error) { return nil, fs.ErrNotExist },
	}
}

func TestParseProvidersExample(t *testing.T) {
	t.Parallel()
	ps, err := captchaq.ParseProviders([]byte(exampleProviders), providersEnv(map[string]string{"CAPTCHAAI_KEY": "k1", "BACKUP_KEY": "k2"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 {
		t.Fatalf("%d providers", len(ps))
	}
	m, b := ps[0], ps[1]
	if m.Name != "main" || m.Threads != 20 || !slices.Equal(m.Methods, provider.CaptchaAIMethods) || m.PricePer1000 != nil || m.Provider == nil {
		t.Fatalf("main: %+v", m)
	}
	if b.Name != "backup" || b.Threads != 100 || !slices.Equal(b.Methods, []string{"hcaptcha", "turnstile", "userrecaptcha", "base64"}) ||
		b.PricePer1000["default"] != 2.99 || b.PricePer1000["base64"] != 0.5 || b.SpillAfter != 5*time.Second || b.MaxSpendPerHour != 3 {
		t.Fatalf("backup: %+v", b)
	}
	if _, err := captchaq.New(captchaq.Config{Providers: ps}); err != nil {
		t.Fatalf("New with the parsed providers: %v", err)
	}
}

func TestParseProvidersErrors(t *testing.T) {
	t.Parallel()
	file := `[{"name": "main", "URL": "https://ocr.captchaai.com", "key": "secret-in-file", "key_env": "NOPE", "thread": 5},
	 {"name": "main", "url": "ftp://x", "key_file": "/nonexistent", "spill_after": "5 seconds", "methods": ["hcaptcha", "keycaptcha"]},
	 {"name": "userinfo", "url": "https://u:hunter2@api.example", "key_env": "NOPE"},
	 {"name": "query", "url": "https://api.example/?x=1", "key_env": "NOPE"}]`
	_, err := captchaq.ParseProviders([]byte(file), providersEnv(nil))
	if err == nil {
		t.Fatal("no error")
	}
	want := []string{
		`providers[0] (main).URL: write the field name in lower case: "url"`,
		`providers[0] (main).key: a key is never read from the providers file; put it in an environment variable named by "key_env", or a file named by "key_file"`,
		`providers[0] (main).thread: unknown field; the fields are name, url, key_env, key_file, threads, plan, methods, price_per_1000, spill_after, max_spend_per_hour, down_after, protocol, poll_gap, poll_budget, result_window, report_window, proxy_addresses`,
		`providers[0] (main).url: required: the service's base URL, e.g. https://ocr.captchaai.com`,
		`providers[0] (main).key_env: the environment variable NOPE is not set; export it with the provider's account key`,
		`providers[1] (main).url: "ftp://x" is not an absolute http(s) URL; use e.g. https://ocr.captchaai.com`,
		`providers[1] (main).spill_after: "5 seconds" is not a duration; write it as "5s", "500ms" or "2m"`,
		`providers[1] (main).key_file: cannot read "/nonexistent": file does not exist`,
		`providers[2] (userinfo).url: must not carry a user or password (they would be sent and logged with it); give the service's base URL, e.g. https://ocr.captchaai.com`,
		`providers[3] (query).url: "https://api.example/?x=1" must not carry a query or fragment; give the service's base URL, e.g. https://ocr.captchaai.com`,
	}
	msg := err.Error()
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("error lacks %q", w)
		}
	}
	if strings.Contains(msg, "secret-in-file") || strings.Contains(msg, "hunter2") {
		t.Error("the error carries the key or a URL's password")
	}
	if t.Failed() {
		t.Logf("error:\n%s", msg)
	}

	// Entries that parse, then fail the Config's checks, are named as in
	// the file.
	_, err = captchaq.ParseProviders([]byte(`[{"name": "a", "url": "https://x.example", "key_env": "K"},
		{"name": "a", "url": "https://y.example", "key_env": "K", "methods": ["hcaptcha"], "price_per_1000": {"turnstile": 1}}]`),
		providersEnv(map[string]string{"K": "k"}))
	for _, w := range []string{
		`providers[1] (a).name: "a" is used twice; give each provider its own name`,
		`providers[1] (a).price_per_1000: "turnstile" is not one of its methods; use "default" or one of hcaptcha`,
	} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v lacks %q", err, w)
		}
	}
	_, err = captchaq.ParseProviders([]byte(`[{"name": "a", "url": "https://x.example", "key_env": "K", "methods": ["keycaptcha"]}]`), providersEnv(map[string]string{"K": "k"}))
	if err == nil || !strings.Contains(err.Error(), `providers[0] (a).methods: [0] "keycaptcha" is not a method captchaq can validate; use one of amazon_waf, base64, bls,`) {
		t.Errorf("unknown method: %v", err)
	}
	if _, err := captchaq.ParseProviders([]byte(`{}`), providersEnv(nil)); err == nil || !strings.HasPrefix(err.Error(), "providers file: not a JSON array") {
		t.Errorf("an object: %v", err)
	}
	if _, err := captchaq.ParseProviders([]byte(`[] []`), providersEnv(nil)); err == nil || err.Error() != "providers file: text after the array; the file is one JSON array" {
		t.Errorf("two arrays: %v", err)
	}
}

// Two providers from a providers file: keys from the environment, methods
// by URL, then a queue on them.
func ExampleParseProviders() {
	file := []byte(exampleProviders)
	getenv := map[string]string{"CAPTCHAAI_KEY": "key-one", "BACKUP_KEY": "key-two"}
	ps, err := captchaq.ParseProviders(file, captchaq.ProvidersEnv{Getenv: func(k string) string { return getenv[k] }})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, p := range ps {
		fmt.Printf("%s: %d threads, %d methods, %v per 1,000, spill after %v, at most %v an hour\n",
			p.Name, p.Threads, len(p.Methods), p.PricePer1000, p.SpillAfter, p.MaxSpendPerHour)
	}
	q, err := captchaq.New(captchaq.Config{Providers: ps})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(q.Validate(captchaq.Task{ID: "h", Method: "hcaptcha", Params: map[string]string{"sitekey": "s", "pageurl": "https://a.example/"}}))
	// Output:
	// main: 20 threads, 10 methods, map[] per 1,000, spill after 0s, at most 0 an hour
	// backup: 100 threads, 4 methods, map[base64:0.5 default:2.99] per 1,000, spill after 5s, at most 3 an hour
	// <nil>
}

// A provider of the createTask protocol: its client, its methods by
// default, and the mistakes the file can make about it.
func TestParseProvidersCreateTask(t *testing.T) {
	t.Parallel()
	file := `[{"name": "captchaai", "url": "https://ocr.captchaai.com", "key_env": "CAPTCHAAI_KEY", "methods": ["base64", "post"]},
	 {"name": "anticaptcha", "url": "https://api.anti-captcha.com", "key_env": "AC_KEY", "protocol": "createtask", "spill_after": "2s"}]`
	var built []string
	env := providersEnv(map[string]string{"CAPTCHAAI_KEY": "k1", "AC_KEY": "k2"})
	ps, err := captchaq.ParseProviders([]byte(file), env)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := ps[0].Provider.(*provider.Client); !ok {
		t.Errorf("captchaai: %T, want *provider.Client", ps[0].Provider)
	}
	if _, ok := ps[1].Provider.(*createtask.Client); !ok || !slices.Equal(ps[1].Methods, createtask.Methods) || ps[1].SpillAfter != 2*time.Second {
		t.Errorf("anticaptcha: %T %+v, want a *createtask.Client solving %v", ps[1].Provider, ps[1], createtask.Methods)
	}
	if _, err := captchaq.New(captchaq.Config{Providers: ps}); err != nil {
		t.Fatalf("New: %v", err)
	}
	env.NewCreateTaskClient = func(cfg provider.ClientConfig) (captchaq.Provider, error) {
		built = append(built, cfg.BaseURL+" "+strings.Join(cfg.Methods, ","))
		return createtask.NewClient(cfg)
	}
	if _, err := captchaq.ParseProviders([]byte(`[{"name":"cm","url":"https://api.capmonster.cloud","key_env":"AC_KEY","protocol":"createtask","methods":["turnstile"]}]`), env); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(built, []string{"https://api.capmonster.cloud turnstile"}) {
		t.Errorf("clients built: %q", built)
	}

	bad := `[{"name": "a", "url": "https://ocr.captchaai.com", "key_env": "AC_KEY", "protocol": "createtask"},
	 {"name": "b", "url": "https://api.example", "key_env": "AC_KEY", "protocol": "json"},
	 {"name": "c", "url": "https://api.example", "key_env": "AC_KEY", "protocol": "createtask", "methods": ["turnstile", "bls"]}]`
	_, err = captchaq.ParseProviders([]byte(bad), env)
	for _, w := range []string{
		`providers[0] (a).protocol: CaptchaAI speaks only in.php/res.php: leave protocol out for its URL`,
		`providers[1] (b).protocol: "json" is not a protocol captchaq speaks; use "in.php" (the default) or "createtask"`,
		`providers[2] (c).methods: [1] "bls" has no createTask type; a createtask provider may list amazon_waf, base64, captchafox, cloudflare_challenge, datadome, friendly_captcha, funcaptcha, geetest, geetest_v4, hcaptcha, lemin, mt_captcha, post, turnstile, userrecaptcha`,
	} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %q:\n%v", w, err)
		}
	}
}

// TestParseProvidersPollGap: poll_gap is the provider's own per-task poll
// rule. Left out, a createtask provider keeps its service's published
// rule and an in.php one the queue's PollGap; a bad value is refused,
// naming the field and the fix.
func TestParseProvidersPollGap(t *testing.T) {
	t.Parallel()
	env := providersEnv(map[string]string{"K": "k"})
	file := `[{"name": "inphp", "url": "https://api.example", "key_env": "K"},
	 {"name": "capmonster", "url": "https://api.capmonster.cloud", "key_env": "K", "protocol": "createtask"},
	 {"name": "twocaptcha", "url": "https://api.2captcha.com", "key_env": "K", "protocol": "createtask"},
	 {"name": "capsolver", "url": "https://api.capsolver.com", "key_env": "K", "protocol": "createtask"},
	 {"name": "slower", "url": "https://api.capmonster.cloud", "key_env": "K", "protocol": "createtask", "poll_gap": "4s"},
	 {"name": "inphp-gentle", "url": "https://api.example", "key_env": "K", "poll_gap": "1s"}]`
	ps, err := captchaq.ParseProviders([]byte(file), env)
	if err != nil {
		t.Fatal(err)
	}
	var got []time.Duration
	for _, p := range ps {
		got = append(got, p.PollGap)
	}
	if want := []time.Duration{0, 0, 0, 0, 4 * time.Second, time.Second}; !slices.Equal(got, want) {
		t.Errorf("PollGap as read: %v, want %v (0: the default)", got, want)
	}
	if g := ps[1].Provider.(*createtask.Client).PollGap(); g != 2*time.Second {
		t.Errorf("capmonster's client: PollGap %v, want 2s", g)
	}

	for _, c := range []struct{ gap, want string }{
		{`"2 seconds"`, `providers[0] (a).poll_gap: "2 seconds" is not a duration; write it as "5s", "500ms" or "2m"`},
		{`2`, `providers[0] (a).poll_gap: must be a string, got 2`},
		{`"0s"`, `providers[0] (a).poll_gap: must be at least 1ms; leave it out for the protocol's default (2s for createtask, the queue's PollGap for in.php)`},
		{`"-2s"`, `providers[0] (a).poll_gap: must be at least 1ms, got -2s; leave it out for the provider's own rule`},
	} {
		_, err := captchaq.ParseProviders([]byte(`[{"name": "a", "url": "https://api.example", "key_env": "K", "protocol": "createtask", "poll_gap": `+c.gap+`}]`), env)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("poll_gap %s: %v; want %q", c.gap, err, c.want)
		}
	}
}

// TestParseProvidersPollBudget: poll_budget, result_window and
// report_window are read as ProviderConfig's PollBudget, ResultWindow and
// ReportWindow; left out they are 0
// (the service's published limits), 0 in the file says none (-1); a bad
// value is refused, naming the field and the fix.
func TestParseProvidersPollBudget(t *testing.T) {
	t.Parallel()
	env := providersEnv(map[string]string{"K": "k"})
	file := `[{"name": "published", "url": "https://api.capmonster.cloud", "key_env": "K", "protocol": "createtask"},
	 {"name": "set", "url": "https://api.example", "key_env": "K", "poll_budget": 60, "result_window": "2m", "report_window": "5m"},
	 {"name": "none", "url": "https://api.capsolver.com", "key_env": "K", "protocol": "createtask", "poll_budget": 0, "result_window": "0s",
	  "report_window": "0s"}]`
	ps, err := captchaq.ParseProviders([]byte(file), env)
	if err != nil {
		t.Fatal(err)
	}
	type limits struct {
		polls          int
		window, report time.Duration
	}
	var got []limits
	for _, p := range ps {
		got = append(got, limits{p.PollBudget, p.ResultWindow, p.ReportWindow})
	}
	if want := []limits{{0, 0, 0}, {60, 2 * time.Minute, 5 * time.Minute}, {-1, -1, -1}}; !slices.Equal(got, want) {
		t.Errorf("as read: %v, want %v", got, want)
	}
	for _, c := range []struct{ field, want string }{
		{`"poll_budget": 2.5`, `providers[0] (a).poll_budget: must be a whole number of polls a task, or 0 for none; got 2.5`},
		{`"poll_budget": -1`, `providers[0] (a).poll_budget: must be a whole number of polls a task, or 0 for none; got -1`},
		{`"result_window": "-1m"`, `providers[0] (a).result_window: must be a duration after the submit, or "0s" for none; got -1m0s`},
		{`"report_window": "-1m"`, `providers[0] (a).report_window: must be a duration after the answer, or "0s" for none; got -1m0s`},
	} {
		_, err := captchaq.ParseProviders([]byte(`[{"name": "a", "url": "https://api.example", "key_env": "K", `+c.field+`}]`), env)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", c.field, err, c.want)
		}
	}
	// The published report windows, for both protocols' hosts.
	for base, want := range map[string]time.Duration{"https://2captcha.com": 15 * time.Minute, "https://api.2captcha.com": 15 * time.Minute,
		"https://api.anti-captcha.com": time.Minute, "https://api.capmonster.cloud": 0, "https://api.capsolver.com": 0} {
		if got := provider.PublishedReportWindow(base); got != want {
			t.Errorf("PublishedReportWindow(%s) = %v, want %v", base, got, want)
		}
	}
}

// TestParseProvidersProxyAddresses: proxy_addresses is read as
// ProviderConfig.ProxyAddresses (left out: "", the service's published
// rule); a value that is no rule is refused, naming the field.
func TestParseProvidersProxyAddresses(t *testing.T) {
	t.Parallel()
	env := providersEnv(map[string]string{"K": "k"})
	file := `[{"name": "published", "url": "https://api.anti-captcha.com", "key_env": "K", "protocol": "createtask"},
	 {"name": "set", "url": "https://api.example", "key_env": "K", "proxy_addresses": "public_ip"}]`
	ps, err := captchaq.ParseProviders([]byte(file), env)
	if err != nil {
		t.Fatal(err)
	}
	if ps[0].ProxyAddresses != "" || ps[1].ProxyAddresses != provider.ProxyPublicIP {
		t.Errorf("as read: %q, %q; want \"\", %q", ps[0].ProxyAddresses, ps[1].ProxyAddresses, provider.ProxyPublicIP)
	}
	_, err = captchaq.ParseProviders([]byte(`[{"name": "a", "url": "https://api.example", "key_env": "K", "proxy_addresses": "ips"}]`), env)
	if want := `providers[0] (a).proxy_addresses: "ips" is not a rule; use "host" or "public_ip"`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("%v; want %q", err, want)
	}
}
