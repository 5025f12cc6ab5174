package provider

import (
	"errors"
	"strings"
	"testing"
)

// Every refusal names its in.php code through its type: the rule's own
// code for an image's size, the field's otherwise; no message is read.
func TestValidationErrorProtocolCode(t *testing.T) {
	big := strings.Repeat("A", (MaxImageBytes+3)/3*4+8)
	for _, c := range []struct {
		name string
		task Task
		want string
	}{
		{"no googlekey", Task{Method: "userrecaptcha", Params: map[string]string{"pageurl": "https://a.example/"}}, "ERROR_GOOGLEKEY"},
		{"bad pageurl", Task{Method: "turnstile", Params: map[string]string{"sitekey": "k", "pageurl": "a.example"}}, "ERROR_PAGEURL"},
		{"bad proxy", Task{Method: "turnstile", Params: map[string]string{"sitekey": "k", "pageurl": "https://a.example/", "proxy": "h"}}, "ERROR_BAD_PROXY"},
		{"no body", Task{Method: "base64", Params: map[string]string{}}, "ERROR_ZERO_CAPTCHA_FILESIZE"},
		{"empty image", Task{Method: "base64", Params: map[string]string{"body": "===="}}, "ERROR_ZERO_CAPTCHA_FILESIZE"},
		{"image too big", Task{Method: "base64", Params: map[string]string{"body": big}}, "ERROR_TOO_BIG_CAPTCHA_FILESIZE"},
		{"not base64", Task{Method: "base64", Params: map[string]string{"body": "%%%"}}, "ERROR_IMAGE_TYPE_NOT_SUPPORTED"},
		{"no sitekey", Task{Method: "turnstile", Params: map[string]string{"pageurl": "https://a.example/"}}, "ERROR_BAD_PARAMETERS"},
	} {
		var ve *ValidationError
		if err := c.task.Validate(); !errors.As(err, &ve) || ve.ProtocolCode() != c.want {
			t.Errorf("%s: %v, want a *ValidationError with code %s", c.name, err, c.want)
		}
	}
}
