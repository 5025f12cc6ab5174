package createtask

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/captchaq/captchaq/provider"
)

// TaskObject is the createTask task object for the queue's task t, as a
// createTask provider is sent it: the family's Proxyless name, or its
// proxy name when t has a proxy, and each param under its createTask
// name. A method no createTask type carries (see Methods) is refused with
// provider.ErrUnsupportedType.
func TaskObject(t provider.Task) (map[string]any, error) {
	k, err := t.KindFor(provider.KnownMethods)
	if err != nil {
		return nil, err
	}
	var tt *taskType
	for _, c := range families {
		if c.kind == k {
			tt = c
		}
	}
	if tt == nil {
		return nil, &provider.Error{Op: "submit", Code: provider.CodeUnsupportedType, Class: provider.ClassTask,
			Text: fmt.Sprintf("%s tasks have no createTask type; route them to an in.php provider (createTask providers solve %s)", k, strings.Join(Carried, ", "))}
	}
	params := foldParams(t.Params)
	if t.Method == "post" {
		params["body"] = params["file"]
	}
	if err := sendNeeds(tt, k, params); err != nil {
		return nil, err
	}
	proxy := strings.TrimSpace(params["proxy"]) != ""
	name := pickName(tt, proxy, params)
	obj := map[string]any{"type": name}
	for _, fd := range tt.fields {
		v, ok := params[strings.ToLower(fd.param)]
		if !ok || strings.TrimSpace(v) == "" {
			continue
		}
		switch fd.kind {
		case vFlag:
			if isTrue(v) {
				obj[fd.wire] = true
			}
		case vNumber:
			if _, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err != nil {
				return nil, &provider.ValidationError{Field: "params." + fd.param, Reason: fmt.Sprintf("%s is not a number", quote(v))}
			}
			obj[fd.wire] = json.Number(strings.TrimSpace(v))
		default:
			obj[fd.wire] = v
		}
	}
	switch tt {
	case typeGeeTestV4:
		obj["version"] = 4
		obj["initParameters"] = map[string]string{"captcha_id": params["captcha_id"]}
	case typeGeeTest:
		obj["version"] = 3
	case typeCFClearance:
		obj["type"] = "TurnstileTask"
		obj["cloudflareTaskType"] = "cf_clearance"
	case typeRecaptchaV2:
		if s, ok := obj["recaptchaDataSValue"]; ok && isTrue(params["enterprise"]) {
			delete(obj, "recaptchaDataSValue")
			obj["enterprisePayload"] = map[string]any{"s": s}
		}
	}
	if proxy {
		if err := proxyObject(params["proxy"], params["proxytype"], obj); err != nil {
			return nil, err
		}
	}
	return obj, nil
}

// pickName is the name a createTask provider is sent for a task of tt.
func pickName(tt *taskType, proxy bool, params map[string]string) string {
	best := ""
	bestExtra := -1
	for _, n := range names {
		if n.aliasOnly || n.t != tt && !(tt == typeGeeTestV4 && n.t == typeGeeTest) {
			continue
		}
		if n.proxy != (proxy && tt.proxy) {
			continue
		}
		match := true
		for k, v := range n.extra {
			if !strings.EqualFold(params[k], v) && !(v == "1" && isTrue(params[k])) {
				match = false
			}
		}
		if match && len(n.extra) > bestExtra {
			best, bestExtra = n.name, len(n.extra)
		}
	}
	return best
}

// proxyObject writes in.php's proxy (login:password@host:port) and
// proxytype as the proxy fields.
func proxyObject(proxy, typ string, obj map[string]any) error {
	p, err := provider.ParseProxy(proxy, typ)
	if err != nil {
		return err
	}
	obj["proxyType"] = strings.ToLower(p.Type)
	obj["proxyAddress"] = p.Host
	obj["proxyPort"] = p.Port
	if p.Login != "" {
		obj["proxyLogin"] = p.Login
		obj["proxyPassword"] = p.Password
	}
	return nil
}

// foldParams is params by lower-cased name.
func foldParams(p map[string]string) map[string]string {
	out := make(map[string]string, len(p))
	for k, v := range p {
		out[strings.ToLower(k)] = v
	}
	return out
}

func isTrue(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "true":
		return true
	}
	return false
}
