-- Insert cost of ledger_entries' wallet index, old (wallet_id, created_at) against new
-- (wallet_id, created_at, account_kind, amount_minor): two tables with the ledger's columns and
-- five indexes, 300,000 entries into each six times, alternating old/new/new/old, each insert
-- timed after its label.
-- psql -h 127.0.0.1 -U postgres -d postgres -f bench/payments/index-insert.sql (results/guard-47.md)
\set ON_ERROR_STOP on
SET synchronous_commit = off;
DROP TABLE IF EXISTS e_old, e_new, w;
CREATE TABLE w AS SELECT gen_random_uuid() AS wallet_id, i FROM generate_series(1, 200000) i;
CREATE TABLE e_old (id bigserial, posting_id uuid, merchant_id uuid, account_kind varchar(32), account_id uuid, wallet_id uuid, currency varchar(3), amount_minor bigint, created_at timestamptz, PRIMARY KEY (id, posting_id));
CREATE TABLE e_new (LIKE e_old INCLUDING ALL);
CREATE INDEX ON e_old (merchant_id, created_at); CREATE INDEX ON e_old (account_kind, account_id); CREATE INDEX ON e_old (posting_id);
CREATE INDEX ON e_new (merchant_id, created_at); CREATE INDEX ON e_new (account_kind, account_id); CREATE INDEX ON e_new (posting_id);
CREATE INDEX ON e_old (wallet_id, created_at);
CREATE INDEX ON e_new (wallet_id, created_at, account_kind, amount_minor);
\timing on
SELECT format('SELECT %L AS run', t || ' round ' || r),
       format($q$INSERT INTO %I (posting_id, merchant_id, account_kind, account_id, wallet_id, currency, amount_minor, created_at)
SELECT gen_random_uuid(), '01a2293e-0932-726d-b501-50b8c9c2db3f', CASE WHEN g %% 2 = 0 THEN 'wallet_actual' ELSE 'merchant_clearing' END,
       w.wallet_id, w.wallet_id, 'EUR', (g %% 900) + 100, now() + g * interval '1 ms'
FROM generate_series(1, 300000) g JOIN w ON w.i = 1 + (g::bigint * 7919) %% 200000$q$, t)
FROM generate_series(1, 3) r, unnest(ARRAY['e_old', 'e_new', 'e_new', 'e_old']) WITH ORDINALITY AS o(t, k)
ORDER BY r, k
\gexec
\timing off
SELECT pg_size_pretty(pg_total_relation_size('e_old')) AS old_total, pg_size_pretty(pg_total_relation_size('e_new')) AS new_total;
DROP TABLE e_old, e_new, w;
