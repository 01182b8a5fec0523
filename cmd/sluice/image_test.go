package main

import (
	"archive/tar"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestImage builds the image of docs/deploy with the real podman (VFS
// storage in a directory of the test's, chroot isolation: no daemon, no
// base image pulled), checks what it holds and how it runs (non-root, the
// entrypoint `sluice serve`), runs the program from the image's exported
// file system, chrooted into it as the image's user: it answers a check,
// and runs the image as a container, published on 127.0.0.1 as
// docs/deploy.md shows: it answers a check (the subtest says why it
// skips where this machine cannot run a container).
func TestImage(t *testing.T) {
	if _, err := exec.LookPath("podman"); err != nil {
		t.Fatal("podman is not installed: ./test.sh installs it (Debian's podman)")
	}
	dir := t.TempDir()
	podman := []string{"podman", "--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(dir, "run"), "--storage-driver", "vfs"}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(podman[0], append(podman[1:], args...)...)
		out, err := cmd.Output()
		if err != nil {
			stderr := ""
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = string(ee.Stderr)
			}
			t.Fatalf("%v: %v\n%s", args, err, stderr)
		}
		return strings.TrimSpace(string(out))
	}
	build := exec.Command("../../docs/deploy/build-image.sh", "sluice:test")
	build.Env = append(os.Environ(), "PODMAN="+strings.Join(podman, " "))
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build-image.sh: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command(podman[0], append(podman[1:], "rmi", "-a", "-f")...).Run() })

	var inspect []struct {
		Config struct {
			User         string
			Entrypoint   []string
			ExposedPorts map[string]struct{}
		}
	}
	if err := json.Unmarshal([]byte(run("image", "inspect", "sluice:test")), &inspect); err != nil || len(inspect) != 1 {
		t.Fatalf("image inspect: %v", err)
	}
	c := inspect[0].Config
	if c.User != "65532:65532" || !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/sluice", "serve", "--config", "/etc/sluice/sluice.yaml"}) {
		t.Errorf("the image runs %v as %q, want sluice serve as 65532:65532", c.Entrypoint, c.User)
	}
	if _, ok := c.ExposedPorts["8080/tcp"]; !ok {
		t.Errorf("ports %v, want 8080 and 8081", c.ExposedPorts)
	}

	// The image's file system: nothing but the binary, the CA bundle and
	// the config, and no file the image's user could not read.
	id := run("create", "sluice:test")
	rootfs := filepath.Join(dir, "rootfs")
	tarFile := filepath.Join(dir, "rootfs.tar")
	run("export", "-o", tarFile, id)
	var files []string
	links := 0
	f, err := os.Open(tarFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeSymlink && h.Name == "bin/ratelimit" && h.Linkname == "/usr/local/bin/sluice" {
			links++
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		files = append(files, h.Name)
		if h.Mode&0o004 == 0 {
			t.Errorf("%s is not readable by the image's user (%o)", h.Name, h.Mode)
		}
	}
	slices.Sort(files)
	want := []string{"etc/sluice/limits.yaml", "etc/sluice/sluice.yaml", "etc/ssl/certs/ca-certificates.crt", "usr/local/bin/sluice"}
	if !slices.Equal(files, want) {
		t.Errorf("the image holds %v, want %v", files, want)
	}
	if links != 1 {
		t.Error("the image has no /bin/ratelimit linked to /usr/local/bin/sluice")
	}
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("tar", "-xf", tarFile, "-C", rootfs).CombinedOutput(); err != nil {
		t.Fatalf("tar: %v %s", err, out)
	}

	// Run it as the image would: its entrypoint, as its user, with the
	// addresses moved to free loopback ports by the variables, and a
	// decision timeout a busy machine does not meet (the default 50ms it
	// did: the store's answer came late, and the check was answered by
	// on_store_error).
	cmd := exec.Command("chroot", append([]string{"--userspec=65532:65532", rootfs}, c.Entrypoint...)...)
	cmd.Env = []string{"SLUICE_HTTP=127.0.0.1:0", "SLUICE_GRPC=127.0.0.1:0", "SLUICE_TIMEOUT=" + cliTimeout}
	p := serveCmd(t, cmd)
	a := p.check(`{"path": ["user", "alex", "trade"]}`)
	if a.status != 200 || a.header.Get("RateLimit") == "" {
		t.Errorf("a check of the image's program: %d %s", a.status, a.body)
	}

	t.Run("container", func(t *testing.T) { runContainer(t, podman) })

	// Run /bin/ratelimit as Envoy Gateway's Deployment does: by
	// envoyproxy/ratelimit's variables, its configuration directory
	// mounted at /data/ratelimit/config.
	conf := filepath.Join(rootfs, "data", "ratelimit", "config")
	if err := os.MkdirAll(conf, 0o755); err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, filepath.Join(conf, "gw.yaml"), "domain: gw\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	os.Chmod(filepath.Join(conf, "gw.yaml"), 0o644)
	rd := redistest.Start(t)
	cmd = exec.Command("chroot", "--userspec=65532:65532", rootfs, "/bin/ratelimit")
	cmd.Env = []string{"HOST=127.0.0.1", "PORT=0", "GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + rd.Addr, "RUNTIME_ROOT=/data", "RUNTIME_SUBDIRECTORY=ratelimit", "USE_STATSD=false",
		"SLUICE_TIMEOUT=" + cliTimeout} // as above: else check 2 was once OK, its store call past 50ms (fail open)
	rl := serveCmd(t, cmd)
	for i, want := range []rlv3.RateLimitResponse_Code{rlv3.RateLimitResponse_OK, rlv3.RateLimitResponse_OVER_LIMIT} {
		r, err := rl.rls(t).ShouldRateLimit(context.Background(), &rlv3.RateLimitRequest{Domain: "gw",
			Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "tenant", Value: "acme"}}}}})
		if err != nil || r.OverallCode != want {
			t.Fatalf("/bin/ratelimit, check %d: %v %v", i, r, err)
		}
	}
}

