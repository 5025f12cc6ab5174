package sim

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/captchaq/captchaq/provider"
)

// taskSpec is a validated submit.
type taskSpec struct {
	kind        provider.Kind
	hint        answerHint
	fingerprint [16]byte
	pingback    string
	// pingbackJSON: the pingback is a createTask callbackUrl, POSTed
	// getTaskResult's JSON instead of in.php's id and code.
	pingbackJSON bool
}

// notSupported ends the text refusing a type the service does not solve.
const notSupported = " is not supported by this service."

// parseSubmit validates a submit like the provider: the first missing or
// bad field gives its error code and a text naming the field. A method
// not in served (RouteMethod names) is refused as one the service does
// not solve.
func parseSubmit(q *request, served []string) (spec taskSpec, code, text string) {
	method := routeMethod(q)
	if name := provider.TypeName(method); name != "" && !slices.Contains(served, method) {
		return spec, "ERROR_BAD_PARAMETERS", name + notSupported
	}
	if p := q.get("proxy"); p != "" && !validProxy(p) {
		return spec, "ERROR_BAD_PROXY", ""
	}
	if pt := q.get("proxytype"); pt != "" && !slices.Contains([]string{"HTTP", "HTTPS", "SOCKS4", "SOCKS5"}, strings.ToUpper(pt)) {
		return spec, "ERROR_BAD_PARAMETERS", "proxytype must be HTTP, HTTPS, SOCKS4 or SOCKS5."
	}
	if spec, code, text = parseKind(q, method); code != "" {
		return spec, code, text
	}
	if !validPageURL(q.get("pageurl")) && needsPageURL(method) {
		return spec, "ERROR_PAGEURL", ""
	}
	if pb := q.get("pingback"); pb != "" {
		if !validPageURL(pb) {
			return spec, "ERROR_BAD_PARAMETERS", "pingback is not a full http(s) URL."
		}
		spec.pingback = pb
	}
	spec.fingerprint = fingerprint(method, q.params, q.file, q.hasFile)
	return spec, "", ""
}

// tokenMethods are the methods whose task is a site's key and a page: the
// fields each requires, in the order they are checked, and its kind.
var tokenMethods = map[string]struct {
	kind provider.Kind
	need []string
}{
	"turnstile":            {provider.KindTurnstile, []string{"sitekey"}},
	"cloudflare_challenge": {provider.KindCloudflareChallenge, []string{"proxy", "proxytype"}},
	"hcaptcha":             {provider.KindHCaptcha, []string{"sitekey"}},
	"funcaptcha":           {provider.KindFunCaptcha, []string{"publickey"}},
	"geetest_v4":           {provider.KindGeeTestV4, []string{"captcha_id"}},
	"geetest":              {provider.KindGeeTest, []string{"gt", "challenge"}},
	"captchafox":           {provider.KindCaptchaFox, []string{"sitekey"}},
	"friendly_captcha":     {provider.KindFriendlyCaptcha, []string{"sitekey"}},
	"lemin":                {provider.KindLemin, []string{"captcha_id"}},
	"amazon_waf":           {provider.KindAmazonWAF, []string{"sitekey", "iv", "context"}},
	"mt_captcha":           {provider.KindMTCaptcha, []string{"sitekey"}},
	"datadome":             {provider.KindDataDome, []string{"captcha_url", "useragent", "proxy", "proxytype"}},
}

// present reports whether the submit carries field, not blank.
func (q *request) present(field string) bool { return strings.TrimSpace(q.get(field)) != "" }

// missingField is the refusal of a submit without field.
func missingField(spec taskSpec, field string) (taskSpec, string, string) {
	return spec, "ERROR_BAD_PARAMETERS", field + " is missing or empty."
}

// parseKind reads the fields of method's task and its kind, or refuses
// the first missing or bad one.
func parseKind(q *request, method string) (spec taskSpec, code, text string) {
	if tm, ok := tokenMethods[method]; ok {
		for _, field := range tm.need {
			if !q.present(field) {
				return missingField(spec, field)
			}
		}
		spec.kind = tm.kind
		switch method {
		case "cloudflare_challenge", "turnstile", "hcaptcha", "datadome":
			spec.hint.text = q.get("useragent")
		case "geetest":
			spec.hint.text = q.get("challenge")
		}
		return spec, "", ""
	}
	switch method {
	case "base64", "post":
		return parseImage(q, method)
	case "bls":
		found := q.hasFile
		for name, v := range q.params {
			if v != "" && (strings.HasPrefix(name, "image") || name == "body") {
				found = true
			}
		}
		if !found {
			return spec, "ERROR_ZERO_CAPTCHA_FILESIZE", ""
		}
		spec.kind = provider.KindBLS
	case "userrecaptcha":
		if !q.present("googlekey") {
			return spec, "ERROR_GOOGLEKEY", ""
		}
		spec.kind = provider.KindRecaptchaV2
		spec.hint.text = q.get("cookies")
		if strings.EqualFold(q.get("version"), "v3") {
			spec.hint.text = ""
			spec.kind = provider.KindRecaptchaV3
			if ms := q.get("min_score"); ms != "" {
				if f, err := strconv.ParseFloat(ms, 64); err != nil || f < 0.1 || f > 0.9 {
					return spec, "ERROR_BAD_PARAMETERS", "min_score must be a number from 0.1 to 0.9."
				}
			}
		}
	case "":
		return missingField(spec, "method")
	default:
		return spec, "ERROR_BAD_PARAMETERS", "method " + strconv.Quote(method) + " is not supported."
	}
	return spec, "", ""
}

