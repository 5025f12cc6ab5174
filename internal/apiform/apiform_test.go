package apiform_test

import (
	"bytes"
	"errors"
	"io"
	"maps"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/captchaq/captchaq/internal/apiform"
)

func TestParseForms(t *testing.T) {
	t.Parallel()
	multi := func() (string, string) {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		mw.WriteField("Method", "post")
		mw.WriteField("userAgent", "UA/1")
		fw, _ := mw.CreateFormFile("FILE", "c.png")
		fw.Write([]byte("PNGDATA"))
		mw.Close()
		return buf.String(), mw.FormDataContentType()
	}
	mbody, mtype := multi()
	tests := []struct {
		name, method, target, ctype, body string
		want                              map[string]string
		file                              string
		json, acao                        bool
	}{
		{"query", http.MethodGet, "/in.php?key=k&Method=turnstile&JSON=1&header_acao=1", "", "",
			map[string]string{"key": "k", "method": "turnstile", "json": "1", "header_acao": "1"}, "", true, true},
		{"urlencoded, body over query", http.MethodPost, "/in.php?method=fromquery&json=1", "application/x-www-form-urlencoded", "key=k&method=base64&body=QUJD",
			map[string]string{"key": "k", "method": "base64", "body": "QUJD", "json": "1"}, "", true, false},
		{"multipart with a file", http.MethodPost, "/in.php?key=k", mtype, mbody,
			map[string]string{"key": "k", "method": "post", "useragent": "UA/1"}, "PNGDATA", false, false},
		{"JSON object: strings, numbers, booleans, null, arrays", http.MethodPost, "/in.php", "application/json; charset=utf-8",
			`{"key":"k","method":"base64","json":1,"header_acao":true,"soft_id":4587,"min_score":0.3,"invisible":false,"proxy":null,"images":["a","b"]}`,
			map[string]string{"key": "k", "method": "base64", "json": "1", "header_acao": "1", "soft_id": "4587", "min_score": "0.3", "invisible": "0", "images": `["a","b"]`}, "", true, true},
		{"JSON json=true", http.MethodPost, "/res.php", "application/json", `{"key":"k","action":"getbalance","json":"true"}`,
			map[string]string{"key": "k", "action": "getbalance", "json": "true"}, "", true, false},
		{"other body type: query only", http.MethodPost, "/res.php?key=k&action=get", "text/plain", "id=1",
			map[string]string{"key": "k", "action": "get"}, "", false, false},
		{"JSON object under text/plain (node-fetch's default)", http.MethodPost, "/in.php?key=k&method=base64&json=1", "text/plain;charset=UTF-8", ` {"body":"QUJD"}`,
			map[string]string{"key": "k", "method": "base64", "body": "QUJD", "json": "1"}, "", true, false},
		{"JSON object under an unrelated type", http.MethodPost, "/in.php", "application/octet-stream", `{"key":"k","method":"turnstile"}`,
			map[string]string{"key": "k", "method": "turnstile"}, "", false, false},
		{"JSON object with no type", http.MethodPost, "/in.php", "", "\n{\"key\":\"k\",\"json\":1}",
			map[string]string{"key": "k", "json": "1"}, "", true, false},
		{"urlencoded with no type", http.MethodPost, "/in.php", "", "method=userrecaptcha&key=k&soft_id=2589&pageurl=https%3A%2F%2Fa.example%2F&googlekey=g",
			map[string]string{"key": "k", "method": "userrecaptcha", "soft_id": "2589", "pageurl": "https://a.example/", "googlekey": "g"}, "", false, false},
		{"unreadable type, urlencoded body: query only", http.MethodPost, "/res.php?key=k", "text/", "action=get",
			map[string]string{"key": "k"}, "", false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest(tc.method, tc.target, strings.NewReader(tc.body))
			if tc.ctype != "" {
				r.Header.Set("Content-Type", tc.ctype)
			}
			q, err := apiform.Parse(httptest.NewRecorder(), r, apiform.Options{})
			if err != nil {
				t.Fatal(err)
			}
			got := q.Fields()
			if len(got) != len(tc.want) {
				t.Errorf("fields %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q (all: %v)", k, got[k], v, got)
				}
			}
			if string(q.File) != tc.file || q.HasFile != (tc.file != "") {
				t.Errorf("file %q (has %v), want %q", q.File, q.HasFile, tc.file)
			}
			if q.JSON != tc.json || q.ACAO != tc.acao {
				t.Errorf("json %v acao %v, want %v %v", q.JSON, q.ACAO, tc.json, tc.acao)
			}
		})
	}
}

