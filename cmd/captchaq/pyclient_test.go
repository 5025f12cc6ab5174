package main

import (
	"bufio"
	"crypto/tls"
	"encoding/base64"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq/internal/testbound"
	"github.com/captchaq/captchaq/internal/tlsconf"
	"github.com/captchaq/captchaq/sim"
)

// The requests 2captcha-python 2.0.9 sends, as recorded from its sync
// client (TwoCaptcha: requests, here 2.28.1) and its async client
// (AsyncTwoCaptcha: httpx, here 0.23.3) pointed at a TLS front with
// server='127.0.0.1:PORT': every call opens its own connection, speaks
// HTTP/1.1 over TLS, sends in.php as a POST (urlencoded, or multipart for
// an image file) and res.php as a GET, adds soft_id=4580, and reads the
// plain-text answers ("OK|id", "OK|answer", the bare balance,
// OK_REPORT_RECORDED): any answer that contains "ERROR" it raises as an
// ApiException, CAPCHA_NOT_READY it polls again. PyPI is out of reach of
// CI, so the requests are replayed here byte for byte.

// pyClient is one of the two clients: its User-Agent, its header order,
// and how it names an uploaded file.
type pyClient struct {
	name    string
	headers func(host string, length int, contentType string) string
	// file is the multipart part of an image file, before its bytes.
	file string
}

var pyClients = []pyClient{
	{
		name: "sync (requests)",
		headers: func(host string, length int, ct string) string {
			h := "Host: " + host + "\r\nUser-Agent: python-requests/2.28.1\r\nAccept-Encoding: gzip, deflate\r\nAccept: */*\r\nConnection: keep-alive\r\n"
			if ct != "" {
				h += "Content-Length: " + strconv.Itoa(length) + "\r\nContent-Type: " + ct + "\r\n"
			}
			return h
		},
		file: "Content-Disposition: form-data; name=\"file\"; filename=\"captcha.png\"\r\n\r\n",
	},
	{
		name: "async (httpx)",
		headers: func(host string, length int, ct string) string {
			h := "Host: " + host + "\r\nAccept: */*\r\nAccept-Encoding: gzip, deflate\r\nConnection: keep-alive\r\nUser-Agent: python-httpx/0.23.3\r\n"
			if ct != "" {
				h += "Content-Length: " + strconv.Itoa(length) + "\r\nContent-Type: " + ct + "\r\n"
			}
			return h
		},
		file: "Content-Disposition: form-data; name=\"file\"; filename=\"upload\"\r\nContent-Type: application/octet-stream\r\n\r\n",
	},
}

// pyPNG is the 1x1 PNG the recording sent.
var pyPNG, _ = base64.StdEncoding.DecodeString("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")

// pyCall is one recorded call: a POST to in.php with a body, or a GET of
// res.php with a query; {key} and {id:NAME} (the id an earlier call got)
// are filled in.
type pyCall struct {
	name      string
	multipart bool   // in.php: the image file (method=post)
	form      string // in.php: the urlencoded body
	query     string // res.php: the query
	want      *regexp.Regexp
	idOf      string // the call whose result this polls: poll until not CAPCHA_NOT_READY
}

const pyBoundary = "02a77fbe691f525e1d83ad55adc25e28"

var pyCalls = []pyCall{
	{name: "balance", query: "key={key}&action=getbalance", want: regexp.MustCompile(`^15$`)},
	{name: "normal(file)", multipart: true, want: regexp.MustCompile(`^OK\|\d+$`)},
	{name: "normal(file) result", query: "key={key}&action=get&id={id:normal(file)}", idOf: "normal(file)", want: regexp.MustCompile(`^OK\|\w{4,7}$`)},
	{name: "normal(base64)", form: "soft_id=4580&method=base64&body=iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk%2BM9QDwADhgGAWjR9awAAAABJRU5ErkJggg%3D%3D&key={key}", want: regexp.MustCompile(`^OK\|\d+$`)},
	{name: "normal(base64) result", query: "key={key}&action=get&id={id:normal(base64)}", idOf: "normal(base64)", want: regexp.MustCompile(`^OK\|\w{4,7}$`)},
	{name: "recaptcha", form: "pageurl=https%3A%2F%2Fshop.example%2Fsignup&soft_id=4580&googlekey=6LfD3PIbAAAAAJs_eEHvoOl75_83eXSqpPSRFJ_u&method=userrecaptcha&version=v2&enterprise=0&key={key}", want: regexp.MustCompile(`^OK\|\d+$`)},
	{name: "recaptcha result", query: "key={key}&action=get&id={id:recaptcha}", idOf: "recaptcha", want: regexp.MustCompile(`^OK\|03A[\w-]{100,}$`)},
	{name: "turnstile", form: "pageurl=https%3A%2F%2Fshop.example%2Flogin&soft_id=4580&sitekey=0x4AAAAAAAC3DHQFLr1GavRN&method=turnstile&key={key}", want: regexp.MustCompile(`^OK\|\d+$`)},
	{name: "turnstile result", query: "key={key}&action=get&id={id:turnstile}", idOf: "turnstile", want: regexp.MustCompile(`^OK\|0\.[\w.-]{100,}$`)},
	// extendedResponse=True polls with json=1.
	{name: "turnstile result, extendedResponse", query: "key={key}&action=get&id={id:turnstile}&json=1", want: regexp.MustCompile(`^\{"request":"0\.[\w.-]{100,}","status":1\}$`)},
	{name: "report(correct=True)", query: "key={key}&action=reportgood&id={id:turnstile}", want: regexp.MustCompile(`^OK_REPORT_RECORDED$`)},
	{name: "report(correct=False)", query: "key={key}&action=reportbad&id={id:normal(file)}", want: regexp.MustCompile(`^OK_REPORT_RECORDED$`)},
	{name: "balance, wrong key", query: "key=wrong-{key}&action=getbalance", want: regexp.MustCompile(`^ERROR_WRONG_USER_KEY$`)},
}

