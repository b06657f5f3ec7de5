// Package agent holds the leaf parts of the cortex-sync daemon that the
// continuous loop (`cortex-sync run`) wires together: the HTTP server, push
// webhooks, Prometheus metrics, fight detection and the poll schedule.
//
// Each part stands alone behind a small API:
//
//   - [NewServer] and [Server.Serve]: /metrics, /healthz, /readyz,
//     /api/v1/status, POST /api/v1/reconcile, /api/v1/suspend,
//     /api/v1/resume and POST /hooks/git, on 127.0.0.1:9797 by default. The
//     loop supplies callbacks ([ServerOptions]); [Readiness] is a ready-made
//     readiness callback.
//   - [NewWebhook]: an [net/http.Handler] for GitHub, GitLab and generic
//     HMAC-signed push webhooks that calls a trigger for pushes to the
//     followed ref, at most once per [WebhookOptions.MinInterval].
//   - [NewMetrics]: every cortexsync_ metric on a registry passed in (see
//     [NewRegistry]), with [Metrics.Workqueue] as the client-go work queue's
//     metrics provider.
//   - [NewFightDetector]: tells which resources something else on the host
//     keeps changing back, and how long to hold off correcting them.
//   - [NewSchedule] and [Jitter]: the poll interval with ±10% jitter.
package agent
