package sim_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq/sim"
)

// verifyAnswer is a siteverify answer, both services' fields.
type verifyAnswer struct {
	Success     bool     `json:"success"`
	ChallengeTS string   `json:"challenge_ts"`
	Hostname    string   `json:"hostname"`
	Codes       []string `json:"error-codes"`
}

// verify posts a form to a siteverify path and decodes the answer.
func (b *bundle) verify(t *testing.T, path string, v url.Values) verifyAnswer {
	t.Helper()
	var a verifyAnswer
	if err := json.Unmarshal([]byte(b.post(t, path, v)), &a); err != nil {
		t.Fatalf("siteverify answer is not JSON: %v", err)
	}
	return a
}

const (
	turnstileVerify = "/turnstile/v0/siteverify"
	recaptchaVerify = "/recaptcha/api/siteverify"
)

// token solves a token task through in.php/res.php (the simulator is
// Instant) and returns the token.
func (b *bundle) token(t *testing.T, v url.Values) string {
	t.Helper()
	id := b.submit(t, v)
	a := b.poll(t, id)
	if a.Status != 1 {
		t.Fatalf("poll answered %s", a.Request)
	}
	return a.str(t)
}

func (b *bundle) turnstileToken(t *testing.T, sitekey string) string {
	return b.token(t, form("key", key, "method", "turnstile", "sitekey", sitekey, "pageurl", b.base+sim.DemoTurnstile.Path))
}

func (b *bundle) recaptchaToken(t *testing.T, googlekey string) string {
	return b.token(t, form("key", key, "method", "userrecaptcha", "googlekey", googlekey, "pageurl", b.base+sim.DemoRecaptcha.Path))
}

func tsCheck(token string) url.Values {
	return form("secret", sim.DemoTurnstile.Secret, "response", token, "remoteip", "127.0.0.1")
}

func rcCheck(token string) url.Values {
	return form("secret", sim.DemoRecaptcha.Secret, "response", token)
}

func wantCodes(t *testing.T, what string, a verifyAnswer, codes ...string) {
	t.Helper()
	if a.Success || !reflect.DeepEqual(a.Codes, codes) {
		t.Fatalf("%s: got success=%v codes %q, want rejected with %q", what, a.Success, a.Codes, codes)
	}
}

func TestSiteverifyAcceptsATokenOnce(t *testing.T) {
	clock := newManualClock()
	b := setup(t, sim.Config{Instant: true, Now: clock.Now})
	solvedAt := clock.Now()

	tok := b.turnstileToken(t, sim.DemoTurnstile.SiteKey)
	clock.Advance(10 * time.Second)
	got := b.verify(t, turnstileVerify, tsCheck(tok))
	want := verifyAnswer{Success: true, ChallengeTS: solvedAt.Format("2006-01-02T15:04:05.000Z"), Hostname: "127.0.0.1", Codes: []string{}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("turnstile: got %+v, want %+v", got, want)
	}
	wantCodes(t, "turnstile token used twice", b.verify(t, turnstileVerify, tsCheck(tok)), "timeout-or-duplicate")

	tok = b.recaptchaToken(t, sim.DemoRecaptcha.SiteKey)
	got = b.verify(t, recaptchaVerify, rcCheck(tok))
	want = verifyAnswer{Success: true, ChallengeTS: clock.Now().Format(time.RFC3339), Hostname: "127.0.0.1"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("recaptcha: got %+v, want %+v", got, want)
	}
	wantCodes(t, "recaptcha token used twice", b.verify(t, recaptchaVerify, rcCheck(tok)), "timeout-or-duplicate")
}

func TestSiteverifyExpiry(t *testing.T) {
	clock := newManualClock()
	b := setup(t, sim.Config{Instant: true, Now: clock.Now})

	// Turnstile: good for 300 s after it was solved, not a moment longer.
	fresh, stale := b.turnstileToken(t, sim.DemoTurnstile.SiteKey), b.turnstileToken(t, sim.DemoTurnstile.SiteKey)
	clock.Advance(300 * time.Second)
	if a := b.verify(t, turnstileVerify, tsCheck(fresh)); !a.Success {
		t.Fatalf("turnstile token at 300 s: rejected with %q", a.Codes)
	}
	clock.Advance(time.Millisecond)
	wantCodes(t, "turnstile token at 300.001 s", b.verify(t, turnstileVerify, tsCheck(stale)), "timeout-or-duplicate")

	// reCAPTCHA: 120 s.
	fresh, stale = b.recaptchaToken(t, sim.DemoRecaptcha.SiteKey), b.recaptchaToken(t, sim.DemoRecaptcha.SiteKey)
	clock.Advance(119 * time.Second)
	if a := b.verify(t, recaptchaVerify, rcCheck(fresh)); !a.Success {
		t.Fatalf("recaptcha token at 119 s: rejected with %q", a.Codes)
	}
	clock.Advance(2 * time.Second)
	wantCodes(t, "recaptcha token at 121 s", b.verify(t, recaptchaVerify, rcCheck(stale)), "timeout-or-duplicate")

	// Remembered for twice the longer lifetime; after that it is unknown.
	old := b.turnstileToken(t, sim.DemoTurnstile.SiteKey)
	clock.Advance(600 * time.Second)
	wantCodes(t, "turnstile token at 600 s", b.verify(t, turnstileVerify, tsCheck(old)), "invalid-input-response")
}

