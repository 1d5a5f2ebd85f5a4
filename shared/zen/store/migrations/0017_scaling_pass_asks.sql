-- A scaling pass asked for while another pass held the cluster's lock (zen.scaling.asks): the asker
-- counts up here, and the holder, once it let go of the lock, runs again if the count moved since it
-- began (its snapshot may have missed the asker's job). One row per cluster, written only on a skip.
CREATE TABLE scaling_pass_asks (
    cluster text PRIMARY KEY,
    asks    bigint NOT NULL
);
