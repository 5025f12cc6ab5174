package provider

import (
	"fmt"
	"strings"
	"time"
)

// planThreads is each CaptchaAI plan's thread count. VIP-1 and VIP-2 are
// not in the published material we could find (only VIP-3 = 5000 is);
// 1000 and 3000 are placeholders between ENTERPRISE and VIP-3. Configure
// the thread count explicitly, or read it from threadsinfo, when on a VIP
// plan.
var planThreads = []struct {
	name    string
	threads int
}{
	{"BASIC", 5},
	{"STANDARD", 15},
	{"ADVANCE", 50},
	{"PREMIUM", 100},
	{"CORPORATE", 150},
	{"ENTERPRISE", 200},
	{"VIP-1", 1000},
	{"VIP-2", 3000},
	{"VIP-3", 5000},
}

// PlanThreads returns the thread count of a CaptchaAI plan by name
// (case-insensitive; "VIP1" and "VIP_1" are accepted for "VIP-1").
func PlanThreads(name string) (int, error) {
	n := strings.ToUpper(strings.TrimSpace(name))
	n = strings.ReplaceAll(n, "_", "-")
	if strings.HasPrefix(n, "VIP") && !strings.HasPrefix(n, "VIP-") {
		n = "VIP-" + strings.TrimPrefix(n, "VIP")
	}
	names := make([]string, len(planThreads))
	for i, p := range planThreads {
		if p.name == n {
			return p.threads, nil
		}
		names[i] = p.name
	}
	return 0, fmt.Errorf("unknown plan %q: use one of %s, or set the thread count directly", name, strings.Join(names, ", "))
}

// TokenLifetime is how long an answer of kind k stays usable on the target
// site after it is solved; zero for answers that do not expire (image and
// grid text). Values for the less documented kinds are conservative: an
// answer that is reported stale too early costs less than one used late.
func TokenLifetime(k Kind) time.Duration {
	switch k {
	case KindRecaptchaV2, KindRecaptchaV3:
		return 120 * time.Second // Google: a token is valid for two minutes
	case KindTurnstile:
		return 300 * time.Second // Cloudflare: five minutes
	case KindCloudflareChallenge:
		return 30 * time.Minute // cf_clearance's default lifetime; sites may shorten it
	case KindGeeTest:
		return 60 * time.Second // the validate triple is checked against a challenge that expires fast
	case KindCaptchaFox, KindLemin, KindHCaptcha:
		return 120 * time.Second
	case KindFunCaptcha, KindGeeTestV4:
		return 60 * time.Second
	case KindFriendlyCaptcha:
		return 300 * time.Second
	case KindAmazonWAF, KindMTCaptcha:
		return 120 * time.Second
	case KindDataDome:
		return 30 * time.Minute // bound to its IP and user agent; sites may revoke it sooner
	}
	return 0 // image, grid, BLS: the answer is text, not a token
}

// MedianSolveTime is how long a task of kind k typically takes to solve,
// after published figures: images under a second, Turnstile under 10–15 s,
// reCAPTCHA v2 under a minute. The simulator's default latencies are
// centred on it.
func MedianSolveTime(k Kind) time.Duration {
	switch k {
	case KindImage:
		return 700 * time.Millisecond
	case KindGrid, KindBLS:
		return 3 * time.Second
	case KindRecaptchaV2:
		return 25 * time.Second
	case KindRecaptchaV3:
		return 9 * time.Second
	case KindTurnstile:
		return 8 * time.Second
	case KindCloudflareChallenge:
		return 14 * time.Second
	case KindGeeTest:
		return 10 * time.Second
	case KindCaptchaFox, KindFriendlyCaptcha, KindLemin:
		return 5 * time.Second
	case KindHCaptcha, KindFunCaptcha:
		return 20 * time.Second
	case KindGeeTestV4, KindAmazonWAF, KindMTCaptcha:
		return 10 * time.Second
	case KindDataDome:
		return 15 * time.Second
	}
	return 5 * time.Second
}

// TypicalSolveTime is when the first poll for kind k is worth making after
// submit (the published timing advice); later polls follow every few
// seconds.
func TypicalSolveTime(k Kind) time.Duration {
	switch k {
	case KindImage, KindBLS:
		return 5 * time.Second
	case KindGrid:
		return 10 * time.Second
	case KindRecaptchaV2:
		return 15 * time.Second // advice: 10–20 s
	case KindRecaptchaV3, KindTurnstile, KindGeeTest:
		return 10 * time.Second
	case KindCloudflareChallenge, KindCaptchaFox, KindFriendlyCaptcha, KindLemin, KindHCaptcha, KindFunCaptcha,
		KindAmazonWAF, KindMTCaptcha, KindDataDome:
		return 15 * time.Second
	case KindGeeTestV4:
		return 10 * time.Second
	}
	return 5 * time.Second
}
