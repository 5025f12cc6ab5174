package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// versionText is `captchaq version`: the module version, the VCS commit
// and the Go version, as the build recorded them.
func versionText() string {
	bi, _ := debug.ReadBuildInfo()
	return formatVersion(bi, runtime.GOOS+"/"+runtime.GOARCH)
}

// formatVersion writes bi (nil: no build information) for platform. Go
// records "(devel)" when it has no version to stamp; a build without VCS
// stamping (-buildvcs=false, or outside a checkout) says so of its commit.
func formatVersion(bi *debug.BuildInfo, platform string) string {
	version, goVersion := "(devel)", runtime.Version()
	settings := map[string]string{}
	if bi != nil {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		goVersion = bi.GoVersion
		for _, s := range bi.Settings {
			settings[s.Key] = s.Value
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "captchaq %s\n", version)
	switch rev := settings["vcs.revision"]; {
	case rev == "":
		b.WriteString("commit: unknown (the build has no VCS stamp)\n")
	case settings["vcs.modified"] == "true":
		fmt.Fprintf(&b, "commit: %s (modified)\n", rev)
	default:
		fmt.Fprintf(&b, "commit: %s\n", rev)
	}
	if t := settings["vcs.time"]; t != "" {
		fmt.Fprintf(&b, "commit time: %s\n", t)
	}
	fmt.Fprintf(&b, "go: %s %s\n", goVersion, platform)
	return b.String()
}