// parseImage reads an image task (method base64 or post): its image, and
// for a grid (recaptcha=1) its instructions.
func parseImage(q *request, method string) (spec taskSpec, code, text string) {
	img := q.file
	if method == "base64" {
		body := q.get("body")
		if body == "" {
			return spec, "ERROR_ZERO_CAPTCHA_FILESIZE", ""
		}
		if i := strings.Index(body, ";base64,"); i >= 0 && strings.HasPrefix(body, "data:") {
			body = body[i+len(";base64,"):]
		}
		var err error
		img, err = decodeBase64(body)
		if err != nil {
			return spec, "ERROR_IMAGE_TYPE_NOT_SUPPORTED", ""
		}
	}
	if len(img) == 0 {
		return spec, "ERROR_ZERO_CAPTCHA_FILESIZE", ""
	}
	if len(img) > maxImage {
		return spec, "ERROR_TOO_BIG_CAPTCHA_FILESIZE", ""
	}
	spec.kind = provider.KindImage
	if q.get("recaptcha") == "1" {
		if !q.present("textinstructions") && !q.present("imginstructions") {
			return missingField(spec, "textinstructions")
		}
		spec.kind = provider.KindGrid
	} else {
		spec.hint = imageHint(q)
	}
	return spec, "", ""
}

// needsPageURL says which methods require pageurl.
func needsPageURL(method string) bool {
	switch method {
	case "userrecaptcha", "turnstile", "cloudflare_challenge", "geetest", "captchafox", "friendly_captcha", "lemin",
		"hcaptcha", "funcaptcha", "geetest_v4", "amazon_waf", "mt_captcha", "datadome":
		return true
	}
	return false
}

// validPageURL accepts a full http or https URL with a host.
func validPageURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// validProxy accepts [login:password@]host:port with a numeric port
// (provider.ParseProxy).
func validProxy(p string) bool {
	_, err := provider.ParseProxy(p, "")
	return err == nil
}

// decodeBase64 accepts the standard and URL alphabets, padded or not, with
// line breaks, as clients send all of them.
func decodeBase64(s string) ([]byte, error) {
	s = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == ' ' {
			return -1
		}
		return r
	}, s)
	s = strings.TrimRight(s, "=")
	if strings.ContainsAny(s, "-_") {
		return base64.RawURLEncoding.DecodeString(s)
	}
	return base64.RawStdEncoding.DecodeString(s)
}

// ignoredInFingerprint are fields that do not change what is solved.
var ignoredInFingerprint = map[string]bool{
	"key": true, "json": true, "soft_id": true, "pingback": true, "header_acao": true, "method": true,
}

