package createtask

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/captchaq/captchaq/provider"
)

// ParseTask reads a createTask task object (the "task" field's JSON) into
// the queue's task: the in.php method and its params, ready for the same
// validation as a task from in.php. The Fault names the field and the fix:
// ERROR_TASK_ABSENT (no task), ERROR_TASK_NOT_SUPPORTED (no or unknown
// type) or ERROR_BAD_PARAMETERS (a field of the wrong shape).
func ParseTask(raw []byte) (provider.Task, *Fault) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return provider.Task{}, fault("ERROR_TASK_ABSENT", "task: required; send {\"task\":{\"type\":\"TurnstileTaskProxyless\",\"websiteURL\":…,\"websiteKey\":…}}")
	}
	obj, f := foldObject(raw, "task")
	if f != nil {
		return provider.Task{}, f
	}
	if f := reservedField(obj); f != nil {
		return provider.Task{}, f
	}
	typ, ok := obj.str("type")
	if !ok || strings.TrimSpace(typ) == "" {
		return provider.Task{}, fault("ERROR_TASK_NOT_SUPPORTED", "task.type: required, a string; one of "+strings.Join(TypeNames(), ", "))
	}
	tn, ok := byName[strings.ToLower(strings.TrimSpace(typ))]
	if !ok {
		return provider.Task{}, fault("ERROR_TASK_NOT_SUPPORTED", fmt.Sprintf("task.type: %s is not a type captchaq solves; use one of %s", quote(typ), strings.Join(TypeNames(), ", ")))
	}
	tt := tn.t
	if tn.t == typeGeeTest {
		switch v, _ := obj.text("version"); v {
		case "", "3":
		case "4":
			tt = typeGeeTestV4
		default:
			return provider.Task{}, fault("ERROR_BAD_PARAMETERS", fmt.Sprintf("task.version: %s is not a GeeTest version; use 3 or 4", quote(v)))
		}
	}
	if tn.t == typeTurnstile {
		switch v, _ := obj.str("cloudflareTaskType"); strings.ToLower(strings.TrimSpace(v)) {
		case "", "token":
		case "cf_clearance":
			tt = typeCFClearance
		default:
			return provider.Task{}, fault("ERROR_TASK_NOT_SUPPORTED", fmt.Sprintf("task.cloudflareTaskType: %s is not supported; use \"token\" (a Turnstile token) or \"cf_clearance\" (a challenge page's cookie)", quote(v)))
		}
	}
	t := provider.Task{Method: tt.method, Params: map[string]string{}}
	maps.Copy(t.Params, tn.extra)
	for _, fd := range tt.fields {
		name, v, ok := obj.field(fd)
		if !ok {
			continue
		}
		s, f := convert(name, v, fd.kind)
		if f != nil {
			return provider.Task{}, f
		}
		if strings.TrimSpace(s) != "" { // an empty optional field is not sent, as in.php's
			t.Params[fd.param] = s
		}
	}
	if tt == typeGeeTestV4 {
		id, f := geeTestV4ID(obj)
		if f != nil {
			return provider.Task{}, f
		}
		t.Params["captcha_id"] = id
	}
	if tt == typeRecaptchaV2 {
		if f := enterprisePayload(obj, tn, t.Params); f != nil {
			return provider.Task{}, f
		}
	}
	if f := parseProxy(obj, tn, t.Params); f != nil {
		return provider.Task{}, f
	}
	if f := checkNeeds(tt, tn, t.Params); f != nil {
		return provider.Task{}, f
	}
	return t, nil
}

// reservedField refuses a task field in.php would read as the request's
// own (provider.IsReservedParam: key, pingback, soft_id, … in any spelling
// a form parser reads as one): no type takes one, and a client that sends
// one means it to act, which it would not.
func reservedField(obj folded) *Fault {
	for _, lk := range slices.Sorted(maps.Keys(obj)) {
		name := obj[lk].name
		if base, ok := provider.IsReservedParam(name); ok {
			if strings.ContainsFunc(name, func(r rune) bool { return !strconv.IsPrint(r) }) {
				name = strconv.Quote(name)
			}
			return fault("ERROR_BAD_PARAMETERS", fmt.Sprintf("task.%s: read as in.php's own field %s, not a task field (reserved in any letter case and every spelling a form parser reads as one); remove it", name, base))
		}
	}
	return nil
}

