package sim

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/captchaq/captchaq/provider"
)

// answerHint is what a task's answer depends on besides its kind.
type answerHint struct {
	text     string // GeeTest challenge; Turnstile, hCaptcha, Cloudflare Challenge, DataDome user agent; reCAPTCHA v2 cookies
	charset  int8   // image: 0 letters and digits, 1 digits, 2 letters
	min, max int8   // image text length bounds
}

// imageHint reads an image task's numeric, min_len and max_len.
func imageHint(q *request) answerHint {
	h := answerHint{min: 4, max: 7}
	switch q.get("numeric") {
	case "1":
		h.charset = 1
	case "2":
		h.charset = 2
	}
	if n, err := strconv.Atoi(q.get("min_len")); err == nil && n > 0 && n <= 20 {
		h.min = int8(n)
	}
	if n, err := strconv.Atoi(q.get("max_len")); err == nil && n > 0 && n <= 20 {
		h.max = int8(n)
	}
	h.max = max(h.max, h.min)
	return h
}

// defaultUserAgent is the user agent of a Cloudflare Challenge answer when
// the submit named none.
const defaultUserAgent = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36"

// answer is a solved task's answer text; object answers are JSON objects.
// userAgent and cookies bind a token: they are answered beside it.
type answer struct {
	raw       string
	object    bool
	userAgent string
	cookies   string
}

// bindings is a's user agent and cookies as a getTaskResult solution has
// them, nil when a binds nothing.
func (a answer) bindings() json.RawMessage {
	if a.userAgent == "" && a.cookies == "" {
		return nil
	}
	b, _ := json.Marshal(struct {
		UserAgent string `json:"userAgent,omitempty"`
		Cookies   string `json:"cookies,omitempty"`
	}{a.userAgent, a.cookies})
	return b
}

const (
	alnum     = "ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnpqrstuvwxyz23456789"
	digits    = "0123456789"
	letters   = "abcdefghijkmnpqrstuvwxyz"
	tokenSet  = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	hexDigits = "0123456789abcdef"
)

// answerFor derives a task's answer from its salt (the seed and what is
// solved) and its id, so it is the same on every poll and is never stored,
// and two tasks' answers differ as a real provider's do: another sitekey,
// page or image, another id or another seed, another token. userAgent is
// Config.UserAgent.
func answerFor(t *task, userAgent string) answer {
	rng := rand.New(rand.NewPCG(t.salt, t.id))
	str := func(set string, n int) string {
		var b strings.Builder
		b.Grow(n)
		for range n {
			b.WriteByte(set[rng.IntN(len(set))])
		}
		return b.String()
	}
	object := func(v map[string]string) answer {
		b, _ := json.Marshal(v)
		return answer{raw: string(b), object: true}
	}
	switch t.kind {
	case provider.KindImage:
		set := alnum
		switch t.hint.charset {
		case 1:
			set = digits
		case 2:
			set = letters
		}
		n := int(t.hint.min) + rng.IntN(int(t.hint.max-t.hint.min)+1)
		return answer{raw: str(set, n)}
	case provider.KindGrid:
		cells := rng.Perm(9)[:1+rng.IntN(4)]
		parts := make([]string, len(cells))
		for i, c := range sortedInts(cells) {
			parts[i] = strconv.Itoa(c + 1)
		}
		return answer{raw: "click:" + strings.Join(parts, "/")}
	case provider.KindBLS:
		cells := sortedInts(rng.Perm(9)[:3])
		b, _ := json.Marshal(cells)
		return answer{raw: string(b)}
	case provider.KindRecaptchaV2, provider.KindRecaptchaV3:
		a := answer{raw: "03A" + str(tokenSet, 480+rng.IntN(100))}
		if t.hint.text != "" {
			// solved with the task's cookies: they come back with the one
			// Google sets
			a.cookies = t.hint.text + "; _GRECAPTCHA=09" + str(tokenSet, 80)
		}
		return a
	case provider.KindTurnstile:
		return answer{raw: "0." + str(tokenSet, 300+rng.IntN(60)) + "." + str(hexDigits, 64), userAgent: cmp.Or(t.hint.text, userAgent)}
	case provider.KindHCaptcha:
		return answer{raw: str(tokenSet, 280+rng.IntN(40)), userAgent: cmp.Or(t.hint.text, userAgent)}
	case provider.KindGeeTest:
		return object(map[string]string{
			"geetest_challenge": t.hint.text + str(letters, 2),
			"geetest_validate":  str(hexDigits, 32),
			"geetest_seccode":   str(hexDigits, 32) + "|jordan",
		})
	case provider.KindCloudflareChallenge:
		ua := cmp.Or(t.hint.text, userAgent, defaultUserAgent)
		return object(map[string]string{
			"cf_clearance": str(tokenSet, 43) + "-" + strconv.FormatInt(t.acceptedAt.Unix(), 10) + "-1.2.1.1-" + str(tokenSet, 200),
			"user_agent":   ua,
		})
	case provider.KindLemin:
		return object(map[string]string{
			"answer":       "0x" + str(hexDigits, 64),
			"challenge_id": str(hexDigits, 8) + "-" + str(hexDigits, 4) + "-" + str(hexDigits, 4) + "-" + str(hexDigits, 4) + "-" + str(hexDigits, 12),
		})
	case provider.KindFriendlyCaptcha:
		return answer{raw: str(hexDigits, 32) + "." + str(tokenSet, 160) + ".AgAD"}
	case provider.KindAmazonWAF:
		return object(map[string]string{
			"captcha_voucher": "eyJ0eXAiOiJKV1QiLCJhbGciOiJIUzI1NiJ9." + str(tokenSet, 200) + "." + str(tokenSet, 43),
			"existing_token":  str(hexDigits, 8) + "-" + str(hexDigits, 4) + "-" + str(hexDigits, 4) + "-" + str(hexDigits, 4) + "-" + str(hexDigits, 12) + ":" + str(tokenSet, 40),
		})
	case provider.KindMTCaptcha:
		return answer{raw: "v1(" + str(hexDigits, 8) + "," + str(hexDigits, 8) + "," + str(tokenSet, 20) + "," + str(hexDigits, 32) + "," + str(tokenSet, 120) + ")"}
	case provider.KindDataDome:
		// solved in a browser of the task's user agent: the cookie is bound to it
		return answer{raw: ddCookie + "=" + str(tokenSet+"~", 128) + "; Max-Age=31536000; Path=/; Secure; SameSite=Lax", userAgent: t.hint.text}
	default: // CaptchaFox and anything new: an opaque token
		return answer{raw: str(tokenSet, 280+rng.IntN(40))}
	}
}

// saltFor is the salt of a task solved from fingerprint fp (its method and
// solving fields) under seed: a token is bound to the task it answers.
func saltFor(seed uint64, fp [16]byte) uint64 {
	return splitmix(seed ^ binary.LittleEndian.Uint64(fp[:8]) ^ splitmix(binary.LittleEndian.Uint64(fp[8:])))
}

// splitmix is SplitMix64's finalizer: every bit of x moves every bit out.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

func sortedInts(a []int) []int {
	b := slices.Clone(a)
	slices.Sort(b)
	return b
}