// fingerprint identifies a submission by its method and solving fields.
func fingerprint(method string, params map[string]string, file []byte, hasFile bool) [16]byte {
	names := make([]string, 0, len(params))
	for n := range params {
		if !ignoredInFingerprint[n] {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	h := sha256.New()
	h.Write([]byte(strings.ToLower(method)))
	for _, n := range names {
		h.Write([]byte{0})
		h.Write([]byte(n))
		h.Write([]byte{'='})
		h.Write([]byte(params[n]))
	}
	if hasFile {
		h.Write([]byte{0, 1})
		h.Write(file)
	}
	var fp [16]byte
	copy(fp[:], h.Sum(nil))
	return fp
}

// Fingerprint returns the fingerprint under which Stats counts duplicate
// submissions: the method and every field (names case-insensitive) except
// key, json, soft_id, pingback and header_acao. A multipart image is given
// as file (nil when the submit had none).
func Fingerprint(method string, params map[string]string, file []byte) string {
	lower := make(map[string]string, len(params))
	for n, v := range params {
		lower[strings.ToLower(n)] = v
	}
	fp := fingerprint(method, lower, file, file != nil)
	return hex.EncodeToString(fp[:])
}

// serveSubmit answers in.php.
func (s *Server) serveSubmit(w http.ResponseWriter, r *http.Request) {
	q, perr := parseRequest(w, r, s.gate.keyOK)
	if !s.callStart(w, r, func(c *Calls) { c.Submit++ }, http.StatusBadGateway) {
		return
	}
	var spec taskSpec
	var code, text string
	switch {
	case perr == errTooBig:
		code = "ERROR_TOO_BIG_CAPTCHA_FILESIZE"
	case perr != nil:
		code, text = "ERROR_BAD_PARAMETERS", "The request could not be read: "+perr.Error()
	default:
		spec, code, text = s.gate.parseSubmit(q)
	}
	id, code, text := s.admit(q, clientIP(r), spec, code, text)
	if code != "" {
		replyError(w, q, code, text)
		return
	}
	ids := strconv.FormatUint(id, 10)
	if s.cfg.NumericIDs {
		replyOK(w, q, id, "OK|"+ids)
		return
	}
	replyOK(w, q, ids, "OK|"+ids)
}

// callStart counts a call (count adds it to its kind), runs the solves
// that are due, and draws and carries out the call's fault, if any. It
// reports whether the call must still be answered.
func (s *Server) callStart(w http.ResponseWriter, r *http.Request, count func(*Calls), faultStatus int) bool {
	s.mu.Lock()
	s.runDueLocked(s.cfg.Now())
	count(&s.st.calls)
	f := s.dice.fault()
	s.st.countFault(f)
	s.mu.Unlock()
	return f == faultNone || f.apply(w, r, faultStatus, s.cfg.Faults.SlowDelay, s.done)
}

// admit runs a parsed submit (spec, or the code refusing it) through the
// gates every submit passes (bans, the key, the test hook, the balance,
// the plan's threads) and accepts it: its id, or the code and text of the
// refusal.
func (s *Server) admit(q *request, ip string, spec taskSpec, code, text string) (uint64, string, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.Now()
	s.runDueLocked(now)
	if gate := s.gate.check(q, ip, now); gate != "" {
		code, text = gate, ""
	} else if r, ok := s.gate.refusal(q, text); ok {
		code, text = r.Code, r.Text
		s.st.refused++
	} else if refuse := s.gate.refuse(q); refuse != "" {
		code, text = refuse, ""
	} else if s.gate.account.ZeroBalance || code == "" && s.gate.balance() < s.cfg.PricePer1000/1000 {
		code, text = "ERROR_ZERO_BALANCE", ""
	} else if code == "" && s.table.inUse >= s.cfg.Threads {
		code = s.cfg.NoSlotAnswer
		s.st.noSlot++
	}
	if code != "" {
		return 0, code, text
	}
	id := s.acceptLocked(spec, now)
	s.tokens.note(id, spec.kind, q)
	return id, "", ""
}

// routeMethod is the RouteMethod of a submit's task.
func routeMethod(q *request) string {
	return provider.Task{Method: q.get("method"), Params: map[string]string{"version": q.get("version")}}.RouteMethod()
}

// acceptLocked takes a thread for a valid submit and schedules its solve.
func (s *Server) acceptLocked(spec taskSpec, now time.Time) uint64 {
	id := s.table.nextID
	s.table.nextID++
	lat := s.dice.latency(spec.kind)
	t := &task{
		id:         id,
		kind:       spec.kind,
		unsolvable: s.dice.unsolvable(),
		acceptedAt: now,
		pingback:   spec.pingback,
		pbJSON:     spec.pingbackJSON,
		hint:       spec.hint,
		salt:       saltFor(s.cfg.Seed, spec.fingerprint),
	}
	if s.cfg.Pingback.Disabled {
		t.pingback = ""
	}
	s.journal.record(t, now.Add(lat), spec.fingerprint)
	s.table.tasks[id] = t
	s.table.take(now)
	s.st.countSubmission(spec.fingerprint, now)
	s.st.drawn += lat
	s.st.longest = max(s.st.longest, lat)
	s.table.schedule(event{at: now.Add(lat), id: id, kind: eventSolve})
	return id
}

// solveLocked ends a task's solving at its due time: the thread is free and
// the answer (or ERROR_CAPTCHA_UNSOLVABLE) is ready.
func (s *Server) solveLocked(t *task, at time.Time) {
	s.table.free(at)
	t.doneAt = at
	if t.unsolvable {
		t.state = stateUnsolvable
		s.st.unsolvable++
	} else {
		t.state = stateSolved
		s.st.solved++
		s.st.spent += s.cfg.PricePer1000 / 1000
	}
	s.tokens.issue(t, at, s.cfg.UserAgent)
	t.forgetAt = at.Add(s.cfg.ResultTTL)
	s.table.schedule(event{at: t.forgetAt, id: t.id, kind: eventForget})
	if t.pingback != "" {
		code := "ERROR_CAPTCHA_UNSOLVABLE"
		if t.state == stateSolved {
			code = answerFor(t, s.cfg.UserAgent).raw
		}
		c := pingbackCall{url: t.pingback, id: t.id, code: code}
		if t.pbJSON {
			c.json = ctPingback(t, s.cfg.UserAgent, s.cfg.PricePer1000)
		}
		s.pingbacks.enqueue(c)
	}
}
