/* embed/embed.c - ferry as a library: the public embedding API (include/ferry/ferry.h,
 * docs/embedding.md).
 *
 * Owns struct ferry_job (a copy of the pipeline text, its name and version) and the
 * translation between the public types and the engine's. A run is one ferry_runner_run with
 * the text, the caller's state file, an event observer (the runner wraps its bus with it),
 * the job's stop flag as the run's own (ferry_run_options.stop: a pause or cancel of this
 * job reaches this run and no other) and, for a `callback` sink, a binding of the caller's
 * on_batch handed to that run's sink (ferry_run_options.sink_host). Runs of different jobs
 * may go at once, on different threads; one job runs once at a time (`active` refuses a
 * second). After a run it reads the run's per-column conversion counts (on_unrepresentable)
 * back from the state file, as `ferry show` does, for ferry_job_converted. Calls the runner,
 * the pipeline loader, the state store and the callback sink's binding type.
 * Called by embedding programs only. */
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "connectors/callback/callback.h"
#include "ferry/core.h"
#include "ferry/ferry.h"
#include "ferry/pipeline.h"
#include "runner/runner.h"
#include "store/store.h"

#ifndef FERRY_VERSION_STRING
#define FERRY_VERSION_STRING "0.0.0"
#endif

struct ferry_job {
    char *text;
    size_t len;
    char *name;     /* for messages */
    char *pipeline; /* the pipeline's `name:` */
    char version[65];
    /* The stop flag of the job's run (ferry_run_options.stop): FERRY_EPAUSED or
     * FERRY_ECANCELED was asked (cleared when a run ends), 0: none. */
    atomic_int stop;
    atomic_flag active; /* set while ferry_job_run runs this job */
    /* During a run: the caller's callbacks and the locks that serialise each kind. */
    const struct ferry_job_options *opts;
    pthread_mutex_t event_lock, batch_lock;
    /* The last run's converted columns (ferry_job_converted); strings owned here. */
    struct ferry_converted *conv;
    int n_conv;
};

static int set_status(struct ferry_status *st, const struct ferry_error *e)
{
    if (st == NULL) return e->code;
    st->code = e->code;
    snprintf(st->code_name, sizeof st->code_name, "%s", e->code ? ferry_code_name(e->code) : "ok");
    snprintf(st->message, sizeof st->message, "%s", e->code ? e->message : "");
    return e->code;
}

static int fail(struct ferry_status *st, int code, const char *fmt, const char *arg)
{
    struct ferry_error e;
    ferry_error_set(&e, code, "embed", fmt, arg);
    return set_status(st, &e);
}

const char *ferry_library_version(void)
{
    return FERRY_VERSION_STRING;
}

static void job_strings_free(struct ferry_job *job)
{
    ferry_free(job->text);
    ferry_free(job->name);
    ferry_free(job->pipeline);
}

/* A job over a copy of the text (NULL when out of memory or a lock cannot be made). */
static struct ferry_job *job_new(const char *yaml, size_t len, const char *name,
                                 const struct ferry_pipeline_spec *p)
{
    struct ferry_job *job = ferry_calloc(1, sizeof *job);
    if (job == NULL) return NULL;
    job->text = ferry_strndup(yaml, len);
    job->len = len;
    job->name = ferry_strdup(name);
    job->pipeline = ferry_strdup(p->name);
    memcpy(job->version, p->version, sizeof job->version);
    atomic_init(&job->stop, 0);
    atomic_flag_clear(&job->active);
    bool ok = job->text && job->name && job->pipeline;
    if (ok && pthread_mutex_init(&job->event_lock, NULL) != 0) ok = false;
    if (ok && pthread_mutex_init(&job->batch_lock, NULL) != 0) {
        pthread_mutex_destroy(&job->event_lock);
        ok = false;
    }
    if (ok) return job;
    job_strings_free(job);
    ferry_free(job);
    return NULL;
}

