// Command browser-http is the browser automation of browser-chromedp with
// the token fetched from `captchaq serve` over plain HTTP: one in.php call
// to submit, res.php calls to poll, the same two calls from any language.
// Chromium opens the page and reads the sitekey, serve solves it, the token
// goes into the hidden field, the form is submitted and the page's own
// server checks the token at siteverify.
//
//	go run ./examples/browser-http      # simulator and serve in-process
//
//	# or against running services:
//	captchaq sim --latency-scale 0.1 &                   # on 127.0.0.1:8085
//	echo '[{"name":"qa","key":"qa-client-key"}]' > clients.json
//	CAPTCHAAI_KEY=sim-key captchaq serve --clients clients.json --api-url http://127.0.0.1:8085 --store memory &
//	go run ./examples/browser-http -serve http://127.0.0.1:8080 -key qa-client-key -site http://127.0.0.1:8085
//
// Use it on your own sites, or where the site's owner allows such testing.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/server"
	"github.com/captchaq/captchaq/sim"
)

// Widget is where a CAPTCHA widget keeps its sitekey and its answer.
type Widget struct {
	Method   string // in.php method
	KeyParam string // the method's sitekey parameter
	Box      string // CSS selector of the element with data-sitekey
	Field    string // CSS selector of the hidden field the token goes into
}

var (
	Turnstile = Widget{Method: "turnstile", KeyParam: "sitekey", Box: ".cf-turnstile", Field: `[name="cf-turnstile-response"]`}
	Recaptcha = Widget{Method: "userrecaptcha", KeyParam: "googlekey", Box: ".g-recaptcha", Field: `[name="g-recaptcha-response"]`}
)

// Solver asks `captchaq serve` for tokens.
type Solver struct {
	URL       string // serve's base URL
	Key       string // this client's key in serve's clients file
	PollEvery time.Duration
	HTTP      *http.Client // with a Timeout, so one call that hangs fails on its own
}

// ioAnswer is in.php's and res.php's answer with json=1.
type ioAnswer struct {
	Status  int    `json:"status"`
	Request string `json:"request"`
}

func (s Solver) call(ctx context.Context, method, path string, v url.Values) (ioAnswer, error) {
	v.Set("key", s.Key)
	v.Set("json", "1")
	var req *http.Request
	var err error
	if method == http.MethodPost {
		req, err = http.NewRequestWithContext(ctx, method, s.URL+path, strings.NewReader(v.Encode()))
		if req != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
	} else {
		req, err = http.NewRequestWithContext(ctx, method, s.URL+path+"?"+v.Encode(), nil)
	}
	if err != nil {
		return ioAnswer{}, err
	}
	resp, err := s.HTTP.Do(req)
	if err != nil {
		return ioAnswer{}, err
	}
	defer resp.Body.Close()
	var a ioAnswer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		return ioAnswer{}, fmt.Errorf("%s answered %s, not JSON: %w", path, resp.Status, err)
	}
	return a, nil
}

// Solve submits the widget's task and polls until its token is ready.
func (s Solver) Solve(ctx context.Context, w Widget, sitekey, page string) (string, error) {
	a, err := s.call(ctx, http.MethodPost, "/in.php", url.Values{"method": {w.Method}, w.KeyParam: {sitekey}, "pageurl": {page}})
	if err != nil {
		return "", err
	}
	if a.Status != 1 {
		return "", fmt.Errorf("in.php: %s", a.Request)
	}
	id := a.Request
	for {
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(s.PollEvery):
		}
		a, err := s.call(ctx, http.MethodGet, "/res.php", url.Values{"action": {"get"}, "id": {id}})
		if err != nil {
			return "", err
		}
		switch {
		case a.Status == 1:
			return a.Request, nil
		case a.Request != "CAPCHA_NOT_READY":
			return "", fmt.Errorf("res.php: %s", a.Request)
		}
	}
}

// Verdict is what the page said after the form was sent.
type Verdict struct {
	Success bool
	Title   string
	Codes   string
}

