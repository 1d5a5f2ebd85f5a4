-- The notifier's queries (zen.store.notifications), kept apart from queries.sql: only the notifier runs them.

-- name: claim_notification
-- Take (key) for one delivery: a new row, or one neither done ('sent', 'refused') nor claimed by a delivery
-- still within its time; no row back: done, or another delivery of the event holds it.
INSERT INTO notifications AS n (key, job_id, attempt, event, target, state, tries, claimed_until, created_at, updated_at)
VALUES (:key, :job_id, :attempt, :event, :target, 'sending', 1, :until, :now, :now)
ON CONFLICT (key) DO UPDATE
    SET state = 'sending', tries = n.tries + 1, claimed_until = :until, updated_at = :now
    WHERE n.state = 'failed' OR (n.state = 'sending' AND n.claimed_until < :now)
RETURNING tries;

-- name: notification_state
SELECT state, tries, detail FROM notifications WHERE key = :key;

-- name: settle_notification
-- The outcome of the delivery that holds the claim (its try, :tries); none once a later delivery took it over.
UPDATE notifications SET state = :state, detail = :detail, claimed_until = NULL, updated_at = :now
WHERE key = :key AND state = 'sending' AND tries = :tries
RETURNING key;

-- name: notifications_of_job
SELECT job_id, attempt, event, target, state, tries, detail, created_at, updated_at
FROM notifications WHERE job_id = :job_id ORDER BY created_at, key;

-- name: prune_notifications
WITH old AS (SELECT key FROM notifications WHERE updated_at < :cutoff ORDER BY updated_at LIMIT :limit)
DELETE FROM notifications WHERE key IN (SELECT key FROM old);