func TestParseKeepsNamesForPassingOn(t *testing.T) {
	t.Parallel()
	r := httptest.NewRequest(http.MethodGet, "/in.php?userAgent=UA&key=k", nil)
	q, _ := apiform.Parse(httptest.NewRecorder(), r, apiform.Options{})
	if n := q.Named(); n["userAgent"] != "UA" || q.Get("USERAGENT") != "UA" || !q.Has("useragent") || q.Has("proxy") {
		t.Errorf("Named %v, Get %q", n, q.Get("USERAGENT"))
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	keyOK := func(k string) bool { return k == "good" }
	tests := []struct {
		name, target, ctype, body string
		want                      error
		wantText                  string
	}{
		{"wrong key in the query: body unread", "/in.php?key=bad&json=1", "application/json", `{"method":`, apiform.ErrWrongKey, ""},
		{"body over the cap", "/in.php?key=good", "application/x-www-form-urlencoded", "body=" + strings.Repeat("A", 2000), apiform.ErrTooBig, ""},
		{"JSON array body", "/in.php?key=good", "application/json", `["key"]`, nil, "not a JSON object of fields"},
		{"broken JSON object under text/plain", "/in.php?key=good", "text/plain", `{"method":`, nil, "not a JSON object of fields"},
		{"bad escape, no type", "/in.php?key=good", "", "method=%zz", nil, "not an urlencoded form"},
		{"no type, over the cap", "/in.php?key=good", "", "body=" + strings.Repeat("A", 2000), apiform.ErrTooBig, ""},
	}
	for _, tc := range tests {
		r := httptest.NewRequest(http.MethodPost, tc.target, strings.NewReader(tc.body))
		if tc.ctype != "" {
			r.Header.Set("Content-Type", tc.ctype)
		}
		q, err := apiform.Parse(httptest.NewRecorder(), r, apiform.Options{MaxBody: 1000, KeyOK: keyOK})
		switch {
		case tc.want != nil && !errors.Is(err, tc.want):
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		case tc.want == nil && (err == nil || !strings.Contains(err.Error(), tc.wantText)):
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.wantText)
		}
		if tc.want == apiform.ErrWrongKey && (!q.JSON || q.Get("method") != "") {
			t.Errorf("%s: json %v method %q: want the query's fields only", tc.name, q.JSON, q.Get("method"))
		}
	}
}

func TestPreflight(t *testing.T) {
	t.Parallel()
	w := httptest.NewRecorder()
	if !apiform.Preflight(w, httptest.NewRequest(http.MethodOptions, "/in.php", nil)) {
		t.Fatal("OPTIONS not answered")
	}
	if w.Code != http.StatusNoContent || w.Header().Get("Access-Control-Allow-Origin") != "*" || !strings.Contains(w.Header().Get("Access-Control-Allow-Headers"), "Content-Type") {
		t.Errorf("preflight %d %v", w.Code, w.Header())
	}
	if apiform.Preflight(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/in.php", nil)) {
		t.Error("GET taken as a preflight")
	}
}

// TestParseChunkedBodies: a body sent chunked (no Content-Length), as
// Node's https.request sends a written body, is read like any other, over
// a real connection, with and without a type; over the cap it is
// ErrTooBig.
func TestParseChunkedBodies(t *testing.T) {
	t.Parallel()
	type result struct {
		fields map[string]string
		length int64
		te     []string
		err    error
	}
	got := make(chan result, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q, err := apiform.Parse(w, r, apiform.Options{MaxBody: 1000})
		got <- result{q.Fields(), r.ContentLength, r.TransferEncoding, err}
	}))
	t.Cleanup(srv.Close)
	tests := []struct {
		name, ctype, body string
		want              map[string]string
		err               error
	}{
		{"urlencoded, no type", "", "method=userrecaptcha&key=k&googlekey=g", map[string]string{"method": "userrecaptcha", "key": "k", "googlekey": "g"}, nil},
		{"urlencoded", "application/x-www-form-urlencoded", "key=k&action=get&id=7", map[string]string{"key": "k", "action": "get", "id": "7"}, nil},
		{"JSON under text/plain", "text/plain;charset=UTF-8", `{"key":"k","body":"QUJD"}`, map[string]string{"key": "k", "body": "QUJD"}, nil},
		{"over the cap", "", "body=" + strings.Repeat("A", 5000), nil, apiform.ErrTooBig},
	}
	for _, tc := range tests {
		// A reader of unknown length: the client sends it chunked.
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/in.php", io.MultiReader(strings.NewReader(tc.body)))
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = -1
		if tc.ctype != "" {
			req.Header.Set("Content-Type", tc.ctype)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		resp.Body.Close()
		r := <-got
		if r.length != -1 || len(r.te) != 1 || r.te[0] != "chunked" {
			t.Fatalf("%s: length %d, transfer encoding %v: the body was not sent chunked", tc.name, r.length, r.te)
		}
		if !errors.Is(r.err, tc.err) || (tc.err == nil) != (r.err == nil) {
			t.Errorf("%s: error %v, want %v", tc.name, r.err, tc.err)
		}
		if tc.err == nil && !maps.Equal(r.fields, tc.want) {
			t.Errorf("%s: fields %v, want %v", tc.name, r.fields, tc.want)
		}
	}
}