// Pass solves the widget on the open page, puts the token in and submits.
func Pass(ctx context.Context, s Solver, w Widget) (Verdict, error) {
	sitekey, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(w.Box), "data-sitekey"))
	if err != nil || sitekey.Value == "" {
		return Verdict{}, fmt.Errorf("no sitekey in %s: %v", w.Box, err)
	}
	page, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		return Verdict{}, err
	}
	token, err := s.Solve(ctx, w, sitekey.Value, page) // just before submitting
	if err != nil {
		return Verdict{}, err
	}
	if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS(w.Field), token)); err != nil {
		return Verdict{}, err
	}
	if _, err := chromedp.RunResponse(ctx, chromedp.Submit(chromedp.CSS(w.Field))); err != nil {
		return Verdict{}, err
	}
	ok, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.ID("verdict"), "data-success"))
	if err != nil {
		return Verdict{}, fmt.Errorf("reading the verdict: %w", err)
	}
	title, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.ID("verdict")))
	if err != nil {
		return Verdict{}, err
	}
	codes, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.ID("error-codes")))
	return Verdict{Success: ok.Value == "true", Title: title, Codes: codes}, err
}

// findChromium returns $CHROME_PATH or the first chromium on PATH.
func findChromium() (string, error) {
	if p := os.Getenv("CHROME_PATH"); p != "" {
		return p, nil
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no chromium found: install it (apt-get install chromium) or set CHROME_PATH")
}

// demoKey is the client key of the in-process serve.
const demoKey = "demo-client-key"

// startStack runs a simulator and `captchaq serve` in-process, as
//
//	captchaq sim & captchaq serve --api-url SIM --store memory
//
// would; it returns both URLs.
func startStack(ctx context.Context) (simURL, serveURL string, stop func(), err error) {
	s, simURL, err := sim.Start(sim.Config{LatencyScale: 0.01}, "127.0.0.1:0")
	if err != nil {
		return "", "", nil, err
	}
	client, err := provider.NewClient(provider.ClientConfig{BaseURL: simURL, Key: "provider-key"})
	if err != nil {
		s.Close()
		return "", "", nil, err
	}
	srv, err := server.New(server.Config{
		Queue:   captchaq.Config{Provider: client, PollInterval: 100 * time.Millisecond},
		Clients: []server.Client{{Name: "demo", Key: demoKey}},
	})
	if err == nil {
		err = srv.Start(ctx)
	}
	if err != nil {
		s.Close()
		return "", "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.Close()
		return "", "", nil, err
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	return simURL, "http://" + ln.Addr().String(), func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
		_ = srv.Shutdown(sctx)
		s.Close()
	}, nil
}

func main() {
	serveURL := flag.String("serve", "", "base URL of a running `captchaq serve` (default: start a simulator and serve in-process)")
	key := flag.String("key", demoKey, "this client's key in serve's clients file")
	site := flag.String("site", "", "base URL of the demo site (a running `captchaq sim`); required with -serve")
	flag.Parse()
	if err := run(context.Background(), *serveURL, *key, *site); err != nil {
		fmt.Fprintln(os.Stderr, "browser-http:", err)
		os.Exit(1)
	}
}

// runTimeout bounds the whole run: every browser step and every solve.
const runTimeout = 2 * time.Minute

func run(ctx context.Context, serveURL, key, site string) (err error) {
	ctx, cancel := context.WithTimeout(ctx, runTimeout)
	defer cancel()
	defer func() {
		if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("not done within %v: %w", runTimeout, err)
		}
	}()
	if serveURL == "" {
		simURL, sURL, stop, err := startStack(ctx)
		if err != nil {
			return err
		}
		defer stop()
		serveURL, site = sURL, simURL
	}
	if site == "" {
		return errors.New("-site: give the demo site's base URL (the `captchaq sim` URL)")
	}
	path, err := findChromium()
	if err != nil {
		return err
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, chromedp.ExecPath(path),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-sync", true))
	defer cancelAlloc()
	bctx, cancelTab := chromedp.NewContext(actx)
	defer cancelTab()

	solver := Solver{URL: serveURL, Key: key, PollEvery: 500 * time.Millisecond, HTTP: &http.Client{Timeout: 30 * time.Second}}
	for _, p := range []struct {
		path string
		w    Widget
	}{{"/demo/turnstile", Turnstile}, {"/demo/recaptcha", Recaptcha}} {
		if err := chromedp.Do(bctx, chromedp.Navigate(site+p.path)); err != nil {
			return err
		}
		v, err := Pass(bctx, solver, p.w)
		if err != nil {
			return fmt.Errorf("%s: %w", p.path, err)
		}
		fmt.Printf("%-16s %s %s\n", p.path, v.Title, v.Codes)
		if !v.Success {
			return fmt.Errorf("%s: the page rejected the token: %s", p.path, v.Codes)
		}
	}
	return nil
}
