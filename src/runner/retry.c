/* runner/retry.c - retries of failed attempts with backoff (runner/retry.h).
 *
 * Wraps ferry_runner_run; the runner itself knows nothing of retries. A failed attempt is
 * retried when ferry_error_is_transient() says so (the layer that made the error marked
 * it: libpq connection errors, HTTP 5xx/429, timeouts, serialization failures) and the
 * policy allows; the next attempt resumes the same run (resume_run_id), so rows read
 * before the last durable checkpoint are not read again. Each retry is announced on the
 * run's events as `run.retry_scheduled` {attempt, retry, max, delay_ms, code, message}.
 * Calls the runner, the pipeline loader, the store and the bus. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "bus/bus.h"
#include "ferry/core.h"
#include "notify/notify.h"
#include "notify/otel.h"
#include "runner/retry.h"
#include "store/store.h"

int64_t ferry_retry_delay_ms(const struct ferry_retry_policy *p, int retry, uint64_t rnd)
{
    int64_t d = p->backoff_ms > 0 ? p->backoff_ms : 1;
    for (int i = 1; i < retry && d < p->max_backoff_ms; i++) d *= 2;
    if (d > p->max_backoff_ms) d = p->max_backoff_ms;
    int64_t half = d / 2;
    return half + (int64_t)(rnd % (uint64_t)(d - half + 1));
}

/* The pipeline: from the file, else from the request saved with the run; NULL when it
 * cannot be loaded (the runner then says why). */
static struct ferry_pipeline_spec *load_spec(const struct ferry_run_options *o, int64_t run_id)
{
    struct ferry_pipeline_spec *p = NULL;
    if (o->pipeline_path) {
        ferry_pipeline_load(o->pipeline_path, &p, NULL);
    } else if (run_id > 0) {
        struct ferry_store *st = NULL;
        struct ferry_run_info info;
        memset(&info, 0, sizeof info);
        if (ferry_store_open(o->state_path, &st, NULL) == FERRY_OK &&
            ferry_store_run_get(st, run_id, &info, NULL) == FERRY_OK && info.request)
            ferry_pipeline_load_string(info.request, strlen(info.request), "run", &p, NULL);
        ferry_run_info_clear(&info);
        ferry_store_close(st);
    }
    return p;
}

static int grace_ms(void)
{
    const char *v = getenv("FERRY_NOTIFY_GRACE_MS");
    int g = v ? (int)strtol(v, NULL, 10) : 5000;
    return g >= 0 && g <= 600000 ? g : 5000;
}

/* A cdc stream that stopped at a source schema change: said on the run's events. */
static void schema_changed(const struct ferry_run_options *o, const struct ferry_run_result *res)
{
    struct ferry_bus *bus = NULL;
    if (ferry_bus_open(o->bus_url, o->state_path, &bus, NULL) != FERRY_OK) return;
    ferry_bus_emit(bus, res->run_id, res->attempt, "", FERRY_EV_SCHEMA_CHANGED,
                   "{\"reason\":\"a cdc stream stopped at a source schema change; the next run "
                   "continues it\"}", NULL);
    ferry_bus_close(bus);
}

static void announce(const struct ferry_run_options *o, int64_t run_id, int attempt, int retry,
                     int max, int64_t delay_ms, const struct ferry_error *e)
{
    if (run_id <= 0) return;
    struct ferry_bus *bus = NULL;
    struct ferry_error be;
    if (ferry_bus_open(o->bus_url, o->state_path, &bus, &be) != FERRY_OK) {
        ferry_log(FERRY_LOG_WARN, "run %" PRId64 ": retry not announced: %s", run_id, be.message);
        return;
    }
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    ferry_buf_printf(&b,
                     "{\"attempt\":%d,\"retry\":%d,\"max\":%d,\"delay_ms\":%" PRId64
                     ",\"retry_at_us\":%" PRId64 ",\"code\":\"%s\",\"reason\":",
                     attempt, retry, max, delay_ms, ferry_now_wall_us() + delay_ms * 1000,
                     ferry_code_name(e->code));
    ferry_buf_json_string(&b, e->message, strlen(e->message));
    ferry_buf_append(&b, "}", 1);
    if (b.data && ferry_bus_emit(bus, run_id, attempt, "", FERRY_EV_RUN_RETRY_SCHEDULED, b.data,
                                 &be) != FERRY_OK)
        ferry_log(FERRY_LOG_WARN, "run %" PRId64 ": retry not announced: %s", run_id, be.message);
    ferry_buf_release(&b);
    ferry_bus_close(bus);
}