// runContainer runs the image sluice:test as a container with podman
// (rootful), its HTTP port published on a free port of 127.0.0.1 as
// docs/deploy.md publishes it, and checks that it answers a check. Where
// podman cannot start a container it skips, saying podman's reason. The
// runtime is runc (test.sh installs it), with the container's open files
// and processes at 1024: podman's defaults raise both limits to their
// maximum, which a machine without CAP_SYS_RESOURCE (this one, a sandbox)
// refuses, and crun refuses a host whose cgroups are in hybrid mode.
func runContainer(t *testing.T, podman []string) {
	if _, err := exec.LookPath("runc"); err != nil {
		t.Skip("runc is not installed (./test.sh installs it): podman would run the image with crun, which refuses this machine's hybrid cgroups")
	}
	podman = append(podman, "--runtime", "runc")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := append(podman[1:], "run", "-d", "--rm", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
		"-p", "127.0.0.1::8080", "sluice:test")
	out, err := exec.CommandContext(ctx, podman[0], args...).CombinedOutput()
	if err != nil {
		t.Skipf("podman run cannot start a container on this machine: %v: %s", err, strings.TrimSpace(string(out)))
	}
	id := strings.TrimSpace(string(out))
	if i := strings.LastIndexByte(id, '\n'); i >= 0 {
		id = id[i+1:]
	}
	t.Cleanup(func() { exec.Command(podman[0], append(podman[1:], "rm", "-f", id)...).Run() })
	out, err = exec.CommandContext(ctx, podman[0], append(podman[1:], "port", id, "8080/tcp")...).Output()
	addr := strings.TrimSpace(string(out))
	if err != nil || !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("podman port: %q %v: the container's port is not published on 127.0.0.1", addr, err)
	}
	// The container serves once its banner is out: ask until it answers.
	for {
		resp, err := http.Post("http://"+addr+"/v1/check", "application/json", strings.NewReader(`{"path": ["user", "alex", "trade"]}`))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != 200 || resp.Header.Get("RateLimit") == "" {
				t.Fatalf("a check of the container: %d %v", resp.StatusCode, resp.Header)
			}
			return
		}
		if ctx.Err() != nil {
			logs, _ := exec.Command(podman[0], append(podman[1:], "logs", id)...).CombinedOutput()
			t.Fatalf("the container does not answer at %s: %v\n%s", addr, err, logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
