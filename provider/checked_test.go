package provider

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
)

// A task checked at the door (Task.Check) is sent by SubmitChecked as it
// was checked: not validated again, its image not decoded again. Proof:
// the checked task's params are changed after the check into ones that
// do not validate, and it is still sent, with the image decoded at the
// check; the same task unchecked is refused with no request.
func TestSubmitCheckedIsNotValidatedAgain(t *testing.T) {
	t.Parallel()
	img := []byte("\x89PNG\r\n\x1a\nchecked once")
	var hits atomic.Int64
	var sent []byte
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		f, _, err := r.FormFile("file")
		if err != nil {
			t.Errorf("no file part: %v", err)
			return
		}
		sent, _ = io.ReadAll(f)
		io.WriteString(w, "OK|7")
	}), ClientConfig{})
	task := Task{Method: "post", Params: map[string]string{"file": base64.StdEncoding.EncodeToString(img)}}
	ct, err := task.Check(CaptchaAIMethods)
	if err != nil || ct.Kind != KindImage {
		t.Fatalf("Check = %+v, %v; want an image", ct, err)
	}
	task.Params["file"] = "%%% not base64" // the caller's map: the checked copy keeps its own
	if id, err := c.SubmitChecked(context.Background(), ct, ""); err != nil || id != "7" || string(sent) != string(img) {
		t.Fatalf("SubmitChecked = %q, %v, sent %q; want 7 with the image checked", id, err, sent)
	}
	ct.Params["regsense"] = "maybe" // changed after the check: not seen again
	if _, err := c.SubmitChecked(context.Background(), ct, ""); err != nil {
		t.Fatalf("SubmitChecked of a checked task validated it again: %v", err)
	}
	var ve *ValidationError
	if _, err := c.SubmitChecked(context.Background(), Unchecked(ct.Task), ""); !errors.As(err, &ve) || ve.Field != "params.regsense" {
		t.Fatalf("unchecked: %v, want a ValidationError on params.regsense", err)
	}
	if n := hits.Load(); n != 2 {
		t.Fatalf("%d requests, want 2 (none for the unchecked invalid task)", n)
	}
}

// A task checked for methods the client does not solve is validated by
// it, and refused.
func TestSubmitCheckedForOtherMethodsIsValidated(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }), ClientConfig{})
	ct, err := Task{Method: "hcaptcha", Params: map[string]string{"sitekey": "s", "pageurl": "https://a.example/"}}.Check(KnownMethods)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SubmitChecked(context.Background(), ct, ""); !errors.Is(err, ErrUnsupportedType) || hits.Load() != 0 {
		t.Fatalf("hCaptcha to CaptchaAI: %v after %d requests, want ErrUnsupportedType and none", err, hits.Load())
	}
}
