-- walrelay benchmark workload: the outbox table and its event generator.
-- Applied by deploy/bench/bench.py to the dedicated database (walrelay_bench),
-- which it drops and recreates at the start of every bench invocation.
-- The events are inserted by workload/outbox_insert.pgbench.
--
-- The table has Debezium's default outbox columns (id, aggregatetype,
-- aggregateid, type, payload) plus created_at, which the Outbox Event Router
-- and walrelay ignore; latency mode uses it as the row's commit time
-- (clock_timestamp() at INSERT; with 1-row transactions the INSERT is
-- microseconds before the COMMIT).

CREATE TABLE public.outbox (
    id            uuid        PRIMARY KEY,
    aggregatetype text        NOT NULL,
    aggregateid   text        NOT NULL,
    type          text        NOT NULL,
    payload       jsonb,
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- The connectors log in as the REPLICATION role "walrelay"; Debezium reads the
-- table's metadata (and would read rows for a data snapshot).
GRANT USAGE ON SCHEMA public TO walrelay;
GRANT SELECT ON public.outbox TO walrelay;

-- The 10,000 aggregates: ids 1..8000 are orders (aggregatetype 'BenchOrder'),
-- 8001..10000 payments ('BenchPayment'), so events route to two topics,
-- outbox.event.BenchOrder and outbox.event.BenchPayment. (Not 'order': the
-- project's tests share the broker and use outbox.event.order themselves.)
-- Each aggregate has a realistic order document, ~430 bytes as jsonb text,
-- generated once here: building it per INSERT (jsonb_build_object with random
-- values) cost ~0.3 ms of CPU per row, i.e. more than half a core at 2,000
-- rows/s on a 2-core machine, taken away from the contenders. The stream the
-- contenders decode is the same either way (no compression anywhere).
CREATE TABLE public.bench_aggregate (
    a             int  PRIMARY KEY,
    aggregatetype text NOT NULL,
    aggregateid   text NOT NULL,
    payload       jsonb NOT NULL
);
INSERT INTO public.bench_aggregate
SELECT a,
       CASE WHEN a <= 8000 THEN 'BenchOrder' ELSE 'BenchPayment' END,
       CASE WHEN a <= 8000 THEN 'order-' ELSE 'payment-' END || lpad(a::text, 5, '0'),
       jsonb_build_object(
           'orderId',    'order-' || lpad(a::text, 5, '0'),
           'customerId', 'cust-' || lpad((1 + floor(random() * 50000))::int::text, 6, '0'),
           'status',     (ARRAY['CREATED', 'PAID', 'SHIPPED', 'DELIVERED'])[1 + floor(random() * 4)::int],
           'currency',   'EUR',
           'items', jsonb_build_array(
               jsonb_build_object('sku', 'SKU-' || (10000 + floor(random() * 90000))::int, 'name', 'Water bottle 750ml',
                                  'qty', 1 + floor(random() * 3)::int, 'unitPrice', round((5 + random() * 95)::numeric, 2)),
               jsonb_build_object('sku', 'SKU-' || (10000 + floor(random() * 90000))::int, 'name', 'T-shirt navy M',
                                  'qty', 1 + floor(random() * 3)::int, 'unitPrice', round((5 + random() * 95)::numeric, 2))),
           'total',      round((10 + random() * 290)::numeric, 2),
           'shippingAddress', jsonb_build_object(
               'street', (1 + floor(random() * 999))::int || ' Market Street', 'city', 'Springfield',
               'postalCode', lpad(floor(random() * 100000)::int::text, 5, '0'), 'country', 'DE'),
           'placedAt',   to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
FROM generate_series(1, 10000) AS a;
ANALYZE public.bench_aggregate;

-- The events themselves are written by workload/outbox_insert.pgbench.
