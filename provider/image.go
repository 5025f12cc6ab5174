package provider

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/captchaq/captchaq/internal/checks"
)

// The in.php codes of an image's size.
const (
	codeZeroFileSize   = "ERROR_ZERO_CAPTCHA_FILESIZE"
	codeTooBigFileSize = "ERROR_TOO_BIG_CAPTCHA_FILESIZE"
)

// validateImage checks the image of a base64 or post task and returns it
// decoded.
func validateImage(t Task) ([]byte, error) {
	field := ""
	switch t.Method {
	case "base64":
		field = "body"
	case "post":
		field = "file"
	default:
		return nil, nil
	}
	v := t.Params[field]
	if strings.TrimSpace(v) == "" {
		if field == "body" {
			return nil, &ValidationError{Field: "params.body", Reason: "required for method base64; the image encoded as base64", Code: codeZeroFileSize}
		}
		return nil, &ValidationError{Field: "params.file", Reason: "required for method post; the image's bytes, base64-encoded (the command line reads a local path at intake)", Code: codeZeroFileSize}
	}
	if n := base64Size(v); n > MaxImageBytes {
		// Refused from its length: decoding megabytes only to learn
		// they are too many would cost what the refusal saves.
		return nil, checkImageSize("params."+field, n)
	}
	checks.Count(checks.Decode, t.Params)
	b, err := decodeBase64(v)
	switch {
	case err != nil && field == "body":
		return nil, &ValidationError{Field: "params.body", Reason: "not valid base64 (" + err.Error() + "); send the image bytes base64-encoded"}
	case err != nil:
		// The value is never opened as a path: a task may come from a
		// remote client, and what exists on this machine is not theirs
		// to learn.
		return nil, &ValidationError{Field: "params.file", Reason: "must be the image's bytes, base64-encoded; a path is not read here (send method base64 with body, or let the command line read a local file at intake)"}
	}
	return b, checkImageSize("params."+field, len(b))
}

// MaxImageBytes is the largest image taken, the provider's own limit: its
// in.php answers ERROR_TOO_BIG_CAPTCHA_FILESIZE above 600 kB, and a bigger
// upload is cut short, which the provider may read as a bad request.
const MaxImageBytes = 600 << 10

func checkImageSize(field string, n int) error {
	if n == 0 {
		return &ValidationError{Field: field, Reason: "decodes to an empty image", Code: codeZeroFileSize}
	}
	if n > MaxImageBytes {
		return &ValidationError{Field: field, Reason: fmt.Sprintf("the image is %d bytes; the provider takes at most %d (600 KiB): scale it down or crop it", n, MaxImageBytes), Code: codeTooBigFileSize}
	}
	return nil
}

// base64Data is s without a data: URI prefix, if it has one.
func base64Data(s string) string {
	if strings.HasPrefix(s, "data:") {
		if i := strings.Index(s, ","); i >= 0 {
			return s[i+1:]
		}
	}
	return s
}

// base64Size is how many bytes s decodes to as decodeBase64 reads it (a
// data: prefix and white space skipped), counted without decoding it.
func base64Size(s string) int {
	s = base64Data(s)
	n := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\n', '\r', ' ', '\t', '=':
		default:
			n++
		}
	}
	return n * 3 / 4
}

// decodeBase64 accepts standard base64 with or without padding, with line
// breaks, and with a data: URI prefix.
func decodeBase64(s string) ([]byte, error) {
	s = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == ' ' || r == '\t' {
			return -1
		}
		return r
	}, base64Data(s))
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		b, err = base64.RawStdEncoding.DecodeString(strings.TrimRight(s, "="))
	}
	if err != nil {
		return nil, errors.New("bad base64 data")
	}
	return b, nil
}
