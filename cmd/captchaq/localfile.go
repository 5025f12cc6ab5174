package main

import (
	"encoding/base64"
	"fmt"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
)

// readTask parses one task line and reads the local image a post task
// names: what batch and enqueue take from every line. An unreadable image
// is refused like any invalid task (a *captchaq.TaskError, INVALID_TASK).
func readTask(raw []byte) (captchaq.Task, error) {
	t, err := captchaq.ParseTask(raw)
	if err != nil {
		return t, err
	}
	if ferr := readLocalImage(t.Method, t.Params); ferr != nil {
		return t, &captchaq.TaskError{ID: t.ID, Code: captchaq.CodeInvalidTask, Msg: ferr.Error(), Err: ferr}
	}
	return t, nil
}

// readLocalImage reads the image a post task names by path, once, here at
// intake and under the provider's size limit, and puts its bytes in the
// task (base64), so that what is stored, published or sent on is the image
// itself: no server or worker down the line ever opens a path.
func readLocalImage(method string, params map[string]string) error {
	if method != "post" {
		return nil
	}
	path := params["file"]
	if path == "" {
		return nil // validation says it is required
	}
	data, err := provider.ReadImageFile(path)
	if err != nil {
		return fmt.Errorf("params.file: cannot read the image: %v (a local image file of at most %d bytes)", err, provider.MaxImageBytes)
	}
	params["file"] = base64.StdEncoding.EncodeToString(data)
	return nil
}
