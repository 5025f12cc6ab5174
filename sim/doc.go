// Package sim is a provider simulator that speaks the CaptchaAI / 2captcha
// in.php and res.php protocol on loopback, for tests, demos and benchmarks.
//
// It accepts requests the way real clients send them (internal/apiform, the
// front's parser): GET with a query, POST urlencoded (with or without a
// Content-Type), POST multipart with a "file" part, a JSON object under any
// Content-Type, chunked or not; json=1 or plain-text
// answers; parameter names in any case ("userAgent", "useragent"). It keeps a
// plan's thread budget (a task holds a thread from an accepted submit until it
// is solved) and answers ERROR_NO_SLOT_AVAILABLE (or ERROR_ZERO_BALANCE, as
// CaptchaAI does on thread plans) when all threads are busy.
//
// Solve times follow a per-kind log-normal distribution (Config.Latency),
// scaled by Config.LatencyScale. A seeded random source (Config.Seed) makes
// latencies, unsolvable answers, faults and tokens reproducible for one
// sequence of requests.
//
// Answers:
//
//	submit   {"status":1,"request":"<id>"}        or OK|<id>
//	poll     {"status":0,"request":"CAPCHA_NOT_READY"} / {"status":1,"request":"<token>"}
//	bulk     {"status":1,"request":"T1|CAPCHA_NOT_READY|ERROR_CAPTCHA_UNSOLVABLE"}
//	balance  {"status":1,"request":"15"}
//	reports  {"status":1,"request":"OK_REPORT_RECORDED"}
//	threads  {"status":1,"request":{"threads":5,"working_threads":2,"free_threads":3}}
//
// Ids are strings of 11 digits; with Config.NumericIDs the JSON submit answer
// carries the id as a number instead. GeeTest answers are a JSON object
// (geetest_challenge, geetest_validate, geetest_seccode), Cloudflare
// Challenge answers a JSON object (cf_clearance, user_agent), Lemin an object
// (answer, challenge_id), Amazon WAF one (captcha_voucher, existing_token);
// in plain-text mode those objects are sent as JSON text after "OK|". A
// Turnstile or hCaptcha solved with a user agent (the task's, else
// Config.UserAgent), and a DataDome cookie (its task's), answer it beside
// the token in JSON mode
// ({"status":1,"request":"0.…","useragent":"…"}, getTaskResult's
// userAgent), and a reCAPTCHA v2 given cookies answers them with Google's
// _GRECAPTCHA added ("cookies"); plain text and ids= answer the token alone.
//
// The same port speaks the JSON createTask protocol (2captcha's API v2,
// Anti-Captcha, CapMonster Cloud, CapSolver) at the root: POST
// /createTask, /getTaskResult, /getBalance and the report methods
// (/reportIncorrect, /reportCorrect, /reportIncorrectImageCaptcha,
// /reportIncorrectRecaptcha, /reportIncorrectHcaptcha,
// /reportIncorrectTokenCaptcha, /reportCorrectRecaptcha). A call is
// translated through provider/createtask into the in.php request it stands
// for and passes the same checks (key, bans, validation, balance, threads,
// poll ban); tasks of both protocols share the threads and the ids, so an
// offline test of a plan mixing in.php and createTask providers needs one
// process. Answers are HTTP 200 JSON: {"errorId":0,"taskId":…} (an
// integer), {"errorId":0,"status":"processing"|"ready","solution":{…}},
// errors as {"errorId","errorCode","errorDescription"}; a createTask
// task's callbackUrl is POSTed getTaskResult's JSON with its taskId.
// Stats counts these calls under their kinds and in Calls.CreateTask.
// A type the service does not take (not in Config.Methods, or withdrawn
// with Server.Withdraw) is refused as Config.Refusal says, in the words
// of CaptchaAI, 2captcha, Anti-Captcha, CapMonster or CapSolver
// (Stats.Refused counts them).
//
// Under /sim/ the server offers an admin API: GET /sim/stats (the Stats
// document), POST /sim/stats/reset, GET or POST /sim/account (switch the bad
// key, zero balance and IP banned states), POST /sim/unban (lift poll bans).
//
// The simulator is also the site side of a token CAPTCHA: under /demo/ a
// sign-in page carries a Turnstile-like widget and a checkout page a
// reCAPTCHA-v2-like one (sitekey in the DOM, hidden response field), and
// their forms are checked at /turnstile/v0/siteverify and
// /recaptcha/api/siteverify, which answer as Cloudflare's and Google's do
// (success, challenge_ts, hostname, error-codes). They accept a token only
// if this simulator issued it, for that page's sitekey, within its lifetime
// (Config.Siteverify: 300 s Turnstile, 120 s reCAPTCHA) and only once.
// /demo/challenge stands behind a Cloudflare challenge: it opens (200) to
// a cf_clearance cookie solved for its URL, sent with the user agent the
// cookie is bound to, and answers 403 with the reason otherwise.
// /captchafox/siteverify and /friendlycaptcha/api/v1/siteverify check
// tokens solved for DemoCaptchaFox's and DemoFriendly's sitekeys (the
// token as response, or solution), answering in Turnstile's shape.
// /demo/amazon-waf, /demo/mtcaptcha and /demo/datadome check what their
// site would: the Amazon WAF captcha_voucher or MTCaptcha token posted,
// once, or the datadome cookie, from the user agent it was solved with
// only (demowall.go).
//
// Start serves the simulator on a socket; New alone serves nothing, and
// Server.InProcessClient answers its requests in the calling goroutine,
// which is how tests run a client and the simulator together inside a
// testing/synctest bubble, on its fake clock.
//
// Memory stays flat: a task is forgotten Config.FetchedRetention after its
// final answer was first delivered, or Config.ResultTTL after it was solved
// if nobody asks; a fingerprint (Stats.Duplicates) ResultTTL after its last
// submit; a token only the demo site could check, twice its lifetime after
// its solve. Solving runs on one timer over a heap of due times, so idle
// tasks cost no CPU, and the heap is cleared of the events of forgotten
// tasks once they outnumber the live ones.
package sim
