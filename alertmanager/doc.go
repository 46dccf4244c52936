// Package alertmanager delivers the sidecar's alerts: to Alertmanager's v2
// API (Client) and to a generic JSON webhook (Webhook). Both implement
// alerting.Notifier and share one delivery machinery:
//
//   - Notify only enqueues and returns at once. Each destination URL has its
//     own bounded queue, so one Alertmanager of an HA pair being down does
//     not hold back the other. A full queue drops its oldest alert; a queued
//     alert is replaced in place by a newer notification of the same alert
//     (same labels), so re-sends of a firing alert while a destination is
//     down do not fill the queue, and a resolve supersedes the firing it
//     ends (and a new firing of the same labels supersedes an unsent
//     resolve: the receiver then sees one continuous episode).
//   - One worker per destination sends batches. A failed POST (network
//     error, 5xx, 429) is retried with exponential backoff and jitter, a
//     bounded number of times; other 4xx answers are not retried, nor is a
//     redirect the HTTP client follows as a GET (301, 302, 303), which
//     would drop the alerts (307 and 308 keep the POST and are followed).
//     A Client follows a 400 for several alerts with each alert alone:
//     Alertmanager stores a batch's valid alerts and refuses the request
//     for the invalid ones, so only single sends tell which were stored.
//   - Everything is counted in inferwatch_notifications_total{notifier,result}:
//     result="sent" for alerts a destination accepted; "failed" for alerts
//     given up after the last attempt, refused by the destination (4xx), or
//     invalid for it (a Client checks labels and annotations as
//     Alertmanager does, so that one bad alert does not sink its batch);
//     "dropped" for alerts never delivered because a queue was full or the
//     notifier had stopped. Counts are per alert and per destination.
//     Pending alerts are not sent.
//   - Logs and errors name a destination by its URL with the password
//     redacted; a webhook's by its scheme and host only, as Slack-style
//     URLs carry their secret in the path or query.
//   - Cancelling the constructor's context, or Close, stops the notifier: the
//     workers keep sending what is queued for at most Options.FlushTimeout,
//     then count the rest as dropped.
//
// Firing alerts go to Alertmanager with endsAt = now + ResolveTimeout, set
// afresh on every attempt, so Alertmanager resolves them by itself when the
// sidecar dies and stops re-sending; resolved alerts carry their resolve
// time.
package alertmanager