func TestSiteverifyLifetimeIsConfigurable(t *testing.T) {
	clock := newManualClock()
	b := setup(t, sim.Config{Instant: true, Now: clock.Now, Siteverify: sim.Siteverify{TurnstileLifetime: time.Second, RecaptchaLifetime: 2 * time.Second}})
	ts, rc := b.turnstileToken(t, sim.DemoTurnstile.SiteKey), b.recaptchaToken(t, sim.DemoRecaptcha.SiteKey)
	clock.Advance(1500 * time.Millisecond)
	wantCodes(t, "turnstile token after 1.5 s of 1 s", b.verify(t, turnstileVerify, tsCheck(ts)), "timeout-or-duplicate")
	if a := b.verify(t, recaptchaVerify, rcCheck(rc)); !a.Success {
		t.Fatalf("recaptcha token after 1.5 s of 2 s: rejected with %q", a.Codes)
	}
	if _, err := sim.New(sim.Config{Siteverify: sim.Siteverify{TurnstileLifetime: -time.Second}}); err == nil || !strings.Contains(err.Error(), "Siteverify") {
		t.Fatalf("negative lifetime: got %v, want an error naming Siteverify", err)
	}
}

func TestSiteverifyRejectsTokensOfOtherSites(t *testing.T) {
	b := setup(t, sim.Config{Instant: true})
	other := b.turnstileToken(t, "0x4AAAAAAAOtherSiteKey000")
	wantCodes(t, "turnstile token of another sitekey", b.verify(t, turnstileVerify, tsCheck(other)), "invalid-input-response")
	otherRC := b.recaptchaToken(t, "6LeOtherAAAAAOtherSiteKeyOtherSiteKey0001")
	wantCodes(t, "recaptcha token of another sitekey", b.verify(t, recaptchaVerify, rcCheck(otherRC)), "invalid-input-response")

	// A token of the right sitekey at the other service's endpoint.
	ts := b.turnstileToken(t, sim.DemoTurnstile.SiteKey)
	wantCodes(t, "turnstile token at reCAPTCHA", b.verify(t, recaptchaVerify, rcCheck(ts)), "invalid-input-response")
	// Rejections do not use a token up.
	if a := b.verify(t, turnstileVerify, tsCheck(ts)); !a.Success {
		t.Fatalf("turnstile token after a rejection elsewhere: %q", a.Codes)
	}
	wantCodes(t, "made-up token", b.verify(t, turnstileVerify, tsCheck("0.forged-token")), "invalid-input-response")
}

