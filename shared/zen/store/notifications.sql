-- The notifier's queries (zen.store.notifications), kept apart from queries.sql: only the notifier runs them.

-- name: claim_notification
-- Take (key) for one delivery: a new row, or one neither done ('sent', 'refused') nor claimed by a delivery
-- still within its time; no row back: done, or another delivery of the event holds it.
-- The event's time and payload are kept (a row from before migration 0058 gets them), so a later notice of the job
-- to the target can send this one first while it is unsent (notifications_before).
INSERT INTO notifications AS n (key, job_id, attempt, event, target, state, tries, claimed_until, created_at, updated_at,
                                at, payload)
VALUES (:key, :job_id, :attempt, :event, :target, 'sending', 1, :until, :now, :now, :at, CAST(:payload AS jsonb))
ON CONFLICT (key) DO UPDATE
    SET state = 'sending', tries = n.tries + 1, claimed_until = :until, updated_at = :now,
        at = coalesce(n.at, EXCLUDED.at), payload = coalesce(n.payload, EXCLUDED.payload)
    WHERE n.state = 'failed' OR (n.state = 'sending' AND n.claimed_until < :now)
RETURNING tries;

-- name: notification_state
SELECT state, tries, detail FROM notifications WHERE key = :key;

-- name: settle_notification
-- The outcome of the delivery that holds the claim (its try, :tries); none once a later delivery took it over.
UPDATE notifications SET state = :state, detail = :detail, claimed_until = NULL, updated_at = :now
WHERE key = :key AND state = 'sending' AND tries = :tries
RETURNING key;

-- name: notifications_before
-- The job's notices to this target that came before the one being sent (its event earlier; at the same time, a
-- preemption before an end) and are not sent yet: failed (waiting for their event's redelivery, or dead-lettered)
-- or being sent. The oldest first, each with its event, so the later notice's delivery sends them first.
SELECT key, state, payload FROM notifications
WHERE job_id = :job_id AND target = :target AND key <> :key AND state IN ('failed', 'sending') AND payload IS NOT NULL
  AND (at < :at OR (at = :at AND event = 'PREEMPTED' AND CAST(:end AS boolean)))
ORDER BY at, created_at, key;

-- name: endpoint_state
-- An endpoint that gave no answer lately (migration 0059); no row: it answered last, POST to it.
SELECT retry_at, probe_until FROM notification_endpoints WHERE endpoint = :endpoint;

-- name: take_endpoint_probe
-- Its while is over and no other delivery is trying it: this one does, the others waiting until its answer (or
-- :until, should this delivery die). The row's lock makes it one delivery, however many ask at once.
UPDATE notification_endpoints SET probe_until = :until, updated_at = :now
WHERE endpoint = :endpoint AND retry_at <= :now AND (probe_until IS NULL OR probe_until <= :now)
RETURNING endpoint;

-- name: endpoint_stalled
-- A POST to the endpoint got no answer: no POST to it for a while, :first_s doubling with each stall to :most_s.
-- The stall of a POST under way when the while began (several were, when the first gave up) does not lengthen it.
INSERT INTO notification_endpoints AS e (endpoint, stalls, retry_at, updated_at)
VALUES (:endpoint, 1, CAST(:now AS timestamptz) + CAST(:first_s AS double precision) * interval '1 second', :now)
ON CONFLICT (endpoint) DO UPDATE
    SET stalls = CASE WHEN e.retry_at <= :now THEN e.stalls + 1 ELSE e.stalls END,
        retry_at = CASE WHEN e.retry_at <= :now
                        THEN CAST(:now AS timestamptz) + least(CAST(:most_s AS double precision),
                                                               CAST(:first_s AS double precision) * power(2, e.stalls))
                                                         * interval '1 second'
                        ELSE e.retry_at END,
        probe_until = NULL, updated_at = :now
RETURNING retry_at;

-- name: endpoint_answered
DELETE FROM notification_endpoints WHERE endpoint = :endpoint;

-- name: endpoint_untried
-- The delivery that was to try it sent nothing (its secret could not be read) or had an answer that is not HTTP:
-- the next may try it at once.
UPDATE notification_endpoints SET probe_until = NULL WHERE endpoint = :endpoint AND probe_until = :until;

-- name: notifications_of_job
SELECT job_id, attempt, event, target, state, tries, detail, created_at, updated_at
FROM notifications WHERE job_id = :job_id ORDER BY created_at, key;

-- name: prune_notifications
WITH old AS (SELECT key FROM notifications WHERE updated_at < :cutoff ORDER BY updated_at LIMIT :limit)
DELETE FROM notifications WHERE key IN (SELECT key FROM old);

-- name: prune_notification_endpoints
-- Endpoints not asked about for a day: the next delivery to one tries it as any other.
DELETE FROM notification_endpoints WHERE updated_at < :cutoff;
