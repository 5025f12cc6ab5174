package amqp

import (
	"strconv"
	"strings"
	"time"

	"github.com/captchaq/captchaq"
)

const (
	// gatewayMark prefixes the captcha id a gateway records for the tasks
	// it has published: "gateway:<name>".
	gatewayMark = "gateway:"
	// maxWireID is AMQP's limit on a message id (a short string).
	maxWireID = 255
)

// wireIDs are a gateway's names for its tasks: their ids on the wire and
// the marks their records carry while they are at the fleet.
type wireIDs struct {
	name string // the gateway's Name
	mark string // "gateway:<name>"
}

func newWireIDs(name string) wireIDs {
	return wireIDs{name: name, mark: gatewayMark + name}
}

// wireID is a task's id on the wire: NAME/ID, or NAME@GEN/ID for a task
// solved again after its token expired (workers answer a message id once,
// so each solve of an id needs an id of its own on the wire). Names hold
// no '@' or '/', so the parts read back unambiguously.
func (w wireIDs) wireID(id, gen string) string {
	if gen == "" {
		return w.name + "/" + id
	}
	return w.name + "@" + gen + "/" + id
}

// storeID is the Store's id of a task id on the wire and its generation,
// if the task is this gateway's.
func (w wireIDs) storeID(wire string) (id, gen string, ours bool) {
	if id, ok := strings.CutPrefix(wire, w.name+"/"); ok {
		return id, "", true
	}
	rest, ok := strings.CutPrefix(wire, w.name+"@")
	if !ok {
		return "", "", false
	}
	gen, id, ok = strings.Cut(rest, "/")
	return id, gen, ok && gen != ""
}

// markFor is the captcha id recorded for a task published in generation
// gen: gateway:NAME, or gateway:NAME@GEN.
func (w wireIDs) markFor(gen string) string {
	if gen == "" {
		return w.mark
	}
	return w.mark + "@" + gen
}

// parseMark reads a gateway's mark: its name and the task's generation.
func parseMark(captchaID string) (name, gen string, ok bool) {
	rest, ok := strings.CutPrefix(captchaID, gatewayMark)
	if !ok {
		return "", "", false
	}
	name, gen, _ = strings.Cut(rest, "@")
	return name, gen, true
}

// renewGen is the generation of a solve that starts at now.
func renewGen(now time.Time) string { return strconv.FormatInt(now.UnixMilli(), 36) }

// sameGeneration reports whether a result of generation gen may answer
// rec: a task in flight at the fleet takes only its own generation's.
func sameGeneration(rec captchaq.Record, gen string) bool {
	if rec.Status != captchaq.StatusInFlight {
		return true
	}
	_, want, marked := parseMark(rec.CaptchaID)
	return !marked || want == gen
}
