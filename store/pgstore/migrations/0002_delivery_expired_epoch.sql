-- The epoch of the lease whose expiry last returned a delivery to the
-- inbox, so that a late settlement from that lease is told "lease
-- expired" (G7), not merely "not leased".
ALTER TABLE belay_deliveries ADD COLUMN expired_epoch bigint NOT NULL DEFAULT 0;
