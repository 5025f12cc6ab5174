package pingback

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq/provider"
)

var t0 = time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)

func at(d time.Duration) Pingback {
	return Pingback{Answer: provider.Answer{Raw: "tok", Token: "tok"}, At: t0.Add(d)}
}

// A kept pingback is taken once, while younger than EarlyTTL; one taken at
// its TTL is dropped and counted, and so are the ones a later Keep finds
// expired.
func TestInboxKeepsEarlyTTL(t *testing.T) {
	b := NewInbox([]byte("0123456789abcdef"), "a", func(sig string) string { return "u?sig=" + sig })
	b.Keep("X1", at(0))
	if pb, ok := b.Take("X1", t0.Add(EarlyTTL-time.Nanosecond)); !ok || !reflect.DeepEqual(pb, at(0)) {
		t.Fatalf("X1 taken 1 ns before its TTL: %+v %v, want it", pb, ok)
	}
	if _, ok := b.Take("X1", t0); ok {
		t.Fatal("X1 taken twice")
	}
	b.Keep("X2", at(0))
	if _, ok := b.Take("X2", t0.Add(EarlyTTL)); ok {
		t.Fatal("X2 taken at its TTL")
	}
	b.Keep("X3", at(0))
	b.Keep("X4", at(time.Second))
	b.Keep("X5", at(EarlyTTL)) // X3 expires now, X4 not yet
	if kept, dropped := b.Counts(); kept != 2 || dropped != 2 {
		t.Errorf("kept %d, dropped %d; want X4 and X5 kept, X2 and X3 dropped", kept, dropped)
	}
	if _, ok := b.Take("X4", t0.Add(EarlyTTL)); !ok {
		t.Error("X4 not taken 9 s after it came")
	}
}

// Past EarlyMax kept, a new id is dropped and counted; an id kept already
// is replaced, not counted.
func TestInboxBounded(t *testing.T) {
	b := NewInbox([]byte("0123456789abcdef"), "a", func(string) string { return "" })
	for i := range EarlyMax {
		b.Keep(strings.Repeat("x", i+1), at(0))
	}
	b.Keep("x", at(time.Second))
	b.Keep("one-too-many", at(time.Second))
	if kept, dropped := b.Counts(); kept != EarlyMax || dropped != 1 {
		t.Errorf("kept %d, dropped %d; want %d, 1", kept, dropped, EarlyMax)
	}
	if pb, ok := b.Take("x", t0.Add(time.Second)); !ok || !reflect.DeepEqual(pb, at(time.Second)) {
		t.Errorf("x: %+v %v, want the second pingback", pb, ok)
	}
	if _, ok := b.Take("one-too-many", t0.Add(time.Second)); ok {
		t.Error("the one past the bound was kept")
	}
}

// The secret is an HMAC of the provider's name keyed by the queue's
// secret: the same pair gives the same sig and URL, another name or key
// another; Believe takes only the exact sig.
func TestInboxSecret(t *testing.T) {
	key, other := []byte("0123456789abcdef"), []byte("0123456789abcdeF")
	url := func(sig string) string { return "https://example.com/pb?sig=" + sig }
	a := NewInbox(key, "a", url)
	if len(a.Sig()) != 64 || a.URL() != url(a.Sig()) {
		t.Fatalf("sig %q, url %q: want 64 hex digits, the URL carrying it", a.Sig(), a.URL())
	}
	if NewInbox(key, "a", url).Sig() != a.Sig() {
		t.Error("the same key and name gave another sig")
	}
	if NewInbox(key, "b", url).Sig() == a.Sig() || NewInbox(other, "a", url).Sig() == a.Sig() {
		t.Error("another name or key gave the same sig")
	}
	if !a.Believe(a.Sig()) || a.Believe(a.Sig()[:63]) || a.Believe("") || a.Believe(strings.ToUpper(a.Sig())) {
		t.Error("Believe took a sig other than the exact one, or refused it")
	}
	if s := Secret(nil); len(s) != 32 || string(s) == string(Secret(nil)) {
		t.Error("drawn secrets: not 32 bytes, or the same twice")
	}
	if string(Secret(key)) != string(key) {
		t.Error("a given secret was not kept")
	}
}

// Both forms are read: in.php's id and code (GET or form POST), and
// createTask's JSON callback; a code that is not an answer is a Code.
func TestRead(t *testing.T) {
	get := func(q string) *http.Request { return httptest.NewRequest("GET", "/pb?"+q, nil) }
	post := func(ct, body string) *http.Request {
		r := httptest.NewRequest("POST", "/pb", strings.NewReader(body))
		r.Header.Set("Content-Type", ct)
		return r
	}
	for _, c := range []struct {
		what string
		r    *http.Request
		id   string
		want Pingback
		err  string
	}{
		{"in.php GET", get("id=X1&code=tok"), "X1", Pingback{Answer: provider.Answer{Raw: "tok", Token: "tok"}}, ""},
		{"in.php form POST", post("application/x-www-form-urlencoded", "id=X2&code=tok2"), "X2", Pingback{Answer: provider.Answer{Raw: "tok2", Token: "tok2"}}, ""},
		{"in.php JSON answer", get(`id=X3&code={"x":1}`), "X3", Pingback{Answer: provider.Answer{Raw: `{"x":1}`, Token: `{"x":1}`, JSON: []byte(`{"x":1}`)}}, ""},
		{"in.php error", get("id=X4&code=ERROR_CAPTCHA_UNSOLVABLE"), "X4", Pingback{Code: "ERROR_CAPTCHA_UNSOLVABLE"}, ""},
		{"in.php not ready", get("id=X5&code=CAPCHA_NOT_READY"), "X5", Pingback{Code: "CAPCHA_NOT_READY"}, ""},
		{"in.php without code", get("id=X6"), "", Pingback{}, "id and code are required"},
		{"createTask ready", post("application/json", `{"errorId":0,"status":"ready","solution":{"token":"0.tok"},"taskId":5}`), "5", Pingback{Answer: provider.Answer{Raw: "0.tok", Token: "0.tok"}}, ""},
		{"createTask processing", post("application/json; charset=utf-8", `{"errorId":0,"status":"processing","taskId":6}`), "6", Pingback{Code: "CAPCHA_NOT_READY"}, ""},
		{"createTask without taskId", post("application/json", `{"errorId":0}`), "", Pingback{}, "callback: taskId is missing"},
	} {
		id, pb, err := Read(c.r)
		if c.err != "" {
			if err == nil || !strings.HasPrefix(err.Error(), c.err) {
				t.Errorf("%s: error %v, want one starting %q", c.what, err, c.err)
			}
			continue
		}
		if err != nil || id != c.id || !reflect.DeepEqual(pb, c.want) {
			t.Errorf("%s: %q %+v %v; want %q %+v", c.what, id, pb, err, c.id, c.want)
		}
	}
}
