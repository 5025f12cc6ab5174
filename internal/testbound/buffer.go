package testbound

import "github.com/captchaq/captchaq/internal/syncio"

// Buffer is an output a running command or server writes to while the
// test reads it (String), one write at a time. The zero value is ready.
type Buffer = syncio.Writer
