package apiform_test

import (
	"bytes"
	"errors"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/captchaq/captchaq/internal/apiform"
)

// FuzzParse reads arbitrary in.php/res.php requests (query, content type,
// body) as the front and the simulator do. It never panics; the fields are
// keyed by lower-case name; a wrong key in the query reads no body; a body
// over the cap is ErrTooBig. Seeds: the request forms real clients send.
func FuzzParse(f *testing.F) {
	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	mw.WriteField("method", "post")
	fw, _ := mw.CreateFormFile("file", "c.png")
	fw.Write([]byte("PNGDATA"))
	mw.Close()
	seeds := []struct {
		query, ct, body string
	}{
		{"key=good&method=turnstile&sitekey=s&pageurl=https://a&json=1", "", ""},
		{"", "application/json", `{"key":"good","method":"base64","body":"QUJD","json":1,"header_acao":true,"soft_id":4580}`},
		{"", "application/json; charset=utf-8", `{"key":"good","action":"get","ids":["1","2"],"extra":{"a":null},"n":1.5e3}`},
		{"json=1", "application/x-www-form-urlencoded", "key=good&method=userrecaptcha&googlekey=k&pageurl=https%3A%2F%2Fa"},
		{"key=good", mw.FormDataContentType(), mp.String()},
		{"key=bad", "application/x-www-form-urlencoded", "method=x"},
		{"KEY=good&Key=bad", "application/json", `{"KEY":"x","key":"y"}`},
		{"", "multipart/form-data; boundary=x", "--x\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\n\r\n--x--"},
		{"%zz", "application/json", `{"a":"\ud800"}`},
		{"json=1", "text/plain;charset=UTF-8", `{"body":"QUJD"}`},
		{"", "", "method=userrecaptcha&key=good&googlekey=g&pageurl=https%3A%2F%2Fa"},
		{"key=good", "", ` {"method":`},
	}
	for _, s := range seeds {
		f.Add(s.query, s.ct, []byte(s.body))
	}
	const maxBody = 1 << 12
	f.Fuzz(func(t *testing.T, query, ct string, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "/in.php", bytes.NewReader(body))
		req.URL.RawQuery = query
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		read := false
		req.Body = &watchedBody{r: bytes.NewReader(body), read: &read}
		q, err := apiform.Parse(httptest.NewRecorder(), req, apiform.Options{MaxBody: maxBody, KeyOK: func(k string) bool { return k == "good" }})
		if q == nil {
			t.Fatal("nil Request")
		}
		for name := range q.Fields() {
			if name != strings.ToLower(name) {
				t.Fatalf("field %q is not lower-case", name)
			}
		}
		if errors.Is(err, apiform.ErrWrongKey) && read {
			t.Fatal("the body was read after a wrong key in the query")
		}
		if len(body) <= maxBody/2 && errors.Is(err, apiform.ErrTooBig) {
			t.Fatalf("a %d-byte body called too big", len(body))
		}
	})
}

type watchedBody struct {
	r    *bytes.Reader
	read *bool
}

func (b *watchedBody) Read(p []byte) (int, error) {
	*b.read = true
	return b.r.Read(p)
}

func (b *watchedBody) Close() error { return nil }
