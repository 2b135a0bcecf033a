/* connectors/iceberg/iceberg_verify.c - the iceberg sink's verify_open slot: an Iceberg
 * destination read back through the iceberg source for `ferry verify`.
 *
 * The sink's section already names the catalog the way the source reads it (warehouse,
 * namespace, catalog and its keys, the S3 connection keys: the same code opens both), so a
 * small pipeline is made for the purpose: the sink's section as an iceberg source (without
 * `type` and `write`), one resource, the destination table read in full (its current
 * snapshot, delete files applied), and a null sink. verify's stream side
 * (backend_stream.c) reads it, hashes every row in C and compares it with the source by
 * chunks as for any side read through ferry. Secrets stay references (env:, file:), as
 * written in the pipeline file.
 *
 * Calls the config loader, verify/backend_stream.c. Called by `ferry verify` through the
 * sink vtable. */
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "connectors/iceberg/iceberg.h"
#include "ferry/config.h"
#include "ferry/connector.h"
#include "ferry/pipeline.h"
#include "verify/verify.h"

static int nomem(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "iceberg", "iceberg verify: out of memory");
}

/* The pipeline (JSON, which the YAML loader reads) that reads table through the catalog the
 * sink section cfg names. */
static char *reader_pipeline(struct ferry_cfg *cfg, const char *table)
{
    static const char *const skip[] = {"type", "write", NULL};
    char *text = ferry_cfg_to_json(cfg, skip);
    json_t *src = text ? json_loads(text, 0, NULL) : NULL;
    ferry_free(text);
    if (!json_is_object(src)) {
        json_decref(src);
        return NULL;
    }
    json_object_set_new(src, "type", json_string("iceberg"));
    json_object_set_new(src, "resources", json_pack("[{s:s,s:s}]", "table", table, "mode", "full"));
    json_t *p = json_pack("{s:i,s:s,s:o,s:{s:s}}", "version", 1, "name",
                          "verify-iceberg-destination", "source", src, "sink", "type", "null");
    char *out = p ? json_dumps(p, JSON_COMPACT) : NULL;
    json_decref(p);
    char *copy = out ? ferry_strdup(out) : NULL;
    free(out);
    return copy;
}

int ferry__iceberg_verify_open(struct ferry_cfg *cfg, bool source,
                               const struct ferry_resource_spec *r, const struct ferry_vtable *t,
                               const char *what, struct ferry_vside **out, char **table_out,
                               struct ferry_error *err)
{
    *out = NULL;
    *table_out = NULL;
    if (source)
        return ferry_error_set(err, FERRY_EUNSUPPORTED, "iceberg",
                               "iceberg verify: only a destination is opened here");
    const char *table = ferry_resource_target(r);
    char *y = reader_pipeline(cfg, table);
    if (y == NULL) return nomem(err);
    struct ferry_pipeline_spec *rp = NULL;
    int rc = ferry_pipeline_load_string(y, strlen(y), "verify", &rp, err);
    if (rc == FERRY_OK) rc = ferry__vside_stream_open(rp, &rp->resources[0], t, what, out, err);
    const char *ns = NULL, *wh = NULL;
    if (rc == FERRY_OK && (ferry_cfg_str(cfg, "namespace", false, &ns, NULL) != FERRY_OK || !ns))
        ns = "default";
    if (rc == FERRY_OK && ferry_cfg_str(cfg, "warehouse", false, &wh, NULL) != FERRY_OK) wh = NULL;
    if (rc == FERRY_OK &&
        (*table_out = ferry_asprintf("iceberg %s.%s (%s)", ns, table, wh ? wh : "?")) == NULL) {
        (*out)->ops->close(*out);
        *out = NULL;
        rc = nomem(err);
    }
    ferry_pipeline_free(rp);
    ferry_free(y);
    return rc;
}
