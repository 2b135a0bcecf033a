/* notify/otel.h - OpenTelemetry traces of a run over OTLP/HTTP with JSON encoding
 * (docs/operations.md, traces). After each attempt, the process that ran it folds the
 * attempt's events into spans - the run, one per resource (child of the run), one per
 * written batch (child of its resource, with rows, bytes and the batch's CRC32-C) - and
 * POSTs them to $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or $OTEL_EXPORTER_OTLP_ENDPOINT plus
 * /v1/traces. Its metrics - per resource the delta sums ferry.rows, ferry.bytes and
 * ferry.batches, the gauges ferry.cdc.lag (seconds) and ferry.cdc.lag_bytes of cdc
 * resources, and the histogram ferry.run.duration (seconds, attribute ferry.state) - go to
 * $OTEL_EXPORTER_OTLP_METRICS_ENDPOINT, or $OTEL_EXPORTER_OTLP_ENDPOINT plus /v1/metrics.
 * Service name: $OTEL_SERVICE_NAME or "ferry". */
#ifndef FERRY_NOTIFY_OTEL_H
#define FERRY_NOTIFY_OTEL_H

#include <stdint.h>
#include "ferry/error.h"

/* FERRY_OK (and nothing sent) when no endpoint is configured; an error naming the
 * endpoint when the export failed (the run's outcome does not depend on it). */
int ferry_otel_export_attempt(const char *state_path, const char *bus_url, int64_t run_id,
                              int attempt, struct ferry_error *err);

#endif
