package server_test

import (
	"bytes"
	"context"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/server"
)

// fuzzProviderKey must never appear in an answer.
const fuzzProviderKey = "provider-secret-fuzz"

// frontSeeds are requests as real clients send them: the official npm
// client's JSON object bodies, the query string, urlencoded and multipart
// forms of the PHP and Python clients, res.php's actions, and the JSON
// API's task objects and arrays (README examples).
func frontSeeds() []struct {
	route       uint8
	query, ct   string
	body        []byte
	description string
} {
	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	mw.WriteField("key", keyQA)
	mw.WriteField("method", "post")
	mw.WriteField("json", "1")
	fw, _ := mw.CreateFormFile("file", "captcha.png")
	fw.Write([]byte("\x89PNG\r\n\x1a\nfake image"))
	mw.Close()
	const form = "application/x-www-form-urlencoded"
	return []struct {
		route       uint8
		query, ct   string
		body        []byte
		description string
	}{
		{0, "", "application/json", []byte(`{"key":"` + keyQA + `","method":"base64","body":"iVBORw0KGgo=","json":1,"soft_id":"4580"}`), "npm imageCaptcha"},
		{0, "", "application/json", []byte(`{"key":"` + keyQA + `","method":"turnstile","sitekey":"0x4AAAAAAA","pageurl":"https://shop.example","json":1,"header_acao":1}`), "npm turnstile"},
		{0, "", "application/json", []byte(`{"key":"` + keyQA + `","method":"userrecaptcha","googlekey":"6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-","pageurl":"https://shop.example/login","invisible":true,"enterprise":0,"json":1}`), "npm recaptcha"},
		{0, "", "application/json", []byte(`{"key":"` + keyQA + `","method":"geetest","gt":"81388ea1fc187e0c335c0a8907ff2625","challenge":"2e2f0f65240058b683cb6ea21c303eea","pageurl":"https://x.example","json":1}`), "npm geetest"},
		{0, "key=" + keyQA + "&method=turnstile&sitekey=0x4AAAAAAA&pageurl=https://shop.example&json=1", "", nil, "GET query"},
		{0, "", form, []byte("key=" + keyQA + "&method=userrecaptcha&googlekey=6Le-x&pageurl=https%3A%2F%2Fa.example&priority=1&pingback=https%3A%2F%2Fhook.example%2Fp"), "urlencoded"},
		{0, "", mw.FormDataContentType(), mp.Bytes(), "multipart post with a file"},
		{0, "key=" + keyQA, form, []byte("method=base64&body=" + strings.Repeat("A", 64) + "&KEY=x"), "reserved name in another case"},
		{1, "key=" + keyQA + "&action=get&id=1&json=1", "", nil, "res.php get"},
		{1, "key=" + keyQA + "&action=get&ids=1,2,3", "", nil, "res.php bulk"},
		{1, "key=" + keyQA + "&action=getbalance", "", nil, "getbalance"},
		{1, "", "application/json", []byte(`{"key":"` + keyQA + `","action":"reportbad","id":"1","json":1}`), "npm reportbad"},
		{1, "key=" + keyQA + "&action=reportgood&id=1", "", nil, "reportgood"},
		{2, "", "application/json", []byte(`{"id":"checkout-1","method":"turnstile","params":{"sitekey":"0x4AAA","pageurl":"https://shop.example/checkout"},"priority":1}`), "API one task"},
		{2, "", "application/json", []byte(`[{"id":"a","method":"post","params":{"file":"iVBORw0KGgo="},"max_attempts":2147483647,"ttl":"90s"},{"method":"userrecaptcha","params":{"googlekey":"k","pageurl":"https://a.example"},"deadline":"2030-01-01T00:00:00Z","proxy":"u:p@1.2.3.4:8080","proxytype":"HTTP"}]`), "API array"},
		{2, "", "application/json", []byte(`{"method":"post","params":{"file":"/etc/hostname"}}`), "API file path"},
		{2, "", "application/json", []byte(`[null]`), "API null"},
		{2, "", "application/json", []byte(`{"method":"turnstile","params":{"sitekey":"s","pageurl":"https://a","Key":"x"},"pingback":"http://user:pw@127.0.0.1/x","ttl":-1}`), "API hostile"},
	}
}

// FuzzFront drives in.php, res.php and POST /v1/tasks of a real server
// (a local queue, not started, so nothing reaches a provider) with
// arbitrary queries, content types and bodies. Nothing may panic, answer
// 500, or show the provider's key. The seeds run in every go test.
func FuzzFront(f *testing.F) {
	pc, err := provider.NewClient(provider.ClientConfig{BaseURL: "http://127.0.0.1:9", Key: fuzzProviderKey})
	if err != nil {
		f.Fatal(err)
	}
	srv, err := server.New(server.Config{
		Queue:      captchaq.Config{Provider: pc, Store: captchaq.NewMemoryStore(captchaq.MemoryStoreConfig{}), MaxQueued: 1 << 20},
		Clients:    []server.Client{{Name: "qa", Key: keyQA, PriorityMin: 2, PriorityMax: 9}, {Name: "ops", Key: keyAdmin, Admin: true}},
		SubmitWait: time.Millisecond,
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		srv.Queue().Close()
	})
	h := srv.Handler()
	for _, s := range frontSeeds() {
		f.Add(s.route, s.query, s.ct, s.body)
	}
	f.Fuzz(func(t *testing.T, route uint8, query, ct string, body []byte) {
		path := [...]string{"/in.php", "/res.php", "/v1/tasks"}[route%3]
		req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		req.URL.Path, req.URL.RawQuery = path, query
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		if path == "/v1/tasks" {
			req.Header.Set("Authorization", "Bearer "+keyQA)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code == http.StatusInternalServerError {
			t.Fatalf("%s %q %q: HTTP 500: %s", path, query, ct, w.Body.Bytes())
		}
		if bytes.Contains(w.Body.Bytes(), []byte(fuzzProviderKey)) {
			t.Fatalf("%s: the provider key in the answer: %s", path, w.Body.Bytes())
		}
	})
}
