/* pipeline/commit_group.c - one destination transaction for the cdc streams of one source log
 * (contract in commit_group.h). Calls the sink's group_begin/apply/group_commit/group_abort,
 * always under the group's lock. Called by flow.c (apply, arrive, finish), by the row writer's
 * group hook (enter: a source joined the shared session) and by runner/schedule.c. */
#include <stdio.h>
#include <string.h>
#include "pipeline/commit_group.h"
#include "ferry/core.h"

struct ferry_commit_member {
    struct ferry_commit_group *g;
    char *who;
    bool counted, waiting, finishing, done;
    struct ferry_commit_member *next;
};

struct ferry_commit_group {
    const struct ferry_sink_vtable *vt;
    void *ctx;
    pthread_mutex_t *lock;
    pthread_cond_t cv;
    struct ferry_commit_member *members;
    int counted, waiting;
    bool open; /* the destination transaction */
    long gen, commits;
    int broken; /* FERRY_OK, or the code every later call fails with */
    struct ferry_error err;
};

struct ferry_commit_group *ferry_commit_group_new(const struct ferry_sink_vtable *vt,
                                                  void *sink_ctx, pthread_mutex_t *lock)
{
    struct ferry_commit_group *g = ferry_calloc(1, sizeof *g);
    if (g == NULL) return NULL;
    g->vt = vt;
    g->ctx = sink_ctx;
    g->lock = lock;
    pthread_cond_init(&g->cv, NULL);
    ferry_error_clear(&g->err);
    return g;
}

void ferry_commit_group_free(struct ferry_commit_group *g)
{
    if (g == NULL) return;
    if (g->open) {
        ferry_log(FERRY_LOG_WARN, "commit group: a destination transaction left open, rolled back");
        g->vt->group_abort(g->ctx);
    }
    while (g->members != NULL) {
        struct ferry_commit_member *m = g->members;
        g->members = m->next;
        ferry_free(m->who);
        ferry_free(m);
    }
    pthread_cond_destroy(&g->cv);
    ferry_free(g);
}

struct ferry_commit_member *ferry_commit_group_member(struct ferry_commit_group *g,
                                                      const char *who)
{
    struct ferry_commit_member *m = ferry_calloc(1, sizeof *m);
    if (m == NULL) return NULL;
    m->who = ferry_strdup(who ? who : "");
    if (m->who == NULL) {
        ferry_free(m);
        return NULL;
    }
    m->g = g;
    pthread_mutex_lock(g->lock);
    m->next = g->members;
    g->members = m;
    pthread_mutex_unlock(g->lock);
    return m;
}

/* lock held */
static void count_in(struct ferry_commit_member *m)
{
    if (m->counted || m->done) return;
    m->counted = true;
    m->g->counted++;
}

void ferry_commit_group_enter(void *member)
{
    struct ferry_commit_member *m = member;
    pthread_mutex_lock(m->g->lock);
    count_in(m);
    pthread_mutex_unlock(m->g->lock);
}

/* lock held: the open transaction is rolled back; every later call fails with code. */
static void break_group(struct ferry_commit_group *g, int code, const char *who, const char *why)
{
    if (g->broken != FERRY_OK) return;
    g->broken = code;
    ferry_error_set(&g->err, code, "pipeline",
                    "commit group: resource %s stopped (%s): the changes every table of its "
                    "source log applied since the last group commit were rolled back",
                    who, why && why[0] ? why : ferry_code_name(code));
    if (g->open) g->vt->group_abort(g->ctx);
    g->open = false;
    pthread_cond_broadcast(&g->cv);
}

static int failure(const struct ferry_commit_group *g, struct ferry_error *err)
{
    if (err != NULL) *err = g->err;
    return g->broken;
}

/* lock held: commits when every counted member waits (at a cut or finishing). */
static void resolve(struct ferry_commit_group *g)
{
    if (g->waiting == 0 || g->waiting < g->counted || g->broken != FERRY_OK) return;
    if (g->open) {
        struct ferry_error e;
        ferry_error_clear(&e);
        int rc = g->vt->group_commit(g->ctx, &e);
        g->open = false;
        if (rc != FERRY_OK) {
            g->broken = rc;
            g->err = e;
            ferry_error_prefix(&g->err, "commit group");
        } else {
            g->commits++;
        }
    }
    for (struct ferry_commit_member *m = g->members; m != NULL; m = m->next) {
        if (!m->waiting) continue;
        m->waiting = false;
        if (m->finishing) {
            m->counted = false;
            m->done = true;
            g->counted--;
        }
    }
    g->waiting = 0;
    g->gen++;
    pthread_cond_broadcast(&g->cv);
}

/* lock held: m waits until the next resolution. */
static int wait_resolved(struct ferry_commit_member *m, struct ferry_error *err)
{
    struct ferry_commit_group *g = m->g;
    long gen = g->gen;
    m->waiting = true;
    g->waiting++;
    resolve(g);
    while (g->gen == gen && g->broken == FERRY_OK)
        pthread_cond_wait(&g->cv, g->lock);
    return g->broken != FERRY_OK ? failure(g, err) : FERRY_OK;
}

int ferry_commit_group_apply(struct ferry_commit_member *m, const struct ferry_target *target,
                             struct ferry_batch *b, struct ferry_receipt *receipt,
                             struct ferry_error *err)
{
    struct ferry_commit_group *g = m->g;
    pthread_mutex_lock(g->lock);
    int rc = g->broken;
    if (rc != FERRY_OK) {
        failure(g, err);
    } else {
        count_in(m);
        if (!g->open) rc = g->vt->group_begin(g->ctx, err);
        if (rc == FERRY_OK) {
            g->open = true;
            rc = g->vt->apply(g->ctx, target, b, receipt, err);
        }
        /* the transaction holds every member's applies: one failure spoils all of them */
        if (rc != FERRY_OK) break_group(g, rc, m->who, err->message);
    }
    pthread_mutex_unlock(g->lock);
    return rc;
}

int ferry_commit_group_arrive(struct ferry_commit_member *m, struct ferry_error *err)
{
    pthread_mutex_lock(m->g->lock);
    int rc = m->g->broken != FERRY_OK ? failure(m->g, err) : wait_resolved(m, err);
    pthread_mutex_unlock(m->g->lock);
    return rc;
}

int ferry_commit_group_finish(struct ferry_commit_member *m, int rc, const char *why,
                              struct ferry_error *err)
{
    struct ferry_commit_group *g = m->g;
    pthread_mutex_lock(g->lock);
    if (!m->counted) {
        m->done = true;
    } else if (rc != FERRY_OK) {
        break_group(g, rc, m->who, why);
        m->counted = false;
        m->done = true;
        g->counted--;
    } else if (g->broken != FERRY_OK) {
        rc = failure(g, err);
    } else {
        m->finishing = true;
        rc = wait_resolved(m, err);
    }
    pthread_mutex_unlock(g->lock);
    return rc;
}

long ferry_commit_group_commits(const struct ferry_commit_group *g)
{
    return g->commits;
}