/* Sleeps in short slices so that a signal ends the wait. False when stopped. */
static bool wait_ms(int64_t ms, volatile sig_atomic_t *stop)
{
    int64_t end = ferry_now_mono_us() + ms * 1000;
    while (!(stop && *stop)) {
        int64_t left = end - ferry_now_mono_us();
        if (left <= 0) return true;
        if (left > 100000) left = 100000;
        struct timespec ts = {0, (long)left * 1000L};
        nanosleep(&ts, NULL);
    }
    return false;
}

static int run_attempts(struct ferry_run_options *o, const struct ferry_retry_options *ro,
                        const struct ferry_retry_policy *policy, struct ferry_notifier *nt,
                        struct ferry_run_result *res, struct ferry_error *err);

int ferry_runner_run_retrying(struct ferry_run_options *o, const struct ferry_retry_options *ro,
                              struct ferry_run_result *res, struct ferry_error *err)
{
    struct ferry_retry_policy policy = {.max = -1, .backoff_ms = 10000, .max_backoff_ms = 600000};
    struct ferry_pipeline_spec *p = load_spec(o, o->resume_run_id);
    struct ferry_notifier *nt = NULL;
    if (p) {
        policy = p->retries;
        /* notify: targets follow the run's events from this process (notify/notify.h) */
        struct ferry_error ne;
        if (ferry_notifier_start(p, o->state_path, o->bus_url, o->resume_run_id, &nt, &ne) != FERRY_OK)
            ferry_log(FERRY_LOG_WARN, "notify: %s", ne.message);
    }
    ferry_pipeline_free(p);
    int rc = run_attempts(o, ro, &policy, nt, res, err);
    if (rc == FERRY_OK && res->cdc_more) schema_changed(o, res);
    ferry_notifier_set_run(nt, res->run_id);
    ferry_notifier_finish(nt, grace_ms());
    return rc;
}

static int run_attempts(struct ferry_run_options *o, const struct ferry_retry_options *ro,
                        const struct ferry_retry_policy *policy, struct ferry_notifier *nt,
                        struct ferry_run_result *res, struct ferry_error *err)
{
    uint64_t rnd = (uint64_t)ferry_now_mono_us() * 6364136223846793005ULL + (uint64_t)getpid();
    int64_t run_id = o->resume_run_id;
    for (int retry = 1;; retry++) {
        ferry_error_clear(err);
        int rc = ferry_runner_run(o, res, err);
        if (res->run_id > 0) run_id = res->run_id;
        /* traces of this attempt, when an OTLP endpoint is configured (notify/otel.h) */
        struct ferry_error te;
        if (ferry_otel_export_attempt(o->state_path, o->bus_url, res->run_id, res->attempt, &te) != FERRY_OK)
            ferry_log(FERRY_LOG_WARN, "run %" PRId64 ": traces not exported: %s", run_id, te.message);
        ferry_notifier_set_run(nt, run_id);
        if (rc == FERRY_OK || rc == FERRY_EPAUSED || !ferry_error_is_transient(err)) return rc;
        if (o->shard_resource) return rc; /* a shard task: the coordinator's run decides */
        if (ro->on_failed_attempt) ro->on_failed_attempt(ro->ctx, res, err);
        int max = ro->override_max >= 0 ? ro->override_max
                  : policy->max >= 0    ? policy->max
                                        : ro->default_max;
        if (retry > max || (ro->stop && *ro->stop)) return rc;
        rnd ^= rnd << 13, rnd ^= rnd >> 7, rnd ^= rnd << 17;
        int64_t delay = ferry_retry_delay_ms(policy, retry, rnd);
        int attempt = res->attempt;
        announce(o, run_id, attempt, retry, max, delay, err);
        ferry_log(FERRY_LOG_WARN, "run %" PRId64 " attempt %d failed on a transient error; retry %d "
                  "of %d in %.1f s: %s", run_id, attempt, retry, max, (double)delay / 1000.0,
                  err->message);
        if (!wait_ms(delay, ro->stop)) return rc;
        /* the same logical run, from its durable checkpoints, in a new attempt of its own
         * (a pull worker's claim covered the first one only) */
        if (run_id > 0) o->resume_run_id = run_id;
        o->fresh = false;
        o->claimed_attempt = 0;
    }
}
