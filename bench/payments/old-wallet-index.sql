-- The wallet index as it was before migration 000027, for the payment guard's A/B of that
-- migration: one binary, run once on the migrated schema and once with this applied
-- (BENCH_SCHEMA_SQL=bench/payments/old-wallet-index.sql bench/payments/run.sh), so only the
-- index a payment's entries are written into differs. On the partitioned table the drop
-- and the create reach every partition.
DROP INDEX ix_ledger_entries_wallet_values;
CREATE INDEX ix_ledger_entries_wallet_time ON ledger_entries (wallet_id, created_at);
