/* formats/manifest.c - the text of a run's _manifest.json, written last at commit by
 * the files and s3 sinks (the one thing that publishes a run). Format in formats.h. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include "formats/formats.h"

int ferry__manifest_text(struct ferry_buf *b, const struct ferry__manifest_head *h, json_t *earlier,
                         int n, void (*item)(const void *ctx, int i, struct ferry__manifest_item *out),
                         const void *ctx)
{
    char now[40];
    ferry_format_time_us(ferry_now_wall_us(), now, sizeof now);
    int64_t total = 0;
    int rc = ferry_buf_printf(b, "{\"manifest_version\":1,\"pipeline\":");
    if (rc == FERRY_OK) rc = ferry_buf_json_string(b, h->pipeline, strlen(h->pipeline));
    if (rc == FERRY_OK) rc = ferry_buf_printf(b, ",\"pipeline_version\":");
    if (rc == FERRY_OK) rc = ferry_buf_json_string(b, h->version, strlen(h->version));
    if (rc == FERRY_OK && h->extra_key) {
        rc = ferry_buf_printf(b, ",\"%s\":", h->extra_key);
        if (rc == FERRY_OK) rc = ferry_buf_json_string(b, h->extra_value, strlen(h->extra_value));
    }
    if (rc == FERRY_OK)
        rc = ferry_buf_printf(b,
                              ",\"run_id\":%" PRId64 ",\"attempt\":%d,\"format\":\"%s\","
                              "\"committed_at\":\"%s\",\"%s\":[",
                              h->run_id, h->attempt, h->format, now, h->list_key);
    bool first = true;
    size_t i;
    json_t *f;
    json_array_foreach(earlier, i, f)
    {
        char *txt = json_dumps(f, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (txt == NULL) rc = FERRY_ENOMEM;
        if (rc == FERRY_OK) rc = ferry_buf_printf(b, "%s\n  %s", first ? "" : ",", txt);
        free(txt);
        total += (int64_t)json_integer_value(json_object_get(f, "rows"));
        first = false;
    }
    for (int k = 0; k < n && rc == FERRY_OK; k++) {
        struct ferry__manifest_item it;
        item(ctx, k, &it);
        rc = ferry_buf_printf(b, "%s\n  {\"table\":", first ? "" : ",");
        if (rc == FERRY_OK) rc = ferry_buf_json_string(b, it.table, strlen(it.table));
        if (rc == FERRY_OK) rc = ferry_buf_printf(b, ",\"%s\":", h->name_key);
        if (rc == FERRY_OK) rc = ferry_buf_json_string(b, it.name, strlen(it.name));
        if (rc == FERRY_OK)
            rc = ferry_buf_printf(b,
                                  ",\"rows\":%" PRId64 ",\"bytes\":%" PRId64
                                  ",\"crc32c\":%" PRIu32 "}",
                                  it.rows, it.bytes, it.crc);
        total += it.rows;
        first = false;
    }
    if (rc == FERRY_OK) rc = ferry_buf_printf(b, "\n],\"rows\":%" PRId64 "}\n", total);
    return rc;
}
