/* verify/repair.c - `ferry verify --repair`: re-copies only the keys that differ.
 *
 * Owns the repair session: the source rows of the differing keys are fetched by key (the
 * backend's fetch), written into one batch in the source schema (delete operations for
 * keys only the destination holds), passed through the pipeline's transforms and applied
 * by the pipeline's own sink in upsert mode, or merge mode when there are deletes, then
 * committed. The sink computes its digest as in a run, and a divergence fails the repair.
 * Calls the builder (row writer), the transform chain, the sink vtable and the backends.
 * Called by verify.c. */
#include <stdio.h>
#include <string.h>
#include "batch/builder.h"
#include "ferry/digest.h"
#include "pipeline/transform.h"
#include "verify/verify.h"

static int oom(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "verify", "out of memory");
}

int ferry__vrepair_put(struct ferry_row_writer *rw, const struct ferry_field *f,
                       const struct ferry_vvalue *v, struct ferry_error *err)
{
    if (v->null) {
        ferry_rw_null(rw);
        return FERRY_OK;
    }
    switch (f->type) {
    case FERRY_TYPE_BOOL:
        ferry_rw_bool(rw, v->i != 0);
        break;
    case FERRY_TYPE_INT8:
    case FERRY_TYPE_INT16:
    case FERRY_TYPE_INT32:
    case FERRY_TYPE_INT64:
    case FERRY_TYPE_DATE32:
    case FERRY_TYPE_TIME64_US:
    case FERRY_TYPE_TIMESTAMP_US:
    case FERRY_TYPE_TIMESTAMPTZ_US:
        ferry_rw_int(rw, v->i);
        break;
    case FERRY_TYPE_FLOAT32:
    case FERRY_TYPE_FLOAT64:
        ferry_rw_float(rw, v->f);
        break;
    case FERRY_TYPE_UUID:
        ferry_rw_fixed(rw, v->u, 16);
        break;
    case FERRY_TYPE_DECIMAL128: {
        struct ferry_decimal128 d;
        if (ferry_decimal128_from_text((const char *)v->p, v->n, f->precision, f->scale, &d) !=
            FERRY_OK)
            return ferry_error_set(err, FERRY_EINVAL, "verify",
                                   "verify --repair: column %s: \"%.*s\" is not a decimal(%d,%d)",
                                   f->name, (int)(v->n > 40 ? 40 : v->n), (const char *)v->p,
                                   f->precision, f->scale);
        ferry_rw_dec128(rw, d);
        break;
    }
    default:
        ferry_rw_text(rw, v->p ? v->p : (const uint8_t *)"", v->n);
        break;
    }
    return FERRY_OK;
}

/* A delete carries the key; the other columns hold a neutral value of their type (the
 * sink only reads the key of a delete). */
static int put_delete(struct ferry_row_writer *rw, const struct ferry_schema *sc,
                      const struct ferry_vfix *fx, struct ferry_error *err)
{
    ferry_rw_begin(rw, FERRY_OP_DELETE);
    int rc = FERRY_OK;
    for (int i = 0; i < sc->n_fields && rc == FERRY_OK; i++) {
        const struct ferry_field *f = &sc->fields[i];
        struct ferry_vvalue v;
        memset(&v, 0, sizeof v);
        char zero[] = "0";
        if (f->key_pos > 0) {
            const char *t = fx->key.part[f->key_pos - 1];
            if (t == NULL)
                v.null = true;
            else if (ferry__vcanon_key_value(f->type, t, &v) != FERRY_OK)
                return ferry_error_set(err, FERRY_EINVAL, "verify",
                                       "verify --repair: key %s value \"%s\" does not parse",
                                       f->name, t);
        } else if (f->nullable) {
            v.null = true;
        } else if (f->type == FERRY_TYPE_DECIMAL128 || f->type == FERRY_TYPE_DECIMAL_TEXT) {
            v.p = (const uint8_t *)zero;
            v.n = 1;
        }
        rc = ferry__vrepair_put(rw, f, &v, err);
    }
    if (rc == FERRY_OK) rc = ferry_rw_end(rw, err);
    return rc;
}

struct sink_batch {
    struct ferry_batch *b;
};

static int collect(void *ctx, struct ferry_batch *b, struct ferry_error *err)
{
    struct sink_batch *s = ctx;
    (void)err;
    if (s->b != NULL) { /* limits are large: one batch; a second one would be a bug */
        ferry_batch_unref(b);
        return ferry_error_set(err, FERRY_EINVAL, "verify", "verify --repair: too many rows");
    }
    s->b = b;
    return FERRY_OK;
}

static int discover(const struct ferry_pipeline_spec *p, const struct ferry_resource_spec *r,
                    struct ferry_schema **out, struct ferry_error *err)
{
    void *ctx = NULL;
    int rc = p->source_vt->open(p->source, &ctx, err);
    if (rc == FERRY_OK) rc = p->source_vt->discover(ctx, r, out, err);
    if (ctx) p->source_vt->close(ctx);
    return rc;
}

