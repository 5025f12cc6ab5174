// Package captchaq is a queue for solving many captchas through CaptchaAI or
// any service that speaks its in.php/res.php protocol, for automation and QA
// that the user is allowed to run.
//
// A Queue keeps the plan's threads busy and never over-subscribed, submits
// urgent tasks first and shares threads fairly among tenants, polls every
// task in flight with one bulk request, retries by error class, and keeps
// every step durable in a Store so a crash loses no task and pays for no
// second solve.
package captchaq
