-- What an attempt cost, fixed when it ends (zen.core.prices.AttemptPrice): the provisioning model its VM ran
-- as, and that pool's price per VM-hour then (a configured override, else the catalog's stored price, else
-- the committed snapshot's). NULL for attempts recorded before, or whose price was unknown: `zen usage`
-- prices those as it did (today's prices, the model from the VM's name).
ALTER TABLE attempt_usage ADD COLUMN model text CHECK (model IN ('spot', 'standard', 'flex-start'));
ALTER TABLE attempt_usage ADD COLUMN usd_per_hour double precision CHECK (usd_per_hour >= 0);
