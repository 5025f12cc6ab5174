package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/captchaq/captchaq/sim"
)

// TestServeParseCostRSS measures what hostile bodies cost `captchaq serve`
// at its defaults: 8 concurrent 8 MiB in.php JSON bodies of tiny fields
// with a wrong key, then (on a fresh serve) 8 concurrent createTask bodies
// of a 6 MiB base64 image, each from an address of its own (127.0.0.2..9).
// It logs serve's peak RSS (VmHWM, the numbers in docs/operating.md) and
// fails when it reaches 400 MiB, or an answer is not an error or takes
// 15 s or more. CAPTCHAQ_MEASURE_BIN names another build to measure.
func TestServeParseCostRSS(t *testing.T) {
	bin := os.Getenv("CAPTCHAQ_MEASURE_BIN")
	if bin == "" {
		bin = captchaqBinary(t)
	}
	_, simURL := startFastSim(t, sim.Config{Threads: 5})
	clients := writeFile(t, "clients.json", `[{"name":"qa","key":"`+frontClient+`"}]`)
	serve := func(t *testing.T) (pid int, base string) {
		p, m := startProcess(t, bin, []string{"CAPTCHAAI_KEY=measure-provider-key"}, servingRE,
			"serve", "--store", filepath.Join(t.TempDir(), "serve.db"), "--clients", clients,
			"--listen", "127.0.0.1:0", "--api-url", simURL)
		return p.cmd.Process.Pid, "http://" + m[1]
	}

	// 8 MiB of tiny fields: {"key":"wrong","method":"userrecaptcha","000000":1,...}
	var fields bytes.Buffer
	fields.WriteString(`{"key":"not-a-key-of-anyone","method":"userrecaptcha"`)
	n := 0
	for ; fields.Len() < 8<<20-16; n++ {
		fmt.Fprintf(&fields, `,"%06d":1`, n)
	}
	fields.WriteString("}")
	image := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0x89, 'P', 'N', 'G'}, 6<<20/4*3/4))
	task := []byte(`{"clientKey":"` + frontClient + `","task":{"type":"ImageToTextTask","body":"` + image + `"}}`)

	for _, sc := range []struct {
		name, path string
		body       []byte
	}{
		{fmt.Sprintf("in.php JSON of %d fields", n+2), "/in.php", fields.Bytes()},
		{"createTask 6 MiB image", "/createTask", task},
	} {
		t.Run(sc.name, func(t *testing.T) {
			pid, base := serve(t)
			var wg sync.WaitGroup
			for i := range 8 {
				wg.Go(func() {
					ip := fmt.Sprintf("127.0.0.%d", i+2)
					c := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{
						LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}).DialContext}}
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+sc.path, bytes.NewReader(sc.body))
					req.Header.Set("Content-Type", "application/json")
					start := time.Now()
					resp, err := c.Do(req)
					if err != nil {
						t.Errorf("from %s in %v: %v", ip, time.Since(start).Round(time.Millisecond), err)
						return
					}
					answer, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					took := time.Since(start)
					t.Logf("from %s in %v: %.200s", ip, took.Round(time.Millisecond), answer)
					if took >= 15*time.Second || !strings.Contains(string(answer), "ERROR_") {
						t.Errorf("from %s in %v: %s; want an error within 15 s", ip, took, answer)
					}
				})
			}
			wg.Wait()
			status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(string(status), "\n") {
				if kb, ok := strings.CutPrefix(line, "VmHWM:"); ok {
					t.Logf("serve's peak RSS: %s", strings.TrimSpace(kb))
					n, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(kb), "kB")))
					if err != nil {
						t.Fatalf("VmHWM %q: %v", kb, err)
					}
					if n >= 400<<10 {
						t.Errorf("serve's peak RSS %d kB, want under 400 MiB", n)
					}
				}
			}
		})
	}
}
