package captchaq_test

import (
	"errors"
	"testing"

	"github.com/captchaq/captchaq"
)

// taskSeeds are task lines as users and the JSON API send them.
var taskSeeds = []string{
	`{"id":"checkout-1","method":"turnstile","params":{"sitekey":"0x4AAA","pageurl":"https://shop.example/checkout"},"priority":1}`,
	`{"id":"img","method":"base64","params":{"body":"iVBORw0KGgo="},"ttl":"90s","max_attempts":2}`,
	`{"method":"post","params":{"file":"iVBORw0KGgo="},"ttl":30}`,
	`{"method":"userrecaptcha","params":{"googlekey":"6Le-x","pageurl":"https://a.example","version":"v3","min_score":"0.3"},"deadline":"2030-01-01T00:00:00Z","proxy":"u:p@1.2.3.4:8080","proxytype":"SOCKS5","tenant":"t"}`,
	`{"method":"geetest","params":{"gt":"81388ea1fc187e0c335c0a8907ff2625","challenge":"c","pageurl":"https://x"},"pingback":"https://hook.example/p"}`,
	`{"method":"post","params":{"file":"/etc/hostname"}}`,
	`{"method":"turnstile","params":{"sitekey":"s","pageurl":"https://a","KEY":"x","pingback":"y"},"max_attempts":2147483647,"priority":-1}`,
	`{"id":"` + "\x00" + `","method":"","params":null,"ttl":"-1s","deadline":"yesterday"}`,
	`null`, `[]`, `{}`, `{"params":{"a":1}}`, `{"ttl":1e400}`, `{"priority":"1"}`,
}

// FuzzParseTask decodes arbitrary task JSON: it never panics, an error says
// why, and a decoded task can be validated, fingerprinted
// and sent.
func FuzzParseTask(f *testing.F) {
	for _, s := range taskSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		task, err := captchaq.ParseTask(line)
		if err != nil {
			if err.Error() == "" || captchaq.RefusalCode(err) == "" {
				t.Fatalf("ParseTask(%q): %#v says nothing", line, err)
			}
			return
		}
		if err := task.Validate(); err != nil && !errors.Is(err, captchaq.ErrInvalidTask) {
			t.Fatalf("Validate(%q): %v is not a TaskError", line, err)
		}
		if len(task.Fingerprint()) != 64 {
			t.Fatalf("fingerprint of %q: %q", line, task.Fingerprint())
		}
		_ = task.ProviderTask()
	})
}
