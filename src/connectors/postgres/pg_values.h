/* connectors/postgres/pg_values.h - PostgreSQL's special values (±infinity dates and
 * timestamps, NaN in a numeric(p,s)) in the text form pgoutput sends, and the error that
 * names a change's row by its key. Called by pg_cdc.c for every text value of a change. */
#ifndef FERRY_PG_VALUES_H
#define FERRY_PG_VALUES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "connectors/postgres/pg_repl.h"
#include "ferry/batch.h"
#include "ferry/error.h"

/* The text p[0..n) of a value of field f: 0 when it is no special value; 1 when it is one
 * and `specials` (the run's read context) let it be written, as ferry's special value, into
 * rw; -1 when it is one the run cannot carry (*cls: "date infinity", "numeric NaN"...). */
int ferry__pg_text_special(const struct ferry_field *f, const uint8_t *p, size_t n,
                           bool specials, struct ferry_row_writer *rw, const char **cls);

/* PostgreSQL's ISO text of a date or timestamp outside what batch/text.c reads (years 0001..
 * 9999): more year digits, " BC", a "+HH[:MM[:SS]]" offset (timestamptz). *out: days since
 * 1970-01-01 / microseconds since 1970 UTC. FERRY_EINVAL when malformed, FERRY_EUNSUPPORTED
 * when past what ferry holds (timestamps: year 294247; dates: int32 days). */
int ferry__pg_date_text(const char *s, size_t n, int32_t *out);
int ferry__pg_timestamp_text(const char *s, size_t n, int64_t *out);

/* FERRY_EINVAL naming the table (`from`), column `col` of sc, the row by its key (the key
 * fields' text in tp, where map[f] is field f's index in the tuple) and `why`. */
int ferry__pg_change_value_error(const char *what, const char *from, const struct ferry_schema *sc,
                                 const int *map, const struct ferry_pg_repl_tuple *tp, int col,
                                 const char *why, struct ferry_error *err);

#endif
