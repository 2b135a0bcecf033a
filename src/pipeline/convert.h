/* pipeline/convert.h - `on_unrepresentable: null | clamp`: values the sink cannot hold,
 * converted just before the sink and counted per column.
 *
 * What a sink cannot hold is its caps.values (connector.h) plus, for a sink without
 * caps.special_values, ferry's special values (+-infinity dates and timestamps, numeric NaN,
 * which the source emits under this option instead of refusing them):
 *   +-infinity date/timestamp   null: NULL   clamp: 0001-01-01 / 9999-12-31 23:59:59.999999
 *   date/timestamp outside 0001..9999 (calendar sinks)  the same
 *   decimal128 NaN               NULL (both: NaN has no nearest value)
 *   float NaN (no_nan)           NULL (both)
 *   float +-Infinity (no_infinity)  clamp: +-the largest finite value of the column's type
 *   float -0 (no_negative_zero)  clamp: 0
 *   decimal text beyond the sink's digits: clamp: +-the largest value the sink holds when
 *   there are too many integer digits (or +-Infinity); NULL for NaN and for more fraction
 *   digits than the sink keeps (rounding is not clamping)
 * Key columns are never converted: such a value still stops the run (the sink's refusal).
 * A converted batch is a canonical copy; the digest is computed after conversion.
 * Not thread-safe: one converter per resource, used by the flow's writer thread. */
#ifndef FERRY_PIPELINE_CONVERT_H
#define FERRY_PIPELINE_CONVERT_H

#include "ferry/batch.h"
#include "ferry/connector.h"
#include "ferry/core.h"

struct ferry_convert;

/* For `sc` (what the sink writes) under `mode` (null or clamp) into a sink with `caps`:
 * *out is NULL when no column can need a conversion. *nullable_sc is a copy of sc whose
 * non-key columns that may be set to NULL are nullable (NULL when sc already says so);
 * the sink prepares that one. */
int ferry_convert_new(const struct ferry_schema *sc, enum ferry_unrepresentable mode,
                      const struct ferry_sink_caps *caps, struct ferry_convert **out,
                      struct ferry_schema **nullable_sc, struct ferry_error *err);
/* Converts what *b holds that the sink cannot: *b may be replaced by a converted copy (the
 * original is released). The batch's counts replace the previous batch's; totals add up. */
int ferry_convert_apply(struct ferry_convert *cv, struct ferry_batch **b, struct ferry_error *err);
/* Appends `,"converted":{"COL":{"null":N,"clamp":M},...}` for the last batch applied
 * (total: for every batch so far), nothing when it converted nothing. Accepts NULL cv. */
int ferry_convert_json(const struct ferry_convert *cv, bool total, struct ferry_buf *out);
/* Values converted so far (every column). Accepts NULL. */
int64_t ferry_convert_total(const struct ferry_convert *cv);
void ferry_convert_free(struct ferry_convert *cv);

#endif