// geeTestV4ID is a GeeTest v4 task's captcha_id: initParameters.captcha_id
// (2captcha, CapMonster), else gt.
func geeTestV4ID(obj folded) (string, *Fault) {
	if _, raw, ok := obj.get("initParameters"); ok {
		init, f := foldObject(raw, "task.initParameters")
		if f != nil {
			return "", f
		}
		if id, _ := init.str("captcha_id"); strings.TrimSpace(id) != "" {
			return id, nil
		}
	}
	if gt, _ := obj.str("gt"); strings.TrimSpace(gt) != "" {
		return gt, nil
	}
	return "", fault("ERROR_BAD_PARAMETERS", "task.initParameters.captcha_id: required for GeeTest version 4 (the captcha_id from the page)")
}

// parseProxy reads the proxy fields into in.php's proxy and proxytype.
func parseProxy(obj folded, tn typeName, params map[string]string) *Fault {
	var given []string
	for _, f := range proxyFields {
		if name, _, ok := obj.get(f); ok {
			given = append(given, name)
		}
	}
	if len(given) == 0 {
		return nil
	}
	if !tn.proxy {
		fix := "remove the proxy fields"
		for _, n := range names {
			if n.t == tn.t && n.proxy {
				fix = "use " + n.name + " to send a proxy, or remove the proxy fields"
				break
			}
		}
		return fault("ERROR_BAD_PARAMETERS", fmt.Sprintf("task.%s: %s takes no proxy; %s", given[0], tn.name, fix))
	}
	var vals [5]string
	for i, f := range proxyFields {
		name, v, ok := obj.get(f)
		if !ok {
			continue
		}
		s, fl := convert(name, v, vString)
		if fl != nil && f == "proxyPassword" {
			return fault("ERROR_BAD_PARAMETERS", "task."+name+": must be a string") // never shown
		}
		if fl != nil {
			return fl
		}
		vals[i] = strings.TrimSpace(s)
	}
	return proxyParams(vals, params)
}

// proxyParams writes createTask's proxy fields (in proxyFields' order)
// as in.php's proxy and proxytype.
func proxyParams(vals [5]string, params map[string]string) *Fault {
	if vals[0] == "" {
		return fault("ERROR_BAD_PROXY", "task.proxyType: required with a proxy: http, https, socks4 or socks5")
	}
	p, err := provider.NewProxy(vals[0], vals[1], vals[2], vals[3], vals[4], func(f string) string { return "task." + f })
	if err != nil {
		return fault("ERROR_BAD_PROXY", err.Error())
	}
	params["proxy"], params["proxytype"] = p.InPHP()
	return nil
}

// convert reads one field's JSON value as in.php text.
func convert(name string, v json.RawMessage, kind valueKind) (string, *Fault) {
	v = bytes.TrimSpace(v)
	if string(v) == "null" {
		return "", nil
	}
	bad := func(want string) (string, *Fault) {
		return "", fault("ERROR_BAD_PARAMETERS", fmt.Sprintf("task.%s: must be %s, got %s", name, want, short(v)))
	}
	switch kind {
	case vFlag:
		switch strings.ToLower(strings.Trim(string(v), `"`)) {
		case "true", "1":
			return "1", nil
		case "false", "0", "":
			return "", nil
		}
		return bad("true or false")
	case vNumber:
		s := string(v)
		if len(v) > 0 && v[0] == '"' {
			if json.Unmarshal(v, &s) != nil {
				return bad("a number")
			}
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil {
			return bad("a number")
		}
		if f == 0 {
			return "", nil
		}
		return strconv.FormatFloat(f, 'f', -1, 64), nil
	}
	if len(v) > 0 && v[0] == '"' {
		var s string
		if json.Unmarshal(v, &s) != nil {
			return bad("a string")
		}
		return s, nil
	}
	if _, err := strconv.ParseFloat(string(v), 64); err == nil {
		return string(v), nil
	}
	return bad("a string")
}

func quote(s string) string {
	if len(s) > 60 {
		s = s[:60] + "…"
	}
	return strconv.Quote(s)
}

func short(raw []byte) string {
	s := string(bytes.TrimSpace(raw))
	if len(s) > 60 {
		s = s[:60] + "…"
	}
	return s
}
