// Package provider is a typed client for CaptchaAI and any other service that
// speaks the in.php/res.php protocol (2captcha-style).
//
// It knows every task type the provider supports, validates a task before any
// request is made, and maps every provider answer to an *Error whose Class
// tells the caller what to do: retry later, fail this task, wait for a free
// thread, or stop using the account. The account key never appears in an
// error string.
package provider
