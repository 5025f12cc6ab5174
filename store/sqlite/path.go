package sqlite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// DefaultPath returns where the store lives when the user names none:
// $XDG_DATA_HOME/captchaq/captchaq.db, or ~/.local/share/captchaq/captchaq.db
// when XDG_DATA_HOME is unset or not absolute. It creates the directory
// (mode 0700: results hold tokens) when missing.
func DefaultPath() (string, error) {
	base := os.Getenv("XDG_DATA_HOME")
	if !filepath.IsAbs(base) {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", errors.New("sqlite: no default store path: neither XDG_DATA_HOME nor HOME is set; give the store path explicitly")
		}
		base = filepath.Join(home, ".local", "share")
	}
	dir := filepath.Join(base, "captchaq")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("sqlite: create store directory %s: %w", dir, err)
	}
	return filepath.Join(dir, "captchaq.db"), nil
}
