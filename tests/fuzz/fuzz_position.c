/* tests/fuzz/fuzz_position.c - cursor and checkpoint JSON as the sources read it back from the
 * state store or a destination: route checkpoints (plan's lower bound), resume positions
 * (decoded by the codec, as the flow hands them to extract) and frozen plans, for the sample and
 * the sqlite sources (the postgres source decodes the same positions with the same codec,
 * checkpoint/position.h, but needs a server; its plan text is built, not parsed, from these). The
 * first byte picks the call, the second the shard. Extraction is stopped after 5000 rows (a fuzzed
 * plan may promise billions). */
#include <sqlite3.h>
#include <stdlib.h>
#include <unistd.h>
#include "batch/builder.h"
#include "checkpoint/position.h"
#include "ferry/config.h"
#include "ferry/connector.h"
#include "ferry/core.h"
#include "fuzz.h"

struct src {
    const struct ferry_source_vtable *vt;
    void *ctx;
    struct ferry_cfg *cfg;
    struct ferry_resource_spec full, incr;
    struct ferry_schema *sc_full, *sc_incr;
    char *plan_full, *plan_incr;
};

static struct src sample, lite;
static char *cursor[] = {"updated_at", NULL};
static int ready = -1;

static int setup_src(struct src *s, const char *type, const char *yaml, const char *table)
{
    struct ferry_error err;
    s->vt = ferry_source_find(type);
    if (s->vt == NULL || ferry_cfg_parse_string(yaml, strlen(yaml), "fuzz", &s->cfg, &err) != 0 ||
        s->vt->open(s->cfg, &s->ctx, &err) != 0)
        return -1;
    s->full.table = s->incr.table = (char *)table;
    s->full.mode = FERRY_READ_FULL;
    s->incr.mode = FERRY_READ_INCREMENTAL;
    s->incr.cursor = cursor;
    s->incr.n_cursor = 1;
    if (s->vt->discover(s->ctx, &s->full, &s->sc_full, &err) != 0 ||
        s->vt->discover(s->ctx, &s->incr, &s->sc_incr, &err) != 0 ||
        s->vt->plan(s->ctx, &s->full, s->sc_full, NULL, &s->plan_full, &err) != 0 ||
        s->vt->plan(s->ctx, &s->incr, s->sc_incr, NULL, &s->plan_incr, &err) != 0) {
        fprintf(stderr, "fuzz_position: %s source setup: %s\n", type, err.message);
        return -1;
    }
    return 0;
}

static int setup(void)
{
    char path[64], yaml[128];
    snprintf(path, sizeof path, "/tmp/ferry-fuzz-position-%d.db", (int)getpid());
    unlink(path);
    sqlite3 *db = NULL;
    if (sqlite3_open(path, &db) != SQLITE_OK) return -1;
    int rc = sqlite3_exec(db,
                          "CREATE TABLE e (id INTEGER PRIMARY KEY, updated_at TEXT NOT NULL, v TEXT);"
                          "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 30) "
                          "INSERT INTO e SELECT i, '2024-01-0' || (1 + i % 4) || ' 12:00:00', 'v' || i FROM n;",
                          NULL, NULL, NULL);
    sqlite3_close(db);
    if (rc != SQLITE_OK) return -1;
    snprintf(yaml, sizeof yaml, "path: '%s'\nshards: 2\n", path);
    if (setup_src(&lite, "sqlite", yaml, "e") != 0) return -1;
    unlink(path); /* the open handle keeps it */
    return setup_src(&sample, "sample", "rows: 40\nclock: 1\nshards: 2\n", "orders");
}

static int64_t emitted;

static int count(void *ctx, struct ferry_batch *b, struct ferry_error *err)
{
    (void)ctx;
    emitted += b->length;
    ferry_batch_unref(b);
    if (emitted > 5000) return ferry_error_set(err, FERRY_ECANCELED, "fuzz", "enough rows");
    return FERRY_OK;
}

static void extract(struct src *s, const struct ferry_resource_spec *spec, struct ferry_schema *sc,
                    const char *plan, int shard, const char *resume)
{
    struct ferry_error err;
    struct ferry_rw_limits lim = {.rows = 16, .bytes = 1 << 20, .max_value_bytes = 1 << 20};
    struct ferry_row_writer *rw = ferry__rw_new(sc, spec->table, lim, count, NULL);
    if (rw == NULL) return;
    emitted = 0;
    ferry_rw_set_shard(rw, shard);
    /* decoded as the flow does; refused input is fine, only a crash or a leak is a finding */
    struct ferry_position pos;
    if (resume == NULL || ferry_position_decode(resume, strlen(resume), &pos, &err) == FERRY_OK) {
        int rc = s->vt->extract(s->ctx, spec, sc, plan, shard, resume ? &pos : NULL, rw, &err);
        if (rc == FERRY_OK) rc = ferry_rw_flush(rw, true, &err);
        if (resume) ferry_position_clear(&pos);
    }
    ferry__rw_free(rw);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (ready < 0) ready = setup();
    if (ready != 0 || size < 2) return 0;
    int op = data[0] % 7, shard = data[1] % 3;
    char *text = malloc(size - 1);
    if (text == NULL) return 0;
    memcpy(text, data + 2, size - 2);
    text[size - 2] = '\0';
    struct src *s = op < 3 ? &sample : &lite;
    struct ferry_error err;
    char *plan = NULL;
    switch (op) {
    case 0: /* a route checkpoint as the incremental plan's lower bound */
    case 3:
        if (s->vt->plan(s->ctx, &s->incr, s->sc_incr, text, &plan, &err) == FERRY_OK)
            extract(s, &s->incr, s->sc_incr, plan, 0, NULL);
        ferry_free(plan);
        break;
    case 1: /* a resume position of a full read */
    case 4:
        extract(s, &s->full, s->sc_full, s->plan_full, shard, text);
        break;
    case 2: /* a frozen plan read back from the store */
    case 5:
        extract(s, &s->full, s->sc_full, text, shard, NULL);
        break;
    case 6: /* a resume position of an incremental read */
        extract(s, &s->incr, s->sc_incr, s->plan_incr, 0, text);
        break;
    }
    free(text);
    return 0;
}
