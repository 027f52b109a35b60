#!/usr/bin/env bash
# Regenerates pg18_mixed.hex (and pg18_binary.hex) from a live PostgreSQL with
# wal_level=logical. Needs psql and a superuser (for replication origins).
#
#   PGHOST=127.0.0.1 PGPORT=54318 PGUSER=postgres PGPASSWORD=postgres \
#     tests/data/pgoutput/capture.sh
#
# Creates and drops a scratch database and slot; writes next to this script.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
db=walrelay_pgoutput_scratch
slot=walrelay_pgoutput_fixture
psql_admin=(psql -X -q -v ON_ERROR_STOP=1 -d postgres)
psql_db=(psql -X -q -v ON_ERROR_STOP=1 -d "$db")

cleanup() {
    "${psql_admin[@]}" -c "select pg_drop_replication_slot('$slot') from pg_replication_slots where slot_name = '$slot'" >/dev/null || true
    "${psql_admin[@]}" -c "drop database if exists $db" || true
}
trap cleanup EXIT
cleanup

"${psql_admin[@]}" -c "create database $db"

setup_sql=$(cat <<'SQL'
create type mood as enum ('sad', 'ok', 'happy');
create table items (
    id     int primary key,
    name   text,
    doc    jsonb,
    blob   bytea,
    uid    uuid,
    at     timestamptz,
    price  numeric(10,2),
    tag    varchar(16),
    feel   mood,
    big    text
);
alter table items alter column big set storage external;  -- out-of-line, uncompressed: TOASTed
create table events (id bigint, payload jsonb);
alter table events replica identity full;
create publication walrelay_pub for table items, events;
select pg_create_logical_replication_slot('walrelay_pgoutput_fixture', 'pgoutput');  -- (own transaction)
SQL
)

changes_sql=$(cat <<'SQL'
insert into items values
  (1, 'widget', '{"a": 1, "b": [true, null]}', '\xdeadbeef', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
   '2024-01-02 03:04:05.678901+00', 12.50, 'red', 'happy', repeat('walrelay-', 400)),
  (2, null, null, null, null, null, null, null, null, null);
update items set name = 'widget v2' where id = 1;            -- big unchanged and TOASTed: 'u'
update items set id = 3 where id = 2;                       -- key changed: old key 'K'
delete from items where id = 3;                             -- old key 'K'
begin;
insert into events values (10, '{"kind": "created"}');
select pg_logical_emit_message(true, 'walrelay', 'hello');
update events set payload = '{"kind": "updated"}' where id = 10;  -- REPLICA IDENTITY FULL: 'O'
delete from events where id = 10;                           -- 'O'
commit;
select pg_logical_emit_message(false, 'walrelay', 'bye');
truncate items, events restart identity cascade;
select pg_replication_origin_create('walrelay_origin');
select pg_replication_origin_session_setup('walrelay_origin');
begin;
select pg_replication_origin_xact_setup('0/12345678', '2024-01-02 03:04:05+00');
insert into events values (11, '{"kind": "replicated"}');
commit;
select pg_replication_origin_session_reset();
select pg_replication_origin_drop('walrelay_origin');
SQL
)

# Fed on stdin, not -c, so every statement is its own transaction as in an app.
"${psql_db[@]}" -f - <<<"$setup_sql" >/dev/null
"${psql_db[@]}" -f - <<<"$changes_sql" >/dev/null

header() {
    local options=$1
    echo "# pgoutput messages captured from $("${psql_db[@]}" -Atc 'select version()')"
    echo "# by tests/data/pgoutput/capture.sh. One message per line: lsn<TAB>xid<TAB>hex(data)."
    echo "# Fetched with pg_logical_slot_*_binary_changes(slot, NULL, NULL, $options)"
    echo "# in a session with TimeZone=UTC, after this SQL on a fresh database:"
    echo "#"
    printf '%s\n%s\n' "$setup_sql" "$changes_sql" | sed 's/^/#   /'
}

fetch() {
    local fn=$1 options=$2
    "${psql_db[@]}" -At -F $'\t' -c "set timezone = 'UTC'" \
        -c "select lsn, xid, encode(data, 'hex') from $fn('$slot', NULL, NULL, $options)"
}

binary_opts="'proto_version', '1', 'publication_names', 'walrelay_pub', 'messages', 'true', 'binary', 'true'"
text_opts="'proto_version', '1', 'publication_names', 'walrelay_pub', 'messages', 'true'"
{ header "$binary_opts"; fetch pg_logical_slot_peek_binary_changes "$binary_opts"; } >"$here/pg18_binary.hex"
{ header "$text_opts"; fetch pg_logical_slot_get_binary_changes "$text_opts"; } >"$here/pg18_mixed.hex"
echo "wrote $here/pg18_mixed.hex ($(grep -vc '^#' "$here/pg18_mixed.hex") messages) and pg18_binary.hex"
