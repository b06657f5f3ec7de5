// Package agent is the cortex-sync daemon (`cortex-sync run`): a work queue
// of resource IDs that the engine (reconcile.Session.Converge) converges one
// at a time, fed by polls, push webhooks, host watches and the drift scan,
// and served over HTTP with status and Prometheus metrics.
//
// Its parts: [New] and [Agent.Run], the loop; [NewServer], /metrics,
// /healthz, /readyz, /api/v1/status and the control endpoints on
// 127.0.0.1:9797 by default; [NewWebhook], GitHub, GitLab and generic
// HMAC-signed push webhooks; [NewMetrics], every cortexsync_ metric on a
// registry passed in; [NewFightDetector], which resources something else
// keeps changing back; and [NewSchedule], the poll interval with jitter.
package agent
