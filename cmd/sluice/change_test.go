package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// loginPolicy: 3 tries a minute per account, blocking an account that
// goes over for 30s, twice as long each time in a row; and a login
// level every account shares.
const loginPolicy = `
schema:
  login:
    limits: [{algorithm: fixed_window, limit: 1000, window: 1m}]
    children:
      "*": {limits: [{algorithm: fixed_window, limit: 3, window: 1m, block: {for: 30s, growth: 2}}]}
`

// TestServeChanges: on a sluice serve over Redis, the admin API's
// penalty, reward, block and unblock change an account's key (and not
// the shared level, unless asked), with the admin token only; the CLI's
// commands change the same keys in the same store; bad input is a 400
// that says what is wrong.
func TestServeChanges(t *testing.T) {
	// The CLI's round trips at a timeout a busy machine meets: the 50ms
	// default once was not (the service's own is local's, a flag).
	t.Setenv("SLUICE_TIMEOUT", cliTimeout)
	rd := redistest.Start(t)
	const token = "change-admin"
	pol := policyFile(t, loginPolicy)
	p := serve(t, []string{"SLUICE_ADMIN_TOKEN=" + token}, append(local, "--store", rd.URL(), "--policy", pol)...)
	base := "http://" + p.http + "/admin/v1/"
	change := func(kind, body string) (int, changeJSON, string) {
		t.Helper()
		a := do(t, "POST", base+kind, token, body)
		var c changeJSON
		json.Unmarshal(a.body, &c)
		return a.status, c, string(a.body)
	}
	own := func(c changeJSON) levelJSON { return c.State.Levels[1] }

	if a := do(t, "POST", base+"penalty", "", `{"path": ["login", "alex"], "units": 2}`); a.status != 401 {
		t.Fatalf("without the token: %d", a.status)
	}
	status, c, body := change("penalty", `{"path": ["login", "alex"], "units": 2}`)
	if status != 200 || len(c.Changed) != 1 || c.Changed[0] != "login:alex" || own(c).Remaining != 1 || c.State.Levels[0].Remaining != 1000 {
		t.Fatalf("penalty: %d %s", status, body)
	}
	if status, c, body = change("reward", `{"path": ["login", "alex"], "units": 5}`); status != 200 || own(c).Remaining != 3 {
		t.Fatalf("reward: %d %s", status, body)
	}
	if status, c, body = change("block", `{"path": ["login", "alex"], "for": "10m"}`); status != 200 || own(c).DeniedBy != "block" || own(c).RetryAfterNs > int64(600e9) {
		t.Fatalf("block: %d %s", status, body)
	}
	if a := p.check(`{"path": ["login", "alex"]}`); a.status != 429 || a.header.Get("Retry-After") == "" {
		t.Fatalf("a check while blocked: %d %v", a.status, a.header)
	}
	if status, c, body = change("unblock", `{"path": ["login", "alex"]}`); status != 200 || !own(c).Allowed {
		t.Fatalf("unblock: %d %s", status, body)
	}
	if status, c, body = change("penalty", `{"path": ["login", "alex"], "units": 7, "levels": "all"}`); status != 200 || len(c.Changed) != 2 || c.State.Levels[0].Remaining != 993 {
		t.Fatalf("penalty on every level: %d %s", status, body)
	}
	for kind, bad := range map[string]string{
		"penalty": `{"path": ["login", "alex"], "units": 0}`,
		"reward":  `{"path": ["login", "alex"], "units": 1000000000000000000}`,
		"block":   `{"path": ["login", "alex"], "for": "0s"}`,
		"unblock": `{"path": ["login", "alex"], "units": 3}`,
	} {
		if status, _, body := change(kind, bad); status != 400 {
			t.Errorf("%s %s: %d %s", kind, bad, status, body)
		}
	}
	if status, _, body := change("block", `{"path": ["login"], "for": "1m"}`); status != 400 || !strings.Contains(body, "no level of the path can take the change") {
		t.Errorf("a block on a level without one: %d %s", status, body)
	}

	// The CLI, on the same store: unblock, reward, then block again.
	cli := func(args ...string) changeJSON {
		t.Helper()
		status, out, errOut := runSluice(t, append(args[:1:1], append([]string{"--store", rd.URL(), "--policy", pol}, args[1:]...)...)...)
		var c changeJSON
		if status != 0 || json.Unmarshal([]byte(out), &c) != nil {
			t.Fatalf("sluice %v: %d %s %s", args, status, out, errOut)
		}
		return c
	}
	if c := cli("reward", "--units", "9", "login", "alex"); own(c).Remaining != 3 {
		t.Fatalf("sluice reward: %+v", c)
	}
	if c := cli("block", "--for", "90s", "login", "alex"); own(c).DeniedBy != "block" || own(c).RetryAfterNs > int64(90e9) {
		t.Fatalf("sluice block: %+v", c)
	}
	if a := p.check(`{"path": ["login", "alex"]}`); a.status != 429 {
		t.Fatalf("blocked by the CLI, the service answered %d", a.status)
	}
	cli("unblock", "login", "alex")
	// The service's over-limit cache hears of the unblock over Redis
	// pub/sub (within redis.ForgetPoll at worst); until then it denies.
	for {
		a := p.check(`{"path": ["login", "alex"]}`)
		if a.status == 200 {
			break
		}
		if a.status != 429 {
			t.Fatalf("unblocked by the CLI, the service answered %d %s", a.status, a.body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if status, _, errOut := runSluice(t, "penalty", "--store", rd.URL(), "--policy", pol, "--units", "-1", "login", "alex"); status != 1 || !strings.Contains(errOut, "--units must be 1 to") {
		t.Errorf("a negative penalty: %d %s", status, errOut)
	}
}

// TestChangeReachesTheService: `sluice block` with only SLUICE_STORE
// naming the store (as a user's shell has it) blocks the key in the
// running service's Redis; without a store, or with the memory store, it
// refuses with the reason and changes nothing (it once changed a memory
// store of its own, printed the block, and exited 0).
func TestChangeReachesTheService(t *testing.T) {
	rd := redistest.Start(t)
	pol := policyFile(t, loginPolicy)
	p := serve(t, nil, append(local, "--store", rd.URL(), "--policy", pol)...)
	sluice := func(env []string, args ...string) (int, string) {
		cmd := exec.Command(sluiceBin, args...)
		cmd.Env = append(append(os.Environ(), "SLUICE_TIMEOUT="+cliTimeout), env...)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode(), string(out)
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{nil, "which store?"},
		{[]string{"SLUICE_STORE=memory"}, "the memory store lives in one process"},
	} {
		if code, out := sluice(tc.env, "block", "--policy", pol, "--for", "1h", "login", "mallory"); code != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("block with %v: exit %d %q, want 2 and %q", tc.env, code, out, tc.want)
		}
	}
	if a := p.check(`{"path": ["login", "mallory"]}`); a.status != 200 {
		t.Fatalf("a refused block blocked: %d", a.status)
	}
	if code, out := sluice([]string{"SLUICE_STORE=" + rd.URL()}, "block", "--policy", pol, "--for", "1h", "login", "mallory"); code != 0 || !strings.Contains(out, `"denied_by":"block"`) {
		t.Fatalf("block with SLUICE_STORE: exit %d %s", code, out)
	}
	if a := p.check(`{"path": ["login", "mallory"]}`); a.status != 429 {
		t.Errorf("after the block, the service answered %d", a.status)
	}
	// --config reads the service's own file.
	cfg := writeFile(t, "sluice.yaml", "store: "+rd.URL()+"\npolicy: "+pol+"\n")
	if code, out := sluice(nil, "unblock", "--config", cfg, "login", "mallory"); code != 0 {
		t.Fatalf("unblock with --config: exit %d %s", code, out)
	}
	for p.check(`{"path": ["login", "mallory"]}`).status != 200 { // the over-limit cache hears of it within redis.ForgetPoll
		time.Sleep(10 * time.Millisecond)
	}
}

// changeJSON reads the answer of an admin change (server.ChangeJSON).
type changeJSON struct {
	Changed []string     `json:"changed"`
	State   decisionJSON `json:"state"`
}
