#!/usr/bin/env bash
# pull_workers.sh with the PostgreSQL state store (`--store postgres://...`): the same
# distributed run, worker kill, append and upsert checks, with every process sharing its
# state through PostgreSQL as workers on several hosts would.
export FERRY_PULL_STORE=postgres
exec bash "$(dirname "$0")/pull_workers.sh"
