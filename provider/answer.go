package provider

import (
	"bytes"
	"encoding/json"
	"strings"
)

// Answer is a solved task's answer.
type Answer struct {
	// Raw is the provider's answer verbatim: a token, an image's text, or a
	// JSON document for structured types (GeeTest, Cloudflare Challenge).
	Raw string
	// Token is what to put in the target page's form. For token and text
	// types it equals Raw; for structured types it is the main value when
	// one can be found (cf_clearance), else Raw.
	Token string
	// JSON is Raw when Raw is a JSON document, else nil. A token answered
	// with its bindings (a Turnstile's user agent) is such a document: the
	// res.php answer or getTaskResult solution that carried them.
	JSON json.RawMessage
}

// Bindings are what a token is bound to besides itself, as the service
// answered them: the browser user agent it was solved with (2captcha's
// res.php "useragent", CaptchaAI's "user_agent", createTask's
// "userAgent"), the cookies it set and the proxy it was solved through. A
// site checks the token against them: a client sends the token with
// these, never with others.
type Bindings struct {
	UserAgent string
	// Cookies and Proxy are verbatim JSON as the service gave them: a
	// "name=value; …" string, an object or an array.
	Cookies json.RawMessage
	Proxy   json.RawMessage
}

// Empty reports whether b binds nothing.
func (b Bindings) Empty() bool { return b.UserAgent == "" && b.Cookies == nil && b.Proxy == nil }

// AddTo sets b's fields in the JSON answer object m: the user agent
// under the protocol's name for it (res.php's "useragent", getTaskResult's
// "userAgent"), "cookies" and "proxy"; what b lacks is left out.
func (b Bindings) AddTo(m map[string]any, userAgent string) {
	if b.UserAgent != "" {
		m[userAgent] = b.UserAgent
	}
	if b.Cookies != nil {
		m["cookies"] = b.Cookies
	}
	if b.Proxy != nil {
		m["proxy"] = b.Proxy
	}
}

// BindingsOf reads the bindings at the top level of an answer's JSON
// document (a res.php answer, a getTaskResult solution or a structured
// answer such as a Cloudflare Challenge's), by names in any letter case
// with or without "_" or "-" (userAgent, user_agent, useragent); null,
// empty strings and empty objects bind nothing.
func BindingsOf(doc json.RawMessage) Bindings {
	var m map[string]json.RawMessage
	if len(doc) == 0 || json.Unmarshal(doc, &m) != nil {
		return Bindings{}
	}
	var b Bindings
	for k, v := range m {
		v = bytes.TrimSpace(v)
		switch string(v) {
		case "", "null", `""`, "{}", "[]":
			continue
		}
		switch strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(k)) {
		case "useragent":
			if s, ok := jsonString(v); ok && strings.TrimSpace(s) != "" && v[0] == '"' {
				b.UserAgent = s
			}
		case "cookies", "cookie":
			b.Cookies = v
		case "proxy":
			b.Proxy = v
		}
	}
	return b
}

// PollResult is one id's state in a poll.
type PollResult struct {
	ID     string
	Ready  bool   // true: Answer is set
	Answer Answer // when Ready
	// Err is this id's failure (ERROR_CAPTCHA_UNSOLVABLE,
	// ERROR_WRONG_CAPTCHA_ID, ...) as an *Error; nil while not ready.
	Err error
	// Bulk: an ids= request answered it, with the token alone: what the
	// token is bound to comes only in a poll of the id alone (MayBind).
	Bulk bool
}

// MayBind reports whether a res.php answer of kind k may carry bindings
// beside its token (a Turnstile's, hCaptcha's, Cloudflare Challenge's,
// CaptchaFox's or DataDome's user agent, a reCAPTCHA v2's cookies), which
// an ids= answer leaves out.
func MayBind(k Kind) bool {
	switch k {
	case KindTurnstile, KindHCaptcha, KindRecaptchaV2, KindCloudflareChallenge, KindCaptchaFox, KindDataDome:
		return true
	}
	return false
}

// GivenBindings reports whether a task of kind k with params was given
// what its answer binds to and only then answers: a reCAPTCHA v2's
// cookies.
func GivenBindings(k Kind, params map[string]string) bool {
	return k == KindRecaptchaV2 && params["cookies"] != ""
}
