#!/usr/bin/env bash
# control_failover.sh with the PostgreSQL state store (`--store postgres://...`) shared by
# the two control-plane replicas, the API process and the workers.
export FERRY_FAILOVER_STORE=postgres
exec bash "$(dirname "$0")/control_failover.sh"
