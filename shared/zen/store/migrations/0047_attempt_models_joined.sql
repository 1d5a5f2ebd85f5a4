-- A multi-node attempt whose nodes ran as different models names them all, joined ('spot+standard', zen.store.queries
-- insert_attempt_usage), so zen stats files its VM-hours and dollars under what ran them: it named rank 0's model,
-- and a standard node's hour read as spot's.
ALTER TABLE attempt_usage DROP CONSTRAINT attempt_usage_model_check;
ALTER TABLE attempt_usage ADD CONSTRAINT attempt_usage_model_check
    CHECK (model ~ '^(spot|standard|flex-start)(\+(spot|standard|flex-start))*$');
