package amqp

import (
	"encoding/json"
	"testing"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
)

// A worker's result keeps what binds its token on the way to the gateway:
// the answer document, and so its user agent and cookies, byte for byte
// as JSON reads them.
func TestResultMessageKeepsBindings(t *testing.T) {
	t.Parallel()
	answer := json.RawMessage(`{"status":1,"request":"0.tok","useragent":"Mozilla/5.0 (X11) SolvedBy/7","cookies":"a=1; _GRECAPTCHA=09x"}`)
	p, err := resultPublishing(captchaq.Result{ID: "qa/1", Status: captchaq.StatusSolved, Method: "turnstile", Token: "0.tok", Answer: answer})
	if err != nil {
		t.Fatal(err)
	}
	r, err := DecodeResult(p.Body)
	if err != nil {
		t.Fatal(err)
	}
	b := provider.BindingsOf(r.Answer)
	if r.Token != "0.tok" || string(r.Answer) != string(answer) || b.UserAgent != "Mozilla/5.0 (X11) SolvedBy/7" || string(b.Cookies) != `"a=1; _GRECAPTCHA=09x"` {
		t.Errorf("decoded %+v (bindings %+v), want the token and the answer %s", r, b, answer)
	}
}
