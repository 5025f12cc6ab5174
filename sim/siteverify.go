package sim

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/captchaq/captchaq/provider"
)

// Token lifetimes of the real services: a Turnstile token is good for
// 300 s after it was issued, a reCAPTCHA token for 120 s.
const (
	TurnstileLifetimeDefault = 300 * time.Second
	RecaptchaLifetimeDefault = 120 * time.Second
)

// Siteverify shapes the checks of /turnstile/v0/siteverify and
// /recaptcha/api/siteverify. A token is accepted once, for the sitekey it
// was solved for, until its lifetime after it was solved has passed.
// Tokens solved for the demo's sitekeys are remembered for twice the longer
// lifetime: an expired or used token is answered timeout-or-duplicate
// within that time, and invalid-input-response after it.
type Siteverify struct {
	// TurnstileLifetime default TurnstileLifetimeDefault (300 s).
	TurnstileLifetime time.Duration
	// RecaptchaLifetime default RecaptchaLifetimeDefault (120 s).
	RecaptchaLifetime time.Duration
}

func (v Siteverify) withDefaults() Siteverify {
	if v.TurnstileLifetime == 0 {
		v.TurnstileLifetime = TurnstileLifetimeDefault
	}
	if v.RecaptchaLifetime == 0 {
		v.RecaptchaLifetime = RecaptchaLifetimeDefault
	}
	return v
}

func (v Siteverify) validate() error {
	if v.TurnstileLifetime < 0 || v.RecaptchaLifetime < 0 {
		return fmt.Errorf("sim: Siteverify lifetimes are %v and %v: give positive durations", v.TurnstileLifetime, v.RecaptchaLifetime)
	}
	return nil
}

// DemoSite is one page of the demo site under /demo/: the widget's sitekey
// sits in the page, the secret stays with the site's server, which sends it
// to siteverify.
type DemoSite struct {
	Path    string // "/demo/turnstile"
	SiteKey string
	Secret  string
}

// The demo site's two pages. Their secrets are the only ones siteverify
// accepts.
var (
	DemoTurnstile = DemoSite{Path: "/demo/turnstile", SiteKey: "0x4AAAAAAADemoCaptchaQ01", Secret: "0x4AAAAAAADemoCaptchaQSecret00000001"}
	DemoRecaptcha = DemoSite{Path: "/demo/recaptcha", SiteKey: "6LdDemoAAAAAAcaptchaqDemoSiteKey00000001", Secret: "6LdDemoAAAAAAcaptchaqDemoSecretKey000001"}
	// DemoChallenge is a page behind a Cloudflare challenge: no sitekey, no
	// secret; a Cloudflare Challenge task for its URL is solved for it.
	DemoChallenge = DemoSite{Path: "/demo/challenge"}
	// DemoCaptchaFox and DemoFriendly are widgets the demo's pages do not
	// show: a token solved for their sitekey is checked at their
	// siteverify endpoints as a page's server would.
	DemoCaptchaFox = DemoSite{Path: "/demo/captchafox", SiteKey: "sk_DemoCaptchaQ01", Secret: "ok_DemoCaptchaQSecret00000001"}
	DemoFriendly   = DemoSite{Path: "/demo/friendly", SiteKey: "FCMDEMOCAPTCHAQ01", Secret: "A1DemoCaptchaQSecret00000001"}
)

// family is a siteverify endpoint's family of token kinds.
type family uint8

const (
	familyTurnstile family = iota + 1
	familyRecaptcha
	familyChallenge // a cf_clearance cookie, checked by the page itself
	familyCaptchaFox
	familyFriendly
	familyAmazonWAF
	familyMTCaptcha
	familyDataDome
)

func familyOf(k provider.Kind) family {
	switch k {
	case provider.KindTurnstile:
		return familyTurnstile
	case provider.KindRecaptchaV2, provider.KindRecaptchaV3:
		return familyRecaptcha
	case provider.KindCloudflareChallenge:
		return familyChallenge
	case provider.KindCaptchaFox:
		return familyCaptchaFox
	case provider.KindFriendlyCaptcha:
		return familyFriendly
	case provider.KindAmazonWAF:
		return familyAmazonWAF
	case provider.KindMTCaptcha:
		return familyMTCaptcha
	case provider.KindDataDome:
		return familyDataDome
	}
	return 0
}

// demoSite is the demo site of family f.
func demoSite(f family) DemoSite {
	switch f {
	case familyRecaptcha:
		return DemoRecaptcha
	case familyChallenge:
		return DemoChallenge
	case familyCaptchaFox:
		return DemoCaptchaFox
	case familyFriendly:
		return DemoFriendly
	case familyAmazonWAF:
		return DemoAmazonWAF
	case familyMTCaptcha:
		return DemoMTCaptcha
	case familyDataDome:
		return DemoDataDome
	}
	return DemoTurnstile
}