int ferry_job_load(const char *yaml, size_t len, const char *name, struct ferry_job **out,
                   struct ferry_status *status)
{
    struct ferry_error e;
    ferry_error_clear(&e);
    if (out) *out = NULL;
    if (yaml == NULL || out == NULL)
        return fail(status, FERRY_EINVAL, "ferry_job_load: %s is NULL", yaml ? "out" : "yaml");
    if (name == NULL) name = "pipeline";
    struct ferry_pipeline_spec *p = NULL;
    int rc = ferry_pipeline_load_string(yaml, len, name, &p, &e);
    if (rc != FERRY_OK) return set_status(status, &e);
    struct ferry_job *job = job_new(yaml, len, name, p);
    ferry_pipeline_free(p);
    if (job == NULL)
        return fail(status, FERRY_ENOMEM, "ferry_job_load: out of memory loading %s", name);
    *out = job;
    return set_status(status, &e);
}

const char *ferry_job_name(const struct ferry_job *job)
{
    return job ? job->pipeline : NULL;
}

const char *ferry_job_version(const struct ferry_job *job)
{
    return job ? job->version : NULL;
}

/* A cancel replaces a pause, never the other way round. */
static void request_stop(struct ferry_job *job, int code)
{
    if (job == NULL) return;
    int expected = 0;
    if (code == FERRY_ECANCELED)
        atomic_store(&job->stop, code);
    else
        atomic_compare_exchange_strong(&job->stop, &expected, code);
}

void ferry_job_cancel(struct ferry_job *job)
{
    request_stop(job, FERRY_ECANCELED);
}

void ferry_job_pause(struct ferry_job *job)
{
    request_stop(job, FERRY_EPAUSED);
}

static void conv_clear(struct ferry_job *job)
{
    for (int i = 0; i < job->n_conv; i++) {
        ferry_free((char *)job->conv[i].resource);
        ferry_free((char *)job->conv[i].column);
    }
    ferry_free(job->conv);
    job->conv = NULL;
    job->n_conv = 0;
}

void ferry_job_free(struct ferry_job *job)
{
    if (job == NULL) return;
    conv_clear(job);
    pthread_mutex_destroy(&job->event_lock);
    pthread_mutex_destroy(&job->batch_lock);
    job_strings_free(job);
    ferry_free(job);
}

/* The runner's observer: hands the event to the caller, one at a time. */
static void on_engine_event(void *ctx, const struct ferry_event *ev)
{
    struct ferry_job *job = ctx;
    if (job->opts->on_event == NULL) return;
    struct ferry_event_info info = {ev->seq,
                                    ev->time_us,
                                    ev->run_id,
                                    ev->attempt,
                                    ev->resource,
                                    ev->type,
                                    ev->payload ? ev->payload : "{}"};
    pthread_mutex_lock(&job->event_lock);
    job->opts->on_event(job->opts->ctx, &info);
    pthread_mutex_unlock(&job->event_lock);
}

static int on_engine_batch(void *ctx, const struct ferry_callback_batch *b,
                           struct ArrowSchema *schema, struct ArrowArray *array)
{
    struct ferry_job *job = ctx;
    const struct ferry_job_options *o = job->opts;
    struct ferry_batch_info info = {b->resource, b->table, b->seq, b->rows};
    /* the sink serialises its own calls; this, the lanes' sink instances of one run */
    pthread_mutex_lock(&job->batch_lock);
    int rc = o->on_batch(o->ctx, &info, schema, array);
    pthread_mutex_unlock(&job->batch_lock);
    return rc;
}

static void fill_result(struct ferry_job_result *res, const struct ferry_run_result *rr)
{
    if (res == NULL) return;
    memset(res, 0, sizeof *res);
    res->run_id = rr->run_id;
    res->attempt = rr->attempt;
    res->resumed = rr->resumed;
    snprintf(res->state, sizeof res->state, "%s", rr->state ? rr->state : "failed");
    res->rows = rr->rows;
    res->bytes = rr->bytes;
    res->batches = rr->batches;
    res->seconds = rr->seconds;
}