// TestPythonClientRequestsOverTLS replays both clients' requests over
// TLS against `serve --tls-cert --tls-key`, trusting only the CA as the
// clients do with REQUESTS_CA_BUNDLE / SSL_CERT_FILE, and checks each
// plain-text answer as the client reads it.
func TestPythonClientRequestsOverTLS(t *testing.T) {
	t.Parallel()
	bin := captchaqBinary(t)
	l, err := tlsconf.SelfSigned(t.TempDir(), nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ss, apiURL := startFastSim(t, sim.Config{Key: "py-provider-key", Threads: 20})
	clients := writeFile(t, "clients.json", `[{"name":"py","key":"py-client-key-1"}]`)
	_, m := startProcess(t, bin, []string{"CAPTCHAAI_KEY=py-provider-key"}, regexp.MustCompile(`msg=serving addr=(127\.0\.0\.1:\d+) url=https://`),
		"serve", "--api-url", apiURL, "--clients", clients, "--store", filepath.Join(t.TempDir(), "py.db"), "--listen", "127.0.0.1:0",
		"--poll-interval", "50ms", "--threads", "20", "--tls-cert", l.Cert, "--tls-key", l.Key)
	host := m[1]
	tlsCfg := &tls.Config{RootCAs: caPool(t, l.CA), ServerName: "127.0.0.1"}
	for _, c := range pyClients {
		t.Run(c.name, func(t *testing.T) {
			ids := map[string]string{}
			for _, call := range pyCalls {
				fill := func(s string) string {
					s = strings.ReplaceAll(s, "{key}", "py-client-key-1")
					for name, id := range ids {
						s = strings.ReplaceAll(s, "{id:"+name+"}", id)
					}
					return s
				}
				var req string
				switch {
				case call.multipart:
					body := ""
					for _, f := range [][2]string{{"soft_id", "4580"}, {"method", "post"}, {"key", "py-client-key-1"}} {
						body += "--" + pyBoundary + "\r\nContent-Disposition: form-data; name=\"" + f[0] + "\"\r\n\r\n" + f[1] + "\r\n"
					}
					body += "--" + pyBoundary + "\r\n" + c.file + string(pyPNG) + "\r\n--" + pyBoundary + "--\r\n"
					req = "POST /in.php HTTP/1.1\r\n" + c.headers(host, len(body), "multipart/form-data; boundary="+pyBoundary) + "\r\n" + body
				case call.form != "":
					body := fill(call.form)
					req = "POST /in.php HTTP/1.1\r\n" + c.headers(host, len(body), "application/x-www-form-urlencoded") + "\r\n" + body
				default:
					req = "GET /res.php?" + fill(call.query) + " HTTP/1.1\r\n" + c.headers(host, 0, "") + "\r\n"
				}
				if strings.Contains(req, "{id:") {
					t.Fatalf("%s: an id it needs is missing: %q", call.name, req)
				}
				answer := pyReplay(t, host, tlsCfg, req)
				if call.idOf != "" {
					testbound.Until(t, call.name, func() bool {
						answer = pyReplay(t, host, tlsCfg, req)
						return answer != "CAPCHA_NOT_READY"
					})
				}
				if !call.want.MatchString(answer) {
					t.Fatalf("%s: answer %.200q, want %v", call.name, answer, call.want)
				}
				if strings.Contains(answer, "ERROR") != strings.HasPrefix(call.want.String(), "^ERROR") {
					t.Fatalf("%s: %q: the client raises any answer that contains ERROR", call.name, answer)
				}
				if id, ok := strings.CutPrefix(answer, "OK|"); ok && call.query == "" {
					ids[call.name] = id
				}
			}
		})
	}
	if got := ss.Stats().Calls.Report; got != 2*int64(len(pyClients)) {
		t.Errorf("reports that reached the provider: %d, want %d", got, 2*len(pyClients))
	}
}

// pyReplay sends one recorded request on a connection of its own, as the
// clients do, and returns the answer's body; the answer must be HTTP 200
// over HTTP/1.1.
func pyReplay(t *testing.T, host string, cfg *tls.Config, req string) string {
	t.Helper()
	conn, err := tls.Dial("tcp", host, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 1 {
		t.Fatalf("%s: HTTP %d %s, want 200 over HTTP/1.1 (the clients raise a NetworkException otherwise)", strings.SplitN(req, "\r\n", 2)[0], resp.StatusCode, resp.Proto)
	}
	return strings.TrimSpace(string(body))
}
