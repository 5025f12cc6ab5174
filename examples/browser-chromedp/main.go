// Command browser-chromedp is a browser automation that gets past a token
// CAPTCHA on a page you own: headless chromium opens the page, the widget's
// sitekey is read from the DOM, captchaq's Queue solves it, the token goes
// into the hidden field the real widget would fill, the form is submitted
// and the page's own server checks the token at siteverify.
//
// It runs against the simulator's demo site (a sign-in page with a
// Turnstile widget, a checkout page with a reCAPTCHA v2 widget):
//
//	go run ./examples/browser-chromedp                          # simulator in-process
//	go run ./examples/browser-chromedp -sim http://127.0.0.1:8085  # a running `captchaq sim`
//
// Use it on your own sites, or where the site's owner allows such testing.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/sim"
)

// Widget is where a CAPTCHA widget keeps its sitekey and its answer.
type Widget struct {
	Method   string // captchaq method
	KeyParam string // the method's sitekey parameter
	Box      string // CSS selector of the element with data-sitekey
	Field    string // CSS selector of the hidden field the token goes into
}

// The two widgets, as the real ones lay out the page.
var (
	Turnstile = Widget{Method: "turnstile", KeyParam: "sitekey", Box: ".cf-turnstile", Field: `[name="cf-turnstile-response"]`}
	Recaptcha = Widget{Method: "userrecaptcha", KeyParam: "googlekey", Box: ".g-recaptcha", Field: `[name="g-recaptcha-response"]`}
)

// Verdict is what the page said after the form was sent.
type Verdict struct {
	Success bool
	Title   string // "Signed in", "Order placed", "Rejected"
	Codes   string // siteverify's error codes, space separated
}

// Pass solves the widget on the page that is open in the browser, puts the
// token in and submits. It returns the token and the page's verdict.
func Pass(ctx context.Context, q *captchaq.Queue, w Widget) (string, Verdict, error) {
	sitekey, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(w.Box), "data-sitekey"))
	if err != nil || sitekey.Value == "" {
		return "", Verdict{}, fmt.Errorf("no sitekey in %s: %v", w.Box, err)
	}
	page, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		return "", Verdict{}, err
	}
	// Solve just before submitting: the token's lifetime runs from now.
	token, err := Solve(ctx, q, w, sitekey.Value, page)
	if err != nil {
		return "", Verdict{}, err
	}
	v, err := Submit(ctx, w, token)
	return token, v, err
}

// Solve gets a token for sitekey on page through the queue.
func Solve(ctx context.Context, q *captchaq.Queue, w Widget, sitekey, page string) (string, error) {
	f, err := q.Submit(ctx, captchaq.Task{
		ID:     fmt.Sprintf("%s-%d", w.Method, time.Now().UnixNano()),
		Method: w.Method,
		Params: map[string]string{w.KeyParam: sitekey, "pageurl": page},
	})
	if err != nil {
		return "", err
	}
	r, err := f.Wait(ctx)
	if err != nil {
		return "", err
	}
	if r.Status != captchaq.StatusSolved {
		return "", fmt.Errorf("not solved: %s %s", r.ErrorCode, r.Error)
	}
	return r.Token, nil
}

// Submit writes token into the widget's hidden field, sends the form and
// reads the verdict from the page that comes back.
func Submit(ctx context.Context, w Widget, token string) (Verdict, error) {
	if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS(w.Field), token)); err != nil {
		return Verdict{}, fmt.Errorf("filling %s: %w", w.Field, err)
	}
	if _, err := chromedp.RunResponse(ctx, chromedp.Submit(chromedp.CSS(w.Field))); err != nil {
		return Verdict{}, fmt.Errorf("submitting the form: %w", err)
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

// Browser starts headless chromium; cancel stops it.
func Browser(ctx context.Context, path, dataDir string) (context.Context, context.CancelFunc) {
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
	}
	if dataDir != "" {
		opts = append(opts, chromedp.UserDataDir(dataDir))
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelTab := chromedp.NewContext(actx)
	return bctx, func() { cancelTab(); cancelAlloc() }
}

// FindChromium returns the first of $CHROME_PATH, chromium, chromium-browser,
// google-chrome found.
func FindChromium() (string, error) {
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

// NewQueue returns a started queue solving through the provider at base.
func NewQueue(ctx context.Context, base, key string) (*captchaq.Queue, error) {
	client, err := provider.NewClient(provider.ClientConfig{BaseURL: base, Key: key, HTTPClient: &http.Client{Timeout: 30 * time.Second}})
	if err != nil {
		return nil, err
	}
	q, err := captchaq.New(captchaq.Config{Provider: client, PollInterval: 100 * time.Millisecond})
	if err != nil {
		return nil, err
	}
	return q, q.Start(ctx)
}

// Shutdown stops q, giving tasks still at the provider wait to finish: a
// provider that stopped answering cannot hold the program's exit.
func Shutdown(q *captchaq.Queue, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := q.Shutdown(ctx); err != nil {
		return fmt.Errorf("tasks still unfinished after %v, left behind: %w", wait, err)
	}
	return nil
}

func main() {
	simURL := flag.String("sim", "", "base URL of a running `captchaq sim` (default: start one in-process)")
	key := flag.String("key", "demo-key", "provider key the simulator accepts")
	flag.Parse()
	if err := run(context.Background(), *simURL, *key); err != nil {
		fmt.Fprintln(os.Stderr, "browser-chromedp:", err)
		os.Exit(1)
	}
}

// runTimeout bounds the whole run: every browser step and every solve.
const runTimeout = 2 * time.Minute

func run(ctx context.Context, base, key string) (err error) {
	ctx, cancel := context.WithTimeout(ctx, runTimeout)
	defer cancel()
	defer func() {
		if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("not done within %v: %w", runTimeout, err)
		}
	}()
	if base == "" {
		s, url, err := sim.Start(sim.Config{LatencyScale: 0.01}, "127.0.0.1:0")
		if err != nil {
			return err
		}
		defer s.Close()
		base = url
	}
	q, err := NewQueue(ctx, base, key)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, Shutdown(q, 5*time.Second)) }()
	path, err := FindChromium()
	if err != nil {
		return err
	}
	bctx, stop := Browser(ctx, path, "")
	defer stop()

	for _, p := range []struct {
		path string
		w    Widget
	}{{"/demo/turnstile", Turnstile}, {"/demo/recaptcha", Recaptcha}} {
		if err := chromedp.Do(bctx, chromedp.Navigate(base+p.path)); err != nil {
			return err
		}
		_, v, err := Pass(bctx, q, p.w)
		if err != nil {
			return fmt.Errorf("%s: %w", p.path, err)
		}
		fmt.Printf("%-16s %s %s\n", p.path, v.Title, strings.TrimSpace(v.Codes))
		if !v.Success {
			return fmt.Errorf("%s: the page rejected the token: %s", p.path, v.Codes)
		}
	}
	return nil
}
