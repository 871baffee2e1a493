-- History for the data-size benchmark (bench/payments/data-size.sh): :wallets wallets of one
-- merchant, each funded once and paid from :payments times over the last year, so the
-- ledger holds :wallets * (2 + 2 * :payments) entries, with their postings, payments and
-- outbox events, as the service writes them (same kinds, accounts, signs, ids). Balances
-- agree with the ledger (`wallet-api ledger check` passes).
--
-- psql -v merchant=UUID -v integration=UUID -v program=UUID -v wallets=N -v payments=K -f
-- Ids are UUIDv7 of their row's time, spread over the last 365 days, so they sort and
-- partition as the service's own would.
\set ON_ERROR_STOP on
SET synchronous_commit = off;
SET maintenance_work_mem = '256MB';

CREATE FUNCTION pg_temp.v7(t timestamptz) RETURNS uuid LANGUAGE sql VOLATILE AS $$
  SELECT encode(set_byte(overlay(uuid_send(gen_random_uuid())
           PLACING substring(int8send((extract(epoch FROM t) * 1000)::bigint) FROM 3)
           FROM 1 FOR 6), 6, (get_byte(uuid_send(gen_random_uuid()), 6) & 15) | 112), 'hex')::uuid
$$;

-- One row per wallet: when it was funded, and its payments' amounts and times after that.
CREATE TEMP TABLE seed_wallets AS
SELECT i,
       pg_temp.v7(t) AS user_id,
       pg_temp.v7(t + interval '1 ms') AS wallet_id,
       pg_temp.v7(t + interval '2 ms') AS funding_id,
       t AS funded_at
FROM (SELECT i, now() - interval '365 days' + random() * interval '300 days' AS t
      FROM generate_series(1, :wallets) i) s;

CREATE TEMP TABLE seed_payments AS
SELECT w.wallet_id, p.t,
       pg_temp.v7(p.t) AS payment_id,
       pg_temp.v7(p.t + interval '1 ms') AS posting_id,
       pg_temp.v7(p.t + interval '2 ms') AS event_id,
       100 + (random() * 900)::int AS amount
FROM seed_wallets w,
     LATERAL (SELECT w.funded_at + random() * (now() - interval '1 hour' - w.funded_at) AS t
              FROM generate_series(1, :payments) k) p;

INSERT INTO wallet_users (id, merchant_id, phone, state, created_at, updated_at, verified_at)
SELECT user_id, :'merchant'::uuid, '+999' || lpad(i::text, 10, '0'), 'VERIFIED', funded_at, funded_at, funded_at
FROM seed_wallets;

CREATE TEMP TABLE seed_spent AS
SELECT wallet_id, SUM(amount) AS spent FROM seed_payments GROUP BY wallet_id;

INSERT INTO wallets (id, wallet_user_id, merchant_id, wallet_program_id, currency, actual_minor,
                     pending_topups_minor, created_at, updated_at)
SELECT w.wallet_id, w.user_id, :'merchant'::uuid, :'program'::uuid, 'EUR', 100000 - COALESCE(s.spent, 0),
       0, w.funded_at, w.funded_at
FROM seed_wallets w LEFT JOIN seed_spent s USING (wallet_id);

-- Postings, then their entries, in time order, as a live service appends them: a window of
-- time is a run of pages and a wallet's entries are spread over the year. Funding: an
-- adjustment (wallet_actual +, merchant_adjustment -). A payment: wallet_actual -,
-- merchant_clearing +.
INSERT INTO ledger_postings (id, merchant_id, kind, reference_type, reference_id, memo, created_at)
SELECT id, :'merchant'::uuid, kind, kind, reference_id, memo, t FROM (
  SELECT funding_id AS id, 'adjustment' AS kind, pg_temp.v7(funded_at) AS reference_id, 'seed' AS memo,
         funded_at AS t FROM seed_wallets
  UNION ALL
  SELECT posting_id, 'payment', payment_id, NULL, t FROM seed_payments
) p ORDER BY t, id;
INSERT INTO ledger_entries (posting_id, merchant_id, account_kind, account_id, wallet_id, currency, amount_minor, created_at)
SELECT posting_id, :'merchant'::uuid, kind, account_id, wallet_id, 'EUR', amount, t FROM (
  SELECT funding_id AS posting_id, 'wallet_actual' AS kind, wallet_id AS account_id, wallet_id,
         100000 AS amount, funded_at AS t, 0 AS leg FROM seed_wallets
  UNION ALL
  SELECT funding_id, 'merchant_adjustment', :'merchant'::uuid, wallet_id, -100000, funded_at, 1 FROM seed_wallets
  UNION ALL
  SELECT posting_id, 'wallet_actual', wallet_id, wallet_id, -amount, t, 0 FROM seed_payments
  UNION ALL
  SELECT posting_id, 'merchant_clearing', :'merchant'::uuid, wallet_id, amount, t, 1 FROM seed_payments
) e ORDER BY t, posting_id, leg;

-- The payments and their events.
INSERT INTO payments (id, merchant_id, integration_id, branch_id, terminal_id, cashier_id, wallet_id,
                      status, credential_type, amount_minor, currency, debited_promo_minor,
                      debited_actual_minor, promo_split, refunded_minor, order_ref, basket,
                      basket_total_minor, needs_reconciliation, data_completeness_score,
                      posting_id, created_at, completed_at, voided_at, updated_at)
SELECT payment_id, :'merchant'::uuid, :'integration'::uuid, NULL, 'till-1', NULL, wallet_id,
       'completed', 'qr', amount, 'EUR', 0, amount, '[]', 0, 'SEED-' || left(payment_id::text, 8),
       NULL, NULL, false, 55, posting_id, t, t, NULL, t
FROM seed_payments;
INSERT INTO outbox (event_id, kind, topic, merchant_id, resource_type, resource_id, sequence_number,
                    payload, occurred_at, created_at, relayed_at)
SELECT event_id, 'event', 'payment.completed', :'merchant'::uuid, 'payment', payment_id::text, 1,
       jsonb_build_object('status', 'completed', 'currency', 'EUR', 'branch_id', NULL,
         'order_ref', 'SEED', 'wallet_id', wallet_id, 'payment_id', payment_id,
         'amount_minor', amount, 'cashback_minor', 0, 'refunded_minor', 0,
         'decision_trace_id', 'dtr_' || replace(payment_id::text, '-', ''),
         'debited_promo_minor', 0, 'debited_actual_minor', amount),
       t, t, t
FROM seed_payments;

-- The visibility map and statistics a year-old database has from autovacuum (which a test
-- machine's PostgreSQL may run without): index-only reads depend on the first.
VACUUM ANALYZE;
