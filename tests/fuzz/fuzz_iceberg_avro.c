/* tests/fuzz/fuzz_iceberg_avro.c - the Avro object container reader of the Iceberg sink
 * (ferry__avro_read in src/connectors/iceberg/avro.c), which reads manifest lists and
 * manifests back at every commit (parent manifests, orphan sweeps, expiry) from a warehouse
 * that other writers share: header, metadata map, the file's own schema (named types,
 * unions, records, arrays, maps, fixed, enums), null and deflate blocks, sync markers.
 * Seeds are manifest lists and manifests ferry wrote (append, merge with deletes,
 * partitioned). A record read back is written again with the file's schema: what the reader
 * returns must stay something the writer accepts or refuses with an error, never a crash. */
#include <jansson.h>
#include "connectors/iceberg/iceberg.h"
#include "ferry/core.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *meta = NULL, *records = NULL;
    struct ferry_error err;
    ferry_error_clear(&err);
    if (ferry__avro_read(data, size, &meta, &records, &err) == FERRY_OK) {
        const char *schema_text = json_string_value(json_object_get(meta, "avro.schema"));
        json_t *schema = schema_text ? json_loads(schema_text, JSON_DECODE_ANY, NULL) : NULL;
        json_t *extra = json_object();
        struct ferry_buf out;
        ferry_buf_init(&out, 0);
        if (schema && extra && json_array_size(records) <= 4096)
            (void)ferry__avro_write(&out, schema, extra, records, &err);
        ferry_buf_release(&out);
        json_decref(extra);
        json_decref(schema);
    }
    json_decref(meta);
    json_decref(records);
    return 0;
}
