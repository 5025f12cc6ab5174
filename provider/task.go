package provider

// Task is one captcha to solve, in the provider's own words: the in.php
// method and its fields. It is what a line of task JSONL carries, and what
// every typed task (RecaptchaV2, Turnstile, ...) turns into.
type Task struct {
	// Method is the in.php method: "userrecaptcha", "turnstile", "base64", ...
	Method string `json:"method"`
	// Params are the in.php fields other than key, method and json, with the
	// provider's names ("googlekey", "pageurl", "sitekey", ...).
	Params map[string]string `json:"params,omitempty"`
}

// Kind names a task type as users think of it. Several kinds share one
// method (reCAPTCHA v2 and v3 are both "userrecaptcha"); Kind tells them apart
// for latency learning, token lifetimes and metrics.
type Kind string

// The kinds captchaq knows. CaptchaAI solves all but the last six,
// which other services of the protocol solve.
const (
	KindImage               Kind = "image"
	KindGrid                Kind = "grid"
	KindBLS                 Kind = "bls"
	KindRecaptchaV2         Kind = "recaptcha_v2"
	KindRecaptchaV3         Kind = "recaptcha_v3"
	KindTurnstile           Kind = "turnstile"
	KindCloudflareChallenge Kind = "cloudflare_challenge"
	KindGeeTest             Kind = "geetest"
	KindCaptchaFox          Kind = "captchafox"
	KindFriendlyCaptcha     Kind = "friendly_captcha"
	KindLemin               Kind = "lemin"
	KindHCaptcha            Kind = "hcaptcha"
	KindFunCaptcha          Kind = "funcaptcha"
	KindGeeTestV4           Kind = "geetest_v4"
	KindAmazonWAF           Kind = "amazon_waf"
	KindMTCaptcha           Kind = "mtcaptcha"
	KindDataDome            Kind = "datadome"
)
