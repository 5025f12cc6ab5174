package main

import (
	"encoding/base64"
	"fmt"

	"github.com/captchaq/captchaq/provider"
)

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
