package server_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/simrig"
	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/server"
	"github.com/captchaq/captchaq/sim"
)

// post sends body from ip as JSON and returns the answer.
func (b *bundle) postJSON(t *testing.T, ip, path string, body []byte) string {
	t.Helper()
	resp, err := clientFrom(ip).Post(b.url+path, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	return string(got)
}

// A hostile request: one 8 MiB in.php JSON body of 768,938 tiny fields
// with a wrong key, from an address with no key in the query. It was
// decoded whole (335 MB of RSS, seconds of CPU) before its key was found
// wrong; it is refused before any field is decoded, for its field count,
// and its bytes are given back.
func TestManyFieldJSONRefusedBeforeDecoding(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	var body bytes.Buffer
	body.WriteString(`{"key":"not-a-key-of-anyone","method":"userrecaptcha"`)
	for n := 0; n < 768936; n++ {
		fmt.Fprintf(&body, `,"%05x":1`, n)
	}
	body.WriteString("}")
	if got := b.postJSON(t, "127.0.0.2", "/in.php", body.Bytes()); got != "ERROR_BAD_PARAMETERS" {
		t.Errorf("in.php: %q, want ERROR_BAD_PARAMETERS", got)
	}
	want := `{"error_text":"the body holds more than 10000 fields (values of objects and arrays); send only the request's fields","request":"ERROR_BAD_PARAMETERS","status":0}` + "\n"
	if got := b.postJSON(t, "127.0.0.2", "/in.php?json=1", body.Bytes()); got != want {
		t.Errorf("in.php?json=1: %s, want %s", got, want)
	}
	if held := b.bodyBytes(t, "keyless"); held != 0 {
		t.Errorf("%v keyless bytes held after the answers, want 0", held)
	}
}

// A hostile createTask: a 6 MiB base64 image in task.body, the client's
// key in the body. It was decoded several times over to learn it was over
// the provider's 600 KiB: 9.2 times the body allocated (12.5 under
// -race). It is refused from its length before any of the body is
// decoded: 2.4 times (4.8 under -race), reading it. Not parallel: the
// bytes allocated are counted process-wide.
func TestCreateTaskOversizeImageRefusedBeforeDecoding(t *testing.T) {
	b := setup(t, options{})
	image := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0x89, 'P', 'N', 'G'}, 6<<20/4*3/4))
	body := []byte(`{"clientKey":"` + keyQA + `","task":{"type":"ImageToTextTask","body":"` + image + `"}}`)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	got := b.postJSON(t, "127.0.0.2", "/createTask", body)
	runtime.ReadMemStats(&after)
	want := `{"errorId":4,"errorCode":"ERROR_TOO_BIG_CAPTCHA_FILESIZE","errorDescription":"field \"task.body\" is 6291456 bytes, over the 901120 a field may be (an image of 614400 bytes, the provider's limit, is 819200 base64-encoded)"}` + "\n"
	if got != want {
		t.Errorf("createTask: %s, want %s", got, want)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 6*uint64(len(body)) {
		t.Errorf("%d bytes allocated for a %d-byte body, want under 6 times it", alloc, len(body))
	}
}

// checkGate is a Backend whose Check waits for the test.
type checkGate struct {
	server.Backend
	checking chan struct{}
	proceed  chan struct{}
}

func (g checkGate) Check(t captchaq.Task) (captchaq.ValidTask, error) {
	g.checking <- struct{}{}
	<-g.proceed
	return g.Backend.Check(t)
}

// A body's bytes stay charged to its budget until the task is decoded
// from them and checked, not only while they are read: decoding an image
// costs memory the budget paid for. They were given back as the body was
// read, before the task was.
func TestBodyBudgetHeldUntilTaskChecked(t *testing.T) {
	t.Parallel()
	pc := simrig.Start(t, simrig.Options{Sim: sim.Config{LatencyScale: 0.01, PollBan: sim.PollBan{Disabled: true}},
		Key: "provider-secret"}).Provider
	gate := checkGate{
		Backend: server.NewLocalBackend(captchaq.Config{Provider: pc, PollInterval: 10 * time.Millisecond,
			Logger: slog.New(slog.DiscardHandler)}, time.Second),
		checking: make(chan struct{}), proceed: make(chan struct{}),
	}
	srv, err := server.New(server.Config{Backend: gate, Clients: []server.Client{{Name: "qa", Key: keyQA}}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	b := &bundle{srv: srv, url: hs.URL}
	image := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0x89, 'P', 'N', 'G'}, 1000))
	for _, tc := range []struct{ name, path, body string }{
		{"createTask", "/createTask", `{"clientKey":"` + keyQA + `","task":{"type":"ImageToTextTask","body":"` + image + `"}}`},
		{"in.php", "/in.php", `{"key":"` + keyQA + `","method":"base64","json":1,"body":"` + image + `"}`},
	} {
		answered := make(chan string, 1)
		go func() {
			resp, err := clientFrom("127.0.0.2").Post(b.url+tc.path, "application/json", strings.NewReader(tc.body))
			if err != nil {
				answered <- err.Error()
				return
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			answered <- string(got)
		}()
		<-gate.checking
		if held := b.bodyBytes(t, "keyless"); held != float64(len(tc.body)) {
			t.Errorf("%s: %v keyless bytes held while its task is checked, want its %d", tc.name, held, len(tc.body))
		}
		gate.proceed <- struct{}{}
		got := <-answered
		var ans struct {
			ErrorID int    `json:"errorId"`
			Status  int    `json:"status"`
			Request string `json:"request"`
		}
		if err := json.Unmarshal([]byte(got), &ans); err != nil || ans.ErrorID != 0 || (tc.name == "in.php" && (ans.Status != 1 || ans.Request == "")) {
			t.Errorf("%s: %s, want the task taken", tc.name, got)
		}
		testbound.Until(t, "the bytes given back", func() bool { return b.bodyBytes(t, "keyless") == 0 })
	}
}

// POST /v1/tasks bodies get the same walk before they are decoded: a task
// of 70,000 tiny params is refused for its count (64 values a task, 1,000
// tasks a request), a 1 MiB param for its length, each naming the bound,
// and no task of the body is accepted.
func TestAPIBodyFieldsCappedBeforeDecoding(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	var many strings.Builder
	many.WriteString(`{"id":"many","method":"turnstile","params":{"sitekey":"0x4AAA","pageurl":"https://shop.example/"`)
	for n := range 70000 {
		fmt.Fprintf(&many, `,"p%05d":"1"`, n)
	}
	many.WriteString("}}")
	var e struct{ Error string }
	b.api(t, "POST", "/v1/tasks", keyQA, many.String(), http.StatusBadRequest, &e)
	if want := "body: the body holds more than 64000 fields (values of objects and arrays); send only the request's fields"; e.Error != want {
		t.Errorf("many fields: %q, want %q", e.Error, want)
	}
	long := `{"id":"long","method":"base64","params":{"body":"` + strings.Repeat("A", 1<<20) + `"}}`
	b.api(t, "POST", "/v1/tasks", keyQA, long, http.StatusRequestEntityTooLarge, &e)
	if want := `body: field "params.body" is 1048576 bytes, over the 901120 a field may be (an image of 614400 bytes, the provider's limit, is 819200 base64-encoded)`; e.Error != want {
		t.Errorf("long field: %q, want %q", e.Error, want)
	}
	if m := b.srv.Queue().Metrics(); m.Submitted != 0 {
		t.Errorf("%d tasks accepted, want 0", m.Submitted)
	}
}