func TestSiteverifyRequestErrors(t *testing.T) {
	b := setup(t, sim.Config{Instant: true})
	tok := b.turnstileToken(t, sim.DemoTurnstile.SiteKey)
	cases := []struct {
		name, path string
		v          url.Values
		codes      []string
	}{
		{"turnstile nothing", turnstileVerify, form(), []string{"missing-input-secret"}},
		{"turnstile bad secret", turnstileVerify, form("secret", "wrong", "response", tok), []string{"invalid-input-secret"}},
		{"turnstile reCAPTCHA secret", turnstileVerify, form("secret", sim.DemoRecaptcha.Secret, "response", tok), []string{"invalid-input-secret"}},
		{"turnstile no response", turnstileVerify, form("secret", sim.DemoTurnstile.Secret), []string{"missing-input-response"}},
		{"recaptcha nothing", recaptchaVerify, form(), []string{"missing-input-response", "missing-input-secret"}},
		{"recaptcha bad secret", recaptchaVerify, form("secret", "wrong", "response", "x"), []string{"invalid-input-secret"}},
		{"recaptcha no response", recaptchaVerify, form("secret", sim.DemoRecaptcha.Secret), []string{"missing-input-response"}},
	}
	for _, c := range cases {
		wantCodes(t, c.name, b.verify(t, c.path, c.v), c.codes...)
	}

	// Turnstile also takes JSON; it wants POST.
	resp, err := http.Post(b.base+turnstileVerify, "application/json", strings.NewReader(`{"secret":"`+sim.DemoTurnstile.Secret+`","response":"`+tok+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	var a verifyAnswer
	if err := json.Unmarshal([]byte(readBody(t, resp)), &a); err != nil || !a.Success {
		t.Fatalf("JSON siteverify: %+v %v", a, err)
	}
	resp, err = http.Get(b.base + turnstileVerify)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET turnstile siteverify: status %d, want 405", resp.StatusCode)
	}
}

var verdictRE = regexp.MustCompile(`id="verdict" data-success="(true|false)">([^<]*)<.*id="error-codes">([^<]*)<`)

// submitDemo posts a demo page's form with a token and returns the status,
// the verdict's title and its error codes.
func (b *bundle) submitDemo(t *testing.T, page sim.DemoSite, field, token string) (int, string, string) {
	t.Helper()
	resp, err := http.PostForm(b.base+page.Path, url.Values{field: {token}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := verdictRE.FindStringSubmatch(strings.ReplaceAll(string(body), "\n", " "))
	if m == nil {
		t.Fatalf("no verdict in the page: %s", body)
	}
	return resp.StatusCode, m[2], m[3]
}

func TestDemoSite(t *testing.T) {
	clock := newManualClock()
	b := setup(t, sim.Config{Instant: true, Now: clock.Now})

	page := b.get(t, sim.DemoTurnstile.Path, nil)
	for _, want := range []string{`<div class="cf-turnstile" data-sitekey="` + sim.DemoTurnstile.SiteKey + `"`, `name="cf-turnstile-response"`} {
		if !strings.Contains(page, want) {
			t.Fatalf("turnstile page lacks %s:\n%s", want, page)
		}
	}
	page = b.get(t, sim.DemoRecaptcha.Path, nil)
	for _, want := range []string{`<div class="g-recaptcha" data-sitekey="` + sim.DemoRecaptcha.SiteKey + `"`, `<textarea id="g-recaptcha-response" name="g-recaptcha-response"`} {
		if !strings.Contains(page, want) {
			t.Fatalf("recaptcha page lacks %s:\n%s", want, page)
		}
	}

	type outcome struct {
		status       int
		title, codes string
	}
	check := func(what string, want outcome, page sim.DemoSite, field, token string) {
		t.Helper()
		status, title, codes := b.submitDemo(t, page, field, token)
		if got := (outcome{status, title, codes}); got != want {
			t.Fatalf("%s: got %+v, want %+v", what, got, want)
		}
	}
	ts := b.turnstileToken(t, sim.DemoTurnstile.SiteKey)
	check("turnstile", outcome{200, "Signed in", ""}, sim.DemoTurnstile, "cf-turnstile-response", ts)
	check("turnstile again", outcome{403, "Rejected", "timeout-or-duplicate"}, sim.DemoTurnstile, "cf-turnstile-response", ts)
	check("turnstile empty", outcome{403, "Rejected", "missing-input-response"}, sim.DemoTurnstile, "cf-turnstile-response", "")

	rc := b.recaptchaToken(t, sim.DemoRecaptcha.SiteKey)
	check("recaptcha at the turnstile page", outcome{403, "Rejected", "invalid-input-response"}, sim.DemoTurnstile, "cf-turnstile-response", rc)
	check("recaptcha", outcome{200, "Order placed", ""}, sim.DemoRecaptcha, "g-recaptcha-response", rc)

	stale := b.recaptchaToken(t, sim.DemoRecaptcha.SiteKey)
	clock.Advance(121 * time.Second)
	check("recaptcha after 121 s", outcome{403, "Rejected", "timeout-or-duplicate"}, sim.DemoRecaptcha, "g-recaptcha-response", stale)

	// A token solved for another host is valid at siteverify, but the page
	// checks the hostname.
	elsewhere := b.token(t, form("key", key, "method", "turnstile", "sitekey", sim.DemoTurnstile.SiteKey, "pageurl", "https://shop.example/login"))
	check("turnstile for another host", outcome{403, "Rejected", "hostname-mismatch"}, sim.DemoTurnstile, "cf-turnstile-response", elsewhere)
}

// VerifiedHost, the demo site's server side as a client: the page host of
// a token the simulator issued, once; "" for a token spent or not its own.
func TestVerifiedHost(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{Instant: true})
	tok := b.turnstileToken(t, sim.DemoTurnstile.SiteKey)
	ctx := context.Background()
	for i, want := range []string{"127.0.0.1", ""} {
		if got, err := sim.VerifiedHost(ctx, http.DefaultClient, b.base, tok); err != nil || got != want {
			t.Errorf("check %d: %q, %v; want %q", i+1, got, err, want)
		}
	}
	if got, err := sim.VerifiedHost(ctx, http.DefaultClient, b.base, "0.forged"); err != nil || got != "" {
		t.Errorf("a forged token: %q, %v; want none", got, err)
	}
}
