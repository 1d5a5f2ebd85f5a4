-- A refusal that repeats is one row with a count (zen.store.rejections): a VM's report refused again
-- for the same job, attempt and cause bumps `count` and `last_at` of the row its first refusal wrote,
-- keyed by `repeat_key` (NULL: a row per message id, as before). The tick deletes rows last seen
-- longer ago than the retention, a batch at a time, oldest first.
ALTER TABLE rejected_messages ADD COLUMN repeat_key text;
ALTER TABLE rejected_messages ADD COLUMN count bigint NOT NULL DEFAULT 1;
ALTER TABLE rejected_messages ADD COLUMN last_at timestamptz;  -- NULL: seen once, at `at`
CREATE UNIQUE INDEX rejected_messages_repeats ON rejected_messages (source, repeat_key)
    WHERE repeat_key IS NOT NULL;
CREATE INDEX rejected_messages_last_seen ON rejected_messages ((COALESCE(last_at, at)));
