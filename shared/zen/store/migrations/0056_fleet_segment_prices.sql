-- The price per VM-hour of each billed segment of a MIG instance, kept when a scaling pass first saw it billed (its
-- pool's machine type, region and model then: a configured price, else the catalog's stored one, else the
-- snapshot's); an earlier segment's is the fourth element of its `billed_before` entry. The fleet's dollars
-- (`zen usage --by region`) were priced at the day's prices: the catalog's next refresh, or an override set later,
-- repriced every VM already billed. NULL: seen before this column, or unpriced then (priced at today's prices).
ALTER TABLE mig_instances ADD COLUMN usd_per_hour double precision;
ALTER TABLE vm_lifetimes ADD COLUMN usd_per_hour double precision;
GRANT UPDATE (usd_per_hour) ON mig_instances TO zen_submitter, zen_heartbeat, zen_ticker;
