package provider

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestBindingsOf: a token's user agent under each spelling the services
// use, its cookies and proxy verbatim; empty values bind nothing.
func TestBindingsOf(t *testing.T) {
	t.Parallel()
	for doc, want := range map[string]Bindings{
		`{"status":1,"request":"0.tok","useragent":"UA/1"}`:               {UserAgent: "UA/1"},
		`{"status":1,"request":"cf","user_agent":"UA/2"}`:                 {UserAgent: "UA/2"},
		`{"token":"0.tok","userAgent":"UA/3"}`:                            {UserAgent: "UA/3"},
		`{"token":"0.tok","User-Agent":"UA/4"}`:                           {UserAgent: "UA/4"},
		`{"gRecaptchaResponse":"03A","cookies":{"_GRECAPTCHA":"g"}}`:      {Cookies: json.RawMessage(`{"_GRECAPTCHA":"g"}`)},
		`{"status":1,"request":"03A","cookies":"a=1; b=2","proxy":"p:1"}`: {Cookies: json.RawMessage(`"a=1; b=2"`), Proxy: json.RawMessage(`"p:1"`)},
		`{"token":"0.tok","userAgent":"","cookies":null,"proxy":{}}`:      {},
		`{"token":"0.tok","userAgent":7}`:                                 {},
		`"0.tok"`:                                                         {},
		``:                                                                {},
	} {
		if got := BindingsOf(json.RawMessage(doc)); !cmp.Equal(got, want) {
			t.Errorf("BindingsOf(%s) = %+v, want %+v", doc, got, want)
		}
	}
}
