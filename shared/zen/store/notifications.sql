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

-- name: notifications_of_job
SELECT job_id, attempt, event, target, state, tries, detail, created_at, updated_at
FROM notifications WHERE job_id = :job_id ORDER BY created_at, key;

-- name: prune_notifications
WITH old AS (SELECT key FROM notifications WHERE updated_at < :cutoff ORDER BY updated_at LIMIT :limit)
DELETE FROM notifications WHERE key IN (SELECT key FROM old);
