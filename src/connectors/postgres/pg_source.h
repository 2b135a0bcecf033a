/* connectors/postgres/pg_source.h - the pure parts of the postgres source's unordered full
 * reads (private to this folder; exposed for tests/unit/test_pg_source.c).
 *
 * A full read whose positions become durable only at the run's end (the read context's
 * positions_at_end: an at_commit sink) needs no key order: a crash before the commit
 * restarts every shard from its start. Such a read is split into heap page ranges instead of
 * key ranges, each read with a TID Range Scan (PostgreSQL 14 and later): the pages of one
 * table, as sequential as a plain `COPY table TO`. The ranges are [0, b1), [b1, b2), ...,
 * [bk, infinity): together they hold every tuple id there can be, so under one snapshot
 * every visible row is read exactly once, whatever was inserted or moved between the plan
 * and the snapshot. */
#ifndef FERRY_PG_SOURCE_H
#define FERRY_PG_SOURCE_H

#include <stdint.h>
#include "ferry/core.h"
#include "ferry/error.h"

/* How many page-range shards: none for a single reader (one unfiltered read); else a
 * multiple of `parallelism` (readers finish together) with about `shard_rows` rows each
 * (est_rows < 0: unknown, one shard per reader), never more than `pages` (each range
 * holds at least one page) nor 100000. Returns 1 for "one shard, no range". */
int ferry__pg_page_shards(int64_t pages, int64_t est_rows, int64_t shard_rows,
                          int64_t parallelism);

/* The first page of shard i of n over `pages` pages (i = 0 .. n-1): 0, then even splits. */
int64_t ferry__pg_page_bound(int64_t pages, int i, int n);

/* Appends the condition of the page range [lo, hi) to sql, "" when lo <= 0 and hi < 0 (the
 * whole table); hi < 0 means open-ended. `where` is what starts the first condition
 * (" WHERE "); later ones start with " AND ". FERRY_ENOMEM on a failed append. */
int ferry__pg_page_range_sql(struct ferry_buf *sql, const char *where, int64_t lo, int64_t hi);

#endif
