/* runner/shard.c - the small pieces of distributed runs that need no connector: which
 * resources may be spread across workers, the task token carried in batch.written payloads,
 * task summaries, lease owner names, and a forwarding bus that tags a shard worker's events
 * (publish and publish_n).
 *
 * Calls the bus only through the inner instance it wraps. Called by runner.c (coordinator
 * and shard modes), cli/cmd_worker.c (owner names), the tracker (payload token) and
 * tests/unit/test_pull.c. */
#include <inttypes.h>
#include <jansson.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "bus/bus.h"
#include "ferry/core.h"
#include "runner/runner.h"
#include "store/store.h"

int ferry__shard_distributable(const char *resource, const char *mode, const char *write,
                               bool per_apply, bool replace_commits_once, struct ferry_error *err)
{
    /* Shards of one snapshot are independent key ranges; incremental and cdc resources
     * carry one moving position per route that only one process may advance. */
    if (strcmp(mode, "full") != 0)
        return ferry_error_set(err, FERRY_EPOLICY, "runner",
                               "resource %s: distribute: true needs mode full (it is %s): only "
                               "the shards of a full snapshot can be spread across workers",
                               resource, mode);
    /* replace publishes the whole table in one commit of one session. */
    (void)replace_commits_once; /* what replace does; append and upsert never commit once */
    if (strcmp(write, "replace") == 0)
        return ferry_error_set(err, FERRY_EPOLICY, "runner",
                               "resource %s: distribute: true cannot write %s: the table is "
                               "published by one session's commit; use append or upsert",
                               resource, write);
    /* Each worker has its own sink session: what one of them applied must be durable
     * without a commit that another process would have to make. */
    if (!per_apply)
        return ferry_error_set(err, FERRY_EPOLICY, "runner",
                               "resource %s: distribute: true needs a sink whose writes are "
                               "durable when applied (durability per_apply); this sink makes "
                               "them durable only at its commit",
                               resource);
    return FERRY_OK;
}

char *ferry__shard_tag_payload(const char *payload, int64_t token)
{
    if (payload == NULL) payload = "{}";
    while (*payload == ' ' || *payload == '\n' || *payload == '\t')
        payload++;
    if (*payload != '{') return NULL;
    const char *rest = payload + 1;
    while (*rest == ' ' || *rest == '\n' || *rest == '\t')
        rest++;
    bool empty = *rest == '}';
    size_t len = strlen(rest) + 48;
    char *out = ferry_malloc(len);
    if (out == NULL) return NULL;
    snprintf(out, len, "{\"token\":%" PRId64 "%s%s", token, empty ? "" : ",", rest);
    return out;
}

int64_t ferry__shard_payload_token(const char *payload)
{
    json_t *j = payload ? json_loads(payload, 0, NULL) : NULL;
    json_t *t = j ? json_object_get(j, "token") : NULL;
    int64_t v = json_is_integer(t) ? (int64_t)json_integer_value(t) : 0;
    json_decref(j);
    return v > 0 ? v : 0;
}

void ferry__shard_tasks_summary(const struct ferry_shard_task *v, int n, int *done, int *leased,
                                bool *all_done)
{
    int d = 0, l = 0;
    for (int i = 0; i < n; i++) {
        if (strcmp(v[i].state, "done") == 0)
            d++;
        else if (strcmp(v[i].state, "leased") == 0)
            l++;
    }
    if (done) *done = d;
    if (leased) *leased = l;
    /* No task at all is not "all done": the coordinator creates them before waiting. */
    if (all_done) *all_done = n > 0 && d == n;
}

void ferry__lease_owner(const char *name, char *out, size_t len)
{
    if (name != NULL && name[0] != '\0') {
        snprintf(out, len, "%s", name);
        return;
    }
    char host[64];
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    snprintf(out, len, "%s:%d", host, (int)getpid());
}

/* ---- the tagging bus ---- */

#define TAG_FEW 8 /* events of one publish_n whose payloads are kept on the stack */

struct tag_bus {
    struct ferry_bus bus;
    struct ferry_bus *inner;
    _Atomic int64_t token;
    _Atomic int64_t last_seq;
};