// tokenSite is where a token task was submitted for.
type tokenSite struct {
	sitekey   string
	hostname  string
	userAgent string // a DataDome task's: its cookie is bound to it
}

// issuedToken is a token this simulator handed out.
type issuedToken struct {
	kind      provider.Kind
	sitekey   string
	hostname  string
	userAgent string    // a cf_clearance's or DataDome cookie's, bound to it
	at        time.Time // when it was solved
	used      bool
}

type tokenKey [16]byte

func keyOf(token string) tokenKey {
	var k tokenKey
	sum := sha256.Sum256([]byte(token))
	copy(k[:], sum[:])
	return k
}

// tokenBook remembers issued tokens by their hash (a token is hundreds of
// bytes), in issue order so that old ones are forgotten cheaply. It has
// its own lock: the Server issues tokens with its mu held, the demo site
// and siteverify check them without it.
type tokenBook struct {
	life Siteverify // Config.Siteverify

	mu      sync.Mutex
	pending map[uint64]tokenSite // accepted token tasks not solved yet
	issued  map[tokenKey]*issuedToken
	order   []tokenKey
}

// note records the sitekey and page host of an accepted token task, so
// that its token can be checked against them.
// Only tokens for the demo's sitekeys are remembered: siteverify answers
// invalid-input-response to any other token, remembered or not, so the
// book holds nothing for a client that never uses the demo site.
func (b *tokenBook) note(id uint64, kind provider.Kind, q *request) {
	f := familyOf(kind)
	if f == 0 {
		return
	}
	demo := demoSite(f)
	sitekey := q.get("sitekey")
	if kind == provider.KindCloudflareChallenge {
		if u, err := url.Parse(q.get("pageurl")); err != nil || u.Path != DemoChallenge.Path {
			return
		}
		sitekey = DemoChallenge.SiteKey // the page's URL says which, whatever the task's key
	} else if f == familyRecaptcha {
		sitekey = q.get("googlekey")
	} else if f == familyDataDome {
		sitekey = q.get("captcha_url")
	}
	if sitekey != demo.SiteKey {
		return
	}
	site := tokenSite{sitekey: demo.SiteKey}
	if f == familyDataDome {
		site.userAgent = strings.Clone(q.get("useragent"))
	}
	if u, err := url.Parse(q.get("pageurl")); err == nil {
		site.hostname = strings.Clone(u.Hostname()) // not the request body it points into
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pending == nil {
		b.pending = make(map[uint64]tokenSite)
	}
	b.pending[id] = site
}

// issue records the token of a token task that was just solved
// (userAgent is Config.UserAgent, which its answer may carry).
func (b *tokenBook) issue(t *task, at time.Time, userAgent string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	site, ok := b.pending[t.id]
	if !ok {
		return
	}
	delete(b.pending, t.id)
	if t.state != stateSolved {
		return
	}
	if b.issued == nil {
		b.issued = make(map[tokenKey]*issuedToken)
	}
	b.forgetLocked(at)
	it := &issuedToken{kind: t.kind, sitekey: site.sitekey, hostname: site.hostname, userAgent: site.userAgent, at: at}
	token := answerFor(t, userAgent).checked(t.kind)
	if t.kind == provider.KindCloudflareChallenge {
		token, it.userAgent = clearanceOf(token)
	}
	k := keyOf(token)
	b.issued[k] = it
	b.order = append(b.order, k)
}

// forgetLocked drops tokens issued more than twice the longer lifetime
// ago.
func (b *tokenBook) forgetLocked(now time.Time) {
	keep := 2 * max(b.life.TurnstileLifetime, b.life.RecaptchaLifetime)
	n := 0
	for _, k := range b.order {
		if it := b.issued[k]; it != nil && now.Sub(it.at) < keep {
			break
		}
		delete(b.issued, k)
		n++
	}
	b.order = b.order[n:]
}

// lookupLocked is the remembered token token, if any, at now.
func (b *tokenBook) lookupLocked(token string, now time.Time) *issuedToken {
	b.forgetLocked(now)
	return b.issued[keyOf(token)]
}

// verdict is one siteverify answer before it is written in a service's shape.
type verdict struct {
	success  bool
	codes    []string
	issued   issuedToken
	hostname string
}

// verify checks secret and response as the service of family f does.
// Google lists every missing field; Cloudflare (and the widgets checked
// in its shape) stops at the secret.
func (b *tokenBook) verify(f family, secret, response string, now time.Time) verdict {
	site := demoSite(f)
	var codes []string
	switch {
	case secret == "":
		codes = append(codes, "missing-input-secret")
	case secret != site.Secret:
		codes = append(codes, "invalid-input-secret")
	}
	if len(codes) > 0 && f != familyRecaptcha {
		return verdict{codes: codes}
	}
	if response == "" {
		codes = append([]string{"missing-input-response"}, codes...)
	}
	if len(codes) > 0 {
		return verdict{codes: codes}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	it := b.lookupLocked(response, now)
	if it == nil || familyOf(it.kind) != f || it.sitekey != site.SiteKey {
		return verdict{codes: []string{"invalid-input-response"}}
	}
	life := b.life.TurnstileLifetime
	if f == familyRecaptcha {
		life = b.life.RecaptchaLifetime
	}
	if it.used || now.Sub(it.at) > life {
		return verdict{codes: []string{"timeout-or-duplicate"}}
	}
	it.used = true
	return verdict{success: true, issued: *it}
}

// sites are the demo site's pages and the siteverify endpoints: what
// checks the tokens the simulator issued.
type sites struct {
	tokens *tokenBook
	due    func() time.Time // solves what is due; the time it did so at
}

// maxVerifyBody bounds a siteverify request body.
const maxVerifyBody = 64 << 10

// serveSiteverify answers /turnstile/v0/siteverify (POST, form or JSON)
// and /recaptcha/api/siteverify (POST or GET, form) in the services' shapes,
// and /captchafox/siteverify and /friendlycaptcha/api/v1/siteverify (the
// token as response, or Friendly Captcha's solution) in Turnstile's.
func (d sites) serveSiteverify(w http.ResponseWriter, r *http.Request, f family) {
	w.Header().Set("Content-Type", "application/json")
	if r.Method != http.MethodPost && !(f == familyRecaptcha && r.Method == http.MethodGet) {
		w.Header().Set("Allow", http.MethodPost)
		w.WriteHeader(http.StatusMethodNotAllowed)
		_ = json.NewEncoder(w).Encode(map[string]any{"success": false, "error-codes": []string{"bad-request"}})
		return
	}
	secret, response, err := readVerifyRequest(w, r, f)
	var v verdict
	if err != nil {
		v.codes = []string{"bad-request"}
	} else {
		v = d.tokens.verify(f, secret, response, d.due())
	}
	var out map[string]any
	if f != familyRecaptcha {
		out = map[string]any{"success": v.success, "error-codes": cmpSlice(v.codes), "messages": []string{}}
		if v.success {
			out["challenge_ts"] = v.issued.at.UTC().Format("2006-01-02T15:04:05.000Z")
			out["hostname"] = v.issued.hostname
			out["action"] = ""
			out["cdata"] = ""
		}
	} else {
		out = map[string]any{"success": v.success}
		if v.success {
			out["challenge_ts"] = v.issued.at.UTC().Format(time.RFC3339)
			out["hostname"] = v.issued.hostname
			if v.issued.kind == provider.KindRecaptchaV3 {
				out["score"] = 0.9
				out["action"] = ""
			}
		} else {
			out["error-codes"] = v.codes
		}
	}
	_ = json.NewEncoder(w).Encode(out)
}

func cmpSlice(a []string) []string {
	if a == nil {
		return []string{}
	}
	return a
}

// readVerifyRequest reads secret and response (or solution) from a form
// or, but for reCAPTCHA, a JSON body.
func readVerifyRequest(w http.ResponseWriter, r *http.Request, f family) (secret, response string, err error) {
	r.Body = http.MaxBytesReader(w, r.Body, maxVerifyBody)
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct == "application/json" {
		if f == familyRecaptcha {
			return "", "", errors.New("reCAPTCHA siteverify takes a form")
		}
		var body struct {
			Secret   string `json:"secret"`
			Response string `json:"response"`
			Solution string `json:"solution"`
			RemoteIP string `json:"remoteip"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			return "", "", err
		}
		return body.Secret, cmp.Or(body.Response, body.Solution), nil
	}
	if err := r.ParseForm(); err != nil {
		return "", "", err
	}
	return strings.TrimSpace(r.Form.Get("secret")), strings.TrimSpace(cmp.Or(r.Form.Get("response"), r.Form.Get("solution"))), nil
}

// VerifiedHost asks the Turnstile siteverify of the simulator at base,
// as the demo site's server side does, which page's host token was issued
// for: "" when it refuses the token (not its own, spent, too old). A
// token is good for one check: a second answers "".
func VerifiedHost(ctx context.Context, hc *http.Client, base, token string) (string, error) {
	form := url.Values{"secret": {DemoTurnstile.Secret}, "response": {token}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/turnstile/v0/siteverify", strings.NewReader(form.Encode()))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var v struct {
		Success  bool   `json:"success"`
		Hostname string `json:"hostname"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return "", fmt.Errorf("siteverify answered HTTP %d: %w", resp.StatusCode, err)
	}
	if !v.Success {
		return "", nil
	}
	return v.Hostname, nil
}
