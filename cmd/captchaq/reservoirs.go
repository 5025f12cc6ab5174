package main

import (
	"context"
	"log/slog"

	"github.com/captchaq/captchaq/server"
)

// reloadReservoirsOnHangup reads the reservoirs file at path again at each
// SIGHUP until ctx ends, and gives srv its reservoirs: a file that cannot
// be read or used leaves the last good set, with an error logged (the
// queue logs what a good one changed).
func reloadReservoirsOnHangup(ctx context.Context, srv *server.Server, path string, clients []server.Client, log *slog.Logger) {
	onHangup(ctx, func() {
		rcs, err := server.LoadReservoirs(path, clients)
		if err == nil {
			err = srv.SetReservoirs(rcs)
		}
		if err != nil {
			log.Error("SIGHUP: the reservoirs file cannot be used; keeping the last good reservoirs", "file", path, "err", err)
		}
	})
}
