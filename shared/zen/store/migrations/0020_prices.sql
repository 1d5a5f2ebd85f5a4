-- Prices Zen knows (zen.store.prices): each machine type's price per VM-hour in each region and
-- provisioning model, as the Cloud Billing Catalog last said (the tick refreshes it once a day), and
-- when the refresh last ran. The committed snapshot and the configuration's overrides are laid over
-- these rows when read (zen.core.prices.effective), never stored.
CREATE TABLE vm_prices (
    machine_type  text NOT NULL,
    region        text NOT NULL,
    model         text NOT NULL CHECK (model IN ('spot', 'standard', 'flex-start')),
    usd_per_hour  double precision NOT NULL CHECK (usd_per_hour >= 0),
    fetched_at    timestamptz NOT NULL,
    PRIMARY KEY (machine_type, region, model)
);

-- One row: when the tick last tried the catalog, when it last succeeded, and the last error (the tick
-- reads only this row when the prices are fresh).
CREATE TABLE vm_price_refresh (
    id            integer PRIMARY KEY CHECK (id = 1),
    tried_at      timestamptz,
    refreshed_at  timestamptz,
    error         text
);
INSERT INTO vm_price_refresh (id) VALUES (1);