int ferry_job_converted(const struct ferry_job *job, const struct ferry_converted **out)
{
    if (out) *out = job && job->n_conv > 0 ? job->conv : NULL;
    return job ? job->n_conv : 0;
}

static int conv_cmp(const void *a, const void *b)
{
    const struct ferry_converted *x = a, *y = b;
    int c = strcmp(x->resource, y->resource);
    return c ? c : strcmp(x->column, y->column);
}

/* Appends the columns of one resource's {"COL":{"null":N,"clamp":M}} to job->conv. */
static int conv_add(struct ferry_job *job, const char *resource, const char *text)
{
    json_t *o = json_loads(text, 0, NULL);
    int rc = json_is_object(o) ? FERRY_OK : FERRY_EINVAL;
    const char *col;
    json_t *v;
    json_object_foreach(o, col, v)
    {
        if (rc != FERRY_OK) break;
        struct ferry_converted *grown =
            ferry_realloc(job->conv, (size_t)(job->n_conv + 1) * sizeof *grown);
        if (grown == NULL) {
            rc = FERRY_ENOMEM;
            break;
        }
        job->conv = grown;
        struct ferry_converted *c = &job->conv[job->n_conv];
        c->to_null = json_integer_value(json_object_get(v, "null"));
        c->clamped = json_integer_value(json_object_get(v, "clamp"));
        c->resource = ferry_strdup(resource);
        c->column = ferry_strdup(col);
        if (c->resource == NULL || c->column == NULL) {
            ferry_free((char *)c->resource);
            ferry_free((char *)c->column);
            rc = FERRY_ENOMEM;
            break;
        }
        job->n_conv++;
    }
    json_decref(o);
    return rc;
}

/* The run's conversions per column, from the state file (the tracker folded every attempt's
 * batch.written into it). */
static int conv_load(struct ferry_job *job, const char *state_path, int64_t run_id,
                     struct ferry_error *err)
{
    conv_clear(job);
    struct ferry_store *st = NULL;
    struct ferry_resource_state *rs = NULL;
    int n = 0;
    int rc = ferry_store_open(state_path, &st, err);
    if (rc == FERRY_OK) rc = ferry_store_resource_list(st, run_id, &rs, &n, err);
    for (int i = 0; rc == FERRY_OK && i < n; i++) {
        char *text = NULL;
        rc = ferry_store_resource_converted_get(st, run_id, rs[i].resource, &text, err);
        if (rc == FERRY_OK && text != NULL) rc = conv_add(job, rs[i].resource, text);
        if (rc != FERRY_OK && err && err->code == FERRY_OK)
            ferry_error_set(err, rc, "embed", "run %lld: the converted counts of %s are unreadable",
                            (long long)run_id, rs[i].resource);
        ferry_free(text);
    }
    ferry_free(rs);
    ferry_store_close(st);
    if (job->n_conv > 1) qsort(job->conv, (size_t)job->n_conv, sizeof *job->conv, conv_cmp);
    return rc;
}

