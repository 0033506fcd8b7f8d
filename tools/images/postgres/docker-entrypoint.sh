#!/bin/bash
# Entry point of the local postgres:15-bookworm stand-in. Honours this subset of the official
# image's environment: POSTGRES_PASSWORD (required), POSTGRES_USER (default postgres),
# POSTGRES_DB (default POSTGRES_USER), PGDATA. Not supported: POSTGRES_HOST_AUTH_METHOD,
# POSTGRES_INITDB_ARGS, *_FILE variables, /docker-entrypoint-initdb.d scripts.
#
# On an empty PGDATA: initdb with POSTGRES_USER as the superuser and its password stored as
# SCRAM-SHA-256, POSTGRES_DB created (owned by POSTGRES_USER), connections from any address
# with a password (`host all all all scram-sha-256`), local socket connections trusted as in the
# official image. Then `exec postgres`, so the server is PID 1 and handles stop signals itself.
set -Eeuo pipefail

# Options alone (`-c fsync=off`) are options of the server, as in the official image.
if [ $# -eq 0 ] || [ "${1:0:1}" = - ]; then
  set -- postgres "$@"
fi
if [ "$1" != postgres ]; then
  exec "$@"
fi

if [ "$(id -u)" = 0 ]; then
  # Started as root (docker run without --user): hand PGDATA to postgres and drop to it.
  # A runtime may mount an empty /run over the image's socket directory (containerd does).
  mkdir -p "$PGDATA" /var/run/postgresql
  chown postgres:postgres "$PGDATA" /var/run/postgresql
  exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi

POSTGRES_USER=${POSTGRES_USER:-postgres}
POSTGRES_DB=${POSTGRES_DB:-$POSTGRES_USER}

mkdir -p "$PGDATA"
chmod 700 "$PGDATA"

if [ ! -s "$PGDATA/PG_VERSION" ]; then
  if [ -z "${POSTGRES_PASSWORD:-}" ]; then
    echo "error: the database is uninitialized and POSTGRES_PASSWORD is not set;" \
      "set it to the superuser's password (this image never creates a passwordless server)" >&2
    exit 1
  fi
  echo "initializing a PostgreSQL cluster in $PGDATA (superuser $POSTGRES_USER)" >&2
  initdb --username="$POSTGRES_USER" --pwfile=<(printf '%s\n' "$POSTGRES_PASSWORD") \
    --auth-local=trust --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 \
    -D "$PGDATA" >&2
  printf '\nhost all all all scram-sha-256\n' >> "$PGDATA/pg_hba.conf"

  # A private server on the socket only (no TCP), so no client sees a half-made database.
  pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >&2
  if [ "$POSTGRES_DB" != postgres ]; then
    psql -v ON_ERROR_STOP=1 --no-psqlrc --username="$POSTGRES_USER" --dbname=postgres \
      --set=db="$POSTGRES_DB" <<<'CREATE DATABASE :"db";' >&2
  fi
  pg_ctl -D "$PGDATA" -m fast -w stop >&2
  echo "PostgreSQL init process complete; ready for start up" >&2
fi

exec "$@"