/* The highest seq seen so far moves up to seq. */
static void note_seq(struct tag_bus *t, int64_t seq)
{
    int64_t seen = atomic_load(&t->last_seq);
    while (seq > seen && !atomic_compare_exchange_weak(&t->last_seq, &seen, seq))
        ;
}

/* evs[0..n) published with the task token in each batch.written payload: the tagged texts
 * replace the payloads for the call, the caller's are put back afterwards. */
static int tag_publish_n(struct ferry_bus *b, struct ferry_event *evs, int n,
                         struct ferry_error *err)
{
    struct tag_bus *t = b->ctx;
    int64_t token = atomic_load(&t->token);
    char *few[TAG_FEW];
    char **orig = n <= TAG_FEW ? few : ferry_malloc((size_t)n * sizeof *orig);
    if (orig == NULL)
        return ferry_error_set(err, FERRY_ENOMEM, "runner", "run %" PRId64 ": out of memory",
                               evs[0].run_id);
    int rc = FERRY_OK, tagged = 0;
    for (int i = 0; i < n; i++) {
        orig[i] = evs[i].payload;
        if (token <= 0 || strcmp(evs[i].type, FERRY_EV_BATCH_WRITTEN) != 0) continue;
        char *p = ferry__shard_tag_payload(evs[i].payload, token);
        if (p == NULL) {
            rc = ferry_error_set(err, FERRY_ENOMEM, "runner",
                                 "run %" PRId64 ": tagging a batch.written event of %s",
                                 evs[i].run_id, evs[i].resource);
            break;
        }
        evs[i].payload = p;
        tagged = i + 1;
    }
    if (rc == FERRY_OK)
        rc = n == 1 ? ferry_bus_publish(t->inner, evs, err)
                    : ferry_bus_publish_n(t->inner, evs, n, err);
    for (int i = 0; i < tagged; i++) {
        if (evs[i].payload != orig[i]) ferry_free(evs[i].payload);
        evs[i].payload = orig[i];
    }
    if (orig != few) ferry_free(orig);
    for (int i = 0; i < n; i++)
        note_seq(t, evs[i].seq);
    return rc;
}

static int tag_publish(struct ferry_bus *b, struct ferry_event *ev, struct ferry_error *err)
{
    return tag_publish_n(b, ev, 1, err);
}

static int tag_fetch(struct ferry_bus *b, int64_t after, int64_t run_id, int max, int timeout_ms,
                     struct ferry_event **evs, int *n, struct ferry_error *err)
{
    struct tag_bus *t = b->ctx;
    return ferry_bus_fetch(t->inner, after, run_id, max, timeout_ms, evs, n, err);
}

static void tag_wake(struct ferry_bus *b)
{
    struct tag_bus *t = b->ctx;
    if (t->inner->vt->wake) t->inner->vt->wake(t->inner);
}

static void tag_close(struct ferry_bus *b)
{
    ferry_free(b->ctx);
}

static const struct ferry_bus_vtable tag_vt = {.name = "shard",
                                               .publish = tag_publish,
                                               .publish_n = tag_publish_n,
                                               .fetch = tag_fetch,
                                               .wake = tag_wake,
                                               .close = tag_close};

int ferry__shard_bus_open(struct ferry_bus *inner, struct ferry_bus **out, struct ferry_error *err)
{
    *out = NULL;
    struct tag_bus *t = ferry_calloc(1, sizeof *t);
    if (t == NULL) return ferry_error_set(err, FERRY_ENOMEM, "runner", "out of memory");
    t->inner = inner;
    t->bus.vt = &tag_vt;
    t->bus.ctx = t;
    memcpy(t->bus.mark_tag, inner->mark_tag, sizeof t->bus.mark_tag);
    *out = &t->bus;
    return FERRY_OK;
}

void ferry__shard_bus_set_token(struct ferry_bus *b, int64_t token)
{
    struct tag_bus *t = b->ctx;
    atomic_store(&t->token, token);
}

int64_t ferry__shard_bus_last_seq(struct ferry_bus *b)
{
    struct tag_bus *t = b->ctx;
    return atomic_load(&t->last_seq);
}