int ferry__verify_repair(const struct ferry_pipeline_spec *p, const struct ferry_resource_spec *r,
                         struct ferry_vside *src, const struct ferry_vfix *fix, int64_t n_fix,
                         int64_t *repaired, struct ferry_error *err)
{
    *repaired = 0;
    if (n_fix == 0) return FERRY_OK;
    if (src->ops->fetch == NULL)
        return ferry_error_set(err, FERRY_EUNSUPPORTED, "verify",
                               "verify --repair: the %s source cannot fetch rows by key",
                               p->source_type);
    bool deletes = false;
    for (int64_t i = 0; i < n_fix; i++)
        deletes |= fix[i].delete_;
    enum ferry_write_mode mode = deletes ? FERRY_WRITE_MERGE : FERRY_WRITE_UPSERT;

    struct ferry_schema *in = NULL, *outs = NULL;
    struct ferry_transform_chain *chain = NULL;
    struct ferry_row_writer *rw = NULL;
    struct sink_batch sb = {NULL};
    struct ferry_batch *tb = NULL;
    void *sink = NULL;
    bool begun = false;
    int rc = discover(p, r, &in, err);
    if (rc == FERRY_OK) rc = ferry_transforms_compile(p, r->table, in, &chain, &outs, err);
    if (rc == FERRY_OK) rc = p->sink_vt->open(p->sink, &sink, err);
    if (rc == FERRY_OK) {
        struct ferry_sink_caps caps;
        memset(&caps, 0, sizeof caps);
        p->sink_vt->capabilities(sink, mode, &caps);
        if (!(caps.write_modes & (1u << mode)) || (deletes && !caps.deletes))
            rc = ferry_error_set(err, FERRY_EPOLICY, "verify",
                                 "verify --repair: the %s sink cannot %s (repair re-copies "
                                 "differing keys with upserts and deletes extra ones)",
                                 p->sink_type, deletes ? "delete rows (merge)" : "upsert rows");
    }
    if (rc == FERRY_OK) {
        struct ferry_rw_limits lim = {INT64_C(1) << 40, INT64_C(1) << 40, 0};
        rw = ferry__rw_new(in, r->table, lim, collect, &sb);
        if (rw == NULL) rc = oom(err);
    }
    if (rc == FERRY_OK && src->ops->fetch_only) {
        const struct ferry_vkey **keys = ferry_malloc(sizeof *keys * (size_t)n_fix);
        int64_t n_keys = 0;
        if (keys == NULL) rc = ferry_error_set(err, FERRY_ENOMEM, "verify", "out of memory");
        for (int64_t i = 0; i < n_fix && keys; i++)
            if (!fix[i].delete_) keys[n_keys++] = &fix[i].key;
        if (keys) rc = src->ops->fetch_only(src, keys, n_keys, err);
        ferry_free(keys);
    }
    for (int64_t i = 0; i < n_fix && rc == FERRY_OK; i++) {
        bool found = false;
        if (!fix[i].delete_) rc = src->ops->fetch(src, &fix[i].key, in, rw, &found, err);
        /* a key the source no longer holds is deleted from the destination too */
        if (rc == FERRY_OK && !found && !deletes)
            rc = ferry_error_set(err, FERRY_ECONFLICT, "verify",
                                 "verify --repair: a key vanished from the source during the "
                                 "repair; run verify again");
        if (rc == FERRY_OK && !found) rc = put_delete(rw, in, &fix[i], err);
    }
    if (rc == FERRY_OK) rc = ferry_rw_flush(rw, false, err);
    if (rc == FERRY_OK && sb.b == NULL)
        rc = ferry_error_set(err, FERRY_EINVAL, "verify", "verify --repair: no rows");
    if (rc == FERRY_OK) {
        ferry_transforms_set_run(chain, 0);
        if (chain) {
            rc = ferry_transforms_apply(chain, sb.b, &tb, err);
            sb.b = NULL;
        } else {
            tb = sb.b;
            sb.b = NULL;
        }
    }
    struct ferry_target target = {0,    r->table, ferry_resource_target(r),
                                  outs, mode,     FERRY_READ_FULL, p->schema_changes, NULL};
    if (rc == FERRY_OK) rc = p->sink_vt->prepare(sink, &target, err);
    if (rc == FERRY_OK) {
        char name[300];
        snprintf(name, sizeof name, "%s@verify-repair", p->name);
        struct ferry_session_info si = {name, p->version, 0, 1, false};
        rc = p->sink_vt->begin(sink, &si, err);
        begun = rc == FERRY_OK;
    }
    if (rc == FERRY_OK) {
        struct ferry_receipt rec;
        memset(&rec, 0, sizeof rec);
        tb->digest = ferry_batch_digest(tb);
        rc = p->sink_vt->apply(sink, &target, tb, &rec, err);
        if (rc == FERRY_OK && rec.write_crc != tb->digest)
            rc = ferry_error_set(err, FERRY_EINTEGRITY, "verify",
                                 "verify --repair: the sink's digest %08x differs from the "
                                 "batch's %08x; nothing committed",
                                 rec.write_crc, tb->digest);
        if (rc == FERRY_OK) *repaired = tb->length;
    }
    if (rc == FERRY_OK)
        rc = p->sink_vt->commit(sink, err);
    else if (begun)
        p->sink_vt->abort(sink);
    if (sink) p->sink_vt->close(sink);
    ferry_batch_unref(tb);
    ferry_batch_unref(sb.b);
    ferry__rw_free(rw);
    ferry_transforms_free(chain);
    ferry_schema_unref(in);
    ferry_schema_unref(outs);
    if (rc != FERRY_OK) *repaired = 0;
    return rc;
}