/* The checks before anything runs: options, the sink type against on_batch. */
static int check_options(const struct ferry_job *job, const struct ferry_job_options *o,
                         struct ferry_error *err)
{
    if (job == NULL || o == NULL)
        return ferry_error_set(err, FERRY_EINVAL, "embed", "ferry_job_run: %s is NULL",
                               job ? "opts" : "job");
    if (o->state_path == NULL || o->state_path[0] == '\0')
        return ferry_error_set(err, FERRY_ECONFIG, "embed",
                               "ferry_job_run: options.state_path is required (the state file "
                               "that holds the runs and checkpoints of pipeline %s)",
                               job->pipeline);
    struct ferry_pipeline_spec *p = NULL;
    int rc = ferry_pipeline_load_string(job->text, job->len, job->name, &p, err);
    if (rc != FERRY_OK) return rc;
    bool callback = strcmp(p->sink_type, "callback") == 0;
    if (callback && o->on_batch == NULL)
        rc = ferry_error_set(err, FERRY_ECONFIG, "embed",
                             "pipeline %s: sink type callback needs options.on_batch", p->name);
    else if (!callback && o->on_batch != NULL)
        rc = ferry_error_set(err, FERRY_ECONFIG, "embed",
                             "pipeline %s: options.on_batch is given but the sink is %s, not "
                             "callback: no batch would reach it",
                             p->name, p->sink_type);
    ferry_pipeline_free(p);
    return rc;
}

static int run_bound(struct ferry_job *job, const struct ferry_job_options *o,
                     struct ferry_run_result *rr, struct ferry_error *err)
{
    struct ferry_callback_binding binding = {on_engine_batch, job};
    struct ferry_run_options ro = {
        .state_path = o->state_path,
        .fresh = o->fresh,
        .quiet = true,
        .pipeline_text = job->text,
        .pipeline_len = job->len,
        .pipeline_name = job->name,
        .on_event = on_engine_event,
        .event_ctx = job,
        .stop = &job->stop,
        .sink_host = o->on_batch ? &binding : NULL,
    };
    job->opts = o;
    int stop = atomic_load(&job->stop);
    int rc;
    if (stop != 0)
        rc = ferry_error_set(err, stop, "embed", "pipeline %s: %s before its run started",
                             job->pipeline, stop == FERRY_EPAUSED ? "paused" : "canceled");
    else
        rc = ferry_runner_run(&ro, rr, err);
    job->opts = NULL;
    return rc;
}

/* One run, then its converted counts (ferry_job_converted); *converted: their sum. */
static int run_counted(struct ferry_job *job, const struct ferry_job_options *opts,
                       struct ferry_run_result *rr, int64_t *converted, struct ferry_error *err)
{
    conv_clear(job);
    int rc = run_bound(job, opts, rr, err);
    if (rc == FERRY_ECANCELED) rr->state = "canceled";
    if (rc == FERRY_EPAUSED) rr->state = "paused";
    if (rr->run_id == 0) return rc;
    struct ferry_error ce;
    ferry_error_clear(&ce);
    int crc = conv_load(job, opts->state_path, rr->run_id, &ce);
    for (int i = 0; i < job->n_conv; i++)
        *converted += job->conv[i].to_null + job->conv[i].clamped;
    if (crc != FERRY_OK && rc == FERRY_OK) {
        *err = ce;
        return crc;
    }
    return rc;
}

int ferry_job_run(struct ferry_job *job, const struct ferry_job_options *opts,
                  struct ferry_job_result *res, struct ferry_status *status)
{
    struct ferry_error e;
    ferry_error_clear(&e);
    struct ferry_run_result rr;
    memset(&rr, 0, sizeof rr);
    rr.state = "failed";
    int64_t converted = 0;
    int rc = check_options(job, opts, &e);
    if (rc == FERRY_OK && atomic_flag_test_and_set(&job->active)) {
        rc = ferry_error_set(&e, FERRY_ECONFLICT, "embed",
                             "pipeline %s: this job is running already (on another thread); "
                             "load the text again for a second job",
                             job->pipeline);
    } else if (rc == FERRY_OK) {
        rc = run_counted(job, opts, &rr, &converted, &e);
        atomic_store(&job->stop, 0);
        atomic_flag_clear(&job->active);
    }
    fill_result(res, &rr);
    if (res != NULL) res->converted = converted;
    if (rc == FERRY_OK)
        ferry_error_clear(&e);
    else if (e.code == FERRY_OK)
        e.code = rc; /* no message: the code says it */
    return set_status(status, &e);
}
