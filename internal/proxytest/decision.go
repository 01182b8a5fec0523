package proxytest

import "github.com/sluicehq/sluice/algo"

// DecisionJSON reads the decision JSON Sluice answers with
// (server.AppendDecisionJSON), every field of it, for the tests of the
// service and of the binary (server's check_test.go holds the encoding to it).
type DecisionJSON struct {
	Allowed      bool        `json:"allowed"`
	Quota        int64       `json:"limit"`
	Remaining    int64       `json:"remaining"`
	RetryAfterNs int64       `json:"retry_after_ns"`
	ResetAfterNs int64       `json:"reset_after_ns"`
	Matched      bool        `json:"matched"`
	Levels       []LevelJSON `json:"levels"`
	// DelayNs is how long an allowed request waits before it acts (a
	// policy node's delay; see policy.Decision.Delay); 0 is omitted.
	DelayNs int64 `json:"delay_ns,omitempty"`
	// Listed is the allow or deny list entry that decided (see
	// policy.Decision.Listed).
	Listed string `json:"listed,omitempty"`
	// Permit is the permit id under which an allowed check holds slots of
	// concurrency limits (policy.Decision.Permit), in decimal: renew and
	// release them with it (POST /v1/renew, /v1/release).
	Permit string `json:"permit,omitempty"`
	// Released, in the answer of POST /v1/release, reports whether the
	// permit held slots that are now free (false: it held none, having
	// been released before, outlived its hold or never been acquired).
	Released *bool `json:"released,omitempty"`
	// StoreError is set, and the decision is the configured store-error
	// policy's (allow or deny), when the store failed or timed out.
	StoreError string `json:"store_error,omitempty"`
	// SettleTicket, in the answer of an allowed check with "settle_within", is
	// the id to settle its estimate with (POST /v1/settle; see
	// policy.Decision.Ticket).
	SettleTicket string `json:"settle_id,omitempty"`
}

// LevelJSON is one level of a DecisionJSON: one limit of one policy node on
// the request's path, and its result.
type LevelJSON struct {
	Pattern      string    `json:"pattern"`
	Key          string    `json:"key"`
	Spec         algo.Spec `json:"spec"`
	Shadow       bool      `json:"shadow"`
	Allowed      bool      `json:"allowed"`
	Quota        int64     `json:"limit"`
	Remaining    int64     `json:"remaining"`
	RetryAfterNs int64     `json:"retry_after_ns"`
	ResetAfterNs int64     `json:"reset_after_ns"`
	// DeniedBy names, for a level that denied, the limit of its algorithm
	// it waits for, as sluice replay's denied_by does: a sliding_log or
	// window_counter limit's name or window, or "min_gap".
	DeniedBy string `json:"denied_by,omitempty"`
}
