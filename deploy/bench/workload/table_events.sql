-- walrelay benchmark, table-events pass (bench.py --tables): an ordinary table with ten
-- columns of mixed types, captured as Debezium change events (D: Debezium without the
-- Outbox Event Router; W: walrelay's [[table]]). Applied by bench.py with
--   psql -v rows=<TABLE_ROWS> -f table_events.sql
-- before the pass; the backlog is then written by workload/table_update.pgbench.
--
-- REPLICA IDENTITY DEFAULT (the primary key): updates carry the new row only, so every
-- event has "before": null, as on most tables users capture. Every value is small (the
-- jsonb is ~60 bytes), so nothing is TOASTed and each Update message carries all ten
-- columns.

DROP TABLE IF EXISTS public.bench_table;
CREATE TABLE public.bench_table (
    id         int8          PRIMARY KEY,
    qty        int4          NOT NULL,
    name       text          NOT NULL,
    sku        varchar(32)   NOT NULL,
    price      numeric(12,2) NOT NULL,
    updated_at timestamptz   NOT NULL,
    active     bool          NOT NULL,
    attrs      jsonb         NOT NULL,
    ref        uuid          NOT NULL,
    score      float8        NOT NULL
);
GRANT SELECT ON public.bench_table TO walrelay;

INSERT INTO public.bench_table
SELECT i,
       (random() * 1000)::int4,
       'Product ' || i || ' water bottle 750ml',
       'SKU-' || lpad(i::text, 8, '0'),
       round((5 + random() * 995)::numeric, 2),
       clock_timestamp(),
       i % 2 = 0,
       jsonb_build_object('color', (ARRAY['red', 'blue', 'green'])[1 + i % 3], 'size', 'M', 'tags', jsonb_build_array('a', 'b')),
       gen_random_uuid(),
       random() * 100
FROM generate_series(1, :rows) AS i;
VACUUM (ANALYZE) public.bench_table;
